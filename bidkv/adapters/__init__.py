"""Framework adapters: the bridge between BidKV and serving engines.

``vllm_hust`` holds the production preemption policy. Engine-specific adapters are imported only
by the engines that load them, so that ``import bidkv`` stays cheap.
"""
