"""Bid selection: :class:`SolverConfig` and the greedy :class:`GreedyBidSolver`."""

from bidkv.solver.greedy import GreedyBidSolver, SolverConfig

__all__ = ["GreedyBidSolver", "SolverConfig"]
