"""BidKV for vLLM-HUST hosts: the ``vllm.preemption-policy.v1`` policy and its legacy face.

Hosts load ``bidkv.adapters.vllm_hust.selector.BidkvPreemptionPolicy`` (typed contract) or
``...selector.BidkvVictimSelector`` (legacy ``VictimSelector`` contract) by qualified name. This
package ``__init__`` imports nothing, so discovering the package costs nothing; the modules are:

- :mod:`~bidkv.adapters.vllm_hust.selector`: the public names engines load;
- :mod:`~bidkv.adapters.vllm_hust.config`: ``BidkvSelectorConfig`` and its parsing;
- :mod:`~bidkv.adapters.vllm_hust.scoring`: the utility, the scan, ranking and the default victim;
- :mod:`~bidkv.adapters.vllm_hust.decision`: the ``bidkv`` decision rule (``decide``), shared
  with tracekit's replay;
- :mod:`~bidkv.adapters.vllm_hust.strategies`: the victim rules of the other strategies;
- :mod:`~bidkv.adapters.vllm_hust.metrics`: counters, bounded tables, snapshots;
- :mod:`~bidkv.adapters.vllm_hust.policy`: the policy class.
"""
