"""The original BidKV's bid path and experiment strategies, kept apart from the production policy.

What the original BidKV 0.2.1 published besides its preemption policy: the bid protocol
(``bids``, ``bid_errors``, ``bid_provider``), its switches (``bid_config``), token scoring and bid
building (``token_scoring``, ``bid_builder``), the bid pool, pressure detector and greedy solver
(``bid_pool``, ``pressure``, ``solver``), the ``select_victims`` strategies of the paper's
experiments (``baselines``), the adapter contract (``adapter``) and the per-run record
(``run_metrics``). ``tracekit.experiment`` re-runs the paper's matrix with the strategies; the
original README's examples use the rest through the top-level ``bidkv`` names, which load these
modules on first use (docs/bidkv-core.md).

The production policy (``bidkv.adapters.vllm_hust``) imports nothing from here, and nothing here
imports it. Names that would be mistaken for the production policy's differ on purpose: the
request snapshot is :class:`~bidkv.legacy.baselines.base.BaselineCandidate` (published as
``bidkv.RequestState``), and the bid utility is :func:`~bidkv.legacy.bids.bid_utility` with
``BID_UTILITY_EPSILON = 1e-3``.
"""
