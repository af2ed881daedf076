"""Speed and memory scripts (run as ``python -m benchmarks.<script>`` from the repository root) and the sweep files
of the comparative experiments (benchmarks/sweeps/)."""
