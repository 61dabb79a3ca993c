"""Measured benchmark runs against the embedded engine (``docs/latency.md``, "Measured runs").

- :mod:`.server_log`: the engine configuration of a ``vllm serve`` from its start-up log;
- :mod:`.simulate`: a measured run's requests replayed on the engine, with per-token times;
- :mod:`.spread`: a calibrated model's TTFT residuals, convolved with simulated latencies;
- :mod:`.metrics`: TTFT, TPOT, ITL, E2E and throughput, with their definitions;
- :mod:`.compare`: measured against simulated, with the repeats' noise floor
  (``tracekit accuracy``);
- :mod:`.calibrate`: the step-time model and per-request overheads fitted to measured
  per-request latencies (``tracekit calibrate RESULT ...``).

The loaders of the clients' files are workload loaders (:mod:`tracekit.workloads.measured`).
"""
