"""What the tests share: scripted engines (also run as scripts in subprocesses), a fake vLLM server, the places of
the repository, the goldens and the benchmark data, and store helpers. ``tests/`` is on pytest's ``pythonpath``
(pyproject.toml), so a test imports them as ``helpers.<module>``."""
