"""Experiment records: :class:`~bidkv.experiments.metrics.ExperimentMetrics`."""

from bidkv.experiments.metrics import ExperimentMetrics

__all__ = ["ExperimentMetrics"]
