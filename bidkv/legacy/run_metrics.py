"""The per-run metric record the experiment reports share (docs/bidkv-core.md, "Public names")."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ExperimentMetrics"]


@dataclass(frozen=True)
class ExperimentMetrics:
    """Headline metrics of one experiment run.

    Parameters
    ----------
    slo_attainment_rate : float
        Share of successful requests meeting the SLO, in ``[0, 1]``.
    p99_ttft_ms : float
        99th-percentile time to first token, milliseconds.
    throughput_rps : float
        Successful requests per second.
    eviction_coverage : float
        ``min(1, evictions / successes)``.
    quality_rouge1 : float or None, optional
        ROUGE-1 of the outputs, when the task has references.
    quality_em : float or None, optional
        Exact-match score, when the task has references.
    adapter_metrics : dict of str to int, optional
        The adapter's counters (``BaseAdapterMetrics.as_dict()``).
    """

    slo_attainment_rate: float
    p99_ttft_ms: float
    throughput_rps: float
    eviction_coverage: float
    quality_rouge1: float | None = None
    quality_em: float | None = None
    adapter_metrics: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """Return the metrics as a dict, one key per field (``adapter_metrics`` copied)."""
        return {
            "slo_attainment_rate": self.slo_attainment_rate,
            "p99_ttft_ms": self.p99_ttft_ms,
            "throughput_rps": self.throughput_rps,
            "eviction_coverage": self.eviction_coverage,
            "quality_rouge1": self.quality_rouge1,
            "quality_em": self.quality_em,
            "adapter_metrics": dict(self.adapter_metrics),
        }
