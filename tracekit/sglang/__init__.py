"""The real-SGLang recorder: SGLang 0.5.23's scheduling objects driven on a CPU.

``driver`` runs inside the SGLang environment (``scripts/install-sglang-cpu.sh``) and imports only
the standard library and SGLang; ``protocol`` (standard library) and ``record`` (the trace-bundle
writer) run in the project's environment. ``docs/sglang-recorder.md`` describes them.
"""
