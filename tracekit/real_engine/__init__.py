"""What the real-vLLM and real-SGLang recorders share: one base, the engine-specific parts apart.

``environment`` finds an engine's virtual environment and names its errors; ``process`` runs the
driver in it and reads the driver's messages; ``serve`` is the driver's side of that line
protocol (standard library only: it runs in the engine's environment); ``fidelity`` is the
``tracekit fidelity`` entry point over both engines' comparisons; ``fixtures`` holds what the two
fixture sets share. ``tracekit.vllm`` and ``tracekit.sglang`` keep what is each engine's own.
"""
