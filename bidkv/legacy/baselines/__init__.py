"""The original experiments' victim strategies (the ``select_victims`` API) and their registry.

``base`` holds the shared types, ``registry`` the name lookup, and one module per strategy:
``preempt_evict`` (``preempt-evict``, the engine default, LIFO, and ``preempt-evict-sjf``, the
same victims with SJF admission in the hook), ``static_random`` (seeded random control),
``largest_first`` (capacity greedy) and ``bid_ranking`` (``bidkv``: utility ranking through the
bid pool and the solver).

These registry names are the original's, and the production policy has strategies of the same
names with other rules (docs/bidkv-core.md, "Same names, other rules"): a ``select_victims``
strategy returns a ranked list of actions for the scheduler hooks of ``tracekit.experiment``; a
production strategy picks one victim per call of the engine contract.
"""
