"""Recorders: the live-engine recording wrappers (and, later, the simulated-run recorder)."""
