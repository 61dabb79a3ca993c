"""``tracekit record vllm --live``: the real vLLM engine (model, sampler and all) on a tiny model.

- :mod:`.driver` runs inside the vLLM environment: one ``LLMEngine`` (V1, CPU, in-process engine
  core) per scenario on the random-weight Llama of :func:`tracekit.recording.tiny_model.
  write_live_model`, requests sent on the wall clock, each step timed.
- :mod:`.record` runs in the project's environment: it starts the driver and writes its records
  into a bundle, with the output token ids in a side table (``outputs.parquet``).
- :mod:`.gate` compares two live bundles' outputs: the output-equality gate.

``docs/vllm-recorder.md`` ("Live engine") describes all three.
"""
