"""Framework adapters: the bridge between BidKV and serving engines.

``base`` defines the legacy :class:`~bidkv.adapters.base.FrameworkAdapter` contract and the
counters every adapter keeps. Engine-specific adapters live in subpackages (``vllm_hust`` holds
the production preemption policy) and are imported only by the engines that load them, so that
``import bidkv`` stays cheap.
"""
