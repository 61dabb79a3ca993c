"""The original BidKV's bid path and experiment strategies, kept apart from the production policy.

What the original BidKV 0.2.1 published besides its preemption policy and what something here
still uses: the bid types (``bids``), its switches (``bid_config``, which the original README's
first example builds), token scoring and bid building (``token_scoring``, ``bid_builder``), the
bid pool and greedy solver (``bid_pool``, ``solver``) and the ``select_victims`` strategies of
the paper's experiments (``baselines``), which rank through the pool and the solver.
``tracekit.experiment`` re-runs the paper's matrix with the strategies; the original README's
examples use them through the top-level ``bidkv`` names, which load these modules on first use
(docs/bidkv-core.md). The original's adapter contract, pressure detector, bid provider and
errors, and per-run record had no caller and are gone.

The production policy (``bidkv.adapters.vllm_hust``) imports nothing from here, and nothing here
imports it. Names that would be mistaken for the production policy's differ on purpose: the
request snapshot is :class:`~bidkv.legacy.baselines.base.BaselineCandidate` (published as
``bidkv.RequestState``), and the bid utility is :func:`~bidkv.legacy.bids.bid_utility` with
``BID_UTILITY_EPSILON = 1e-3``.
"""
