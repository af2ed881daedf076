"""The sandbox's child: the harness that runs one job's untrusted program and its tests, in its own process.

:mod:`selfevo.verifiers.sandbox` (the parent) starts ``entry.py`` of this package as a program, ``python -I -B
entry.py``, in a fresh work directory, and sends the job's configuration (pickled) on stdin. Every module here uses
only the standard library and never imports ``selfevo``: ``-I`` leaves the project off ``sys.path``, and under the
jail the project folder is not even visible. ``entry.py`` loads the other modules itself, from their files, under a
private name (see its docstring); this ``__init__`` is not run in the child, and tests import the modules as
``selfevo.verifiers.sandbox_child.<module>`` through :func:`selfevo.verifiers.sandbox.harness_for_tests`. What each
layer guarantees is described in the parent's module docstring and in ``docs/sandbox.md``.

Modules, in the order the child uses them (each imports only modules listed before it in ``entry.MODULES``):

* ``entry``: the program; loads the other modules, then hands over to ``channel``;
* ``channel``: the entry point and the result channel: read the configuration, then write nonce-tagged records to
  the result pipe;
* ``isolation``: namespaces, the minimal root (else the read-only host), the uid drop, rlimits;
* ``guard``: in-process refusals of process creation, signals, sockets, ctypes and writes outside the work dir;
* ``instrument`` and ``judge``, what decides a test: test code instrumented so that the judge (``judge._Judge``)
  compares, truth-tests and vets values on plain data;
* ``snapshot``, what the program may not change: a snapshot of modules, classes and process hooks taken before the
  program runs, restored after every step (``_take_snapshot``, ``_check_integrity``), and the audit hook;
* ``steps`` and ``bounded``, running steps: loading the program, exec/pytest/call/io steps under time and output
  limits;
* ``oracles``: the comparisons of call and io steps: EvalPlus's and LiveCodeBench's, stdout matching.
"""
