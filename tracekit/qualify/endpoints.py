"""The verdict rule's endpoints, their margins and the error control, fixed before the runs.

The rule (docs/report.md, "Effectiveness (per cell and strategy)") judges a strategy against the
built-in rule on every endpoint below. Each endpoint has a direction (which way is better), a
scale (a change relative to the built-in runs' mean, in percent, or a difference of shares, in
percentage points) and a *practical margin*: the smallest change that matters. Every endpoint is
a guardrail (it must not get worse by more than its margin); the *primary* ones also count as a
benefit when they improve by more than their margin.

``tracekit qualify`` writes the rule into ``qualify.json`` before any run starts
(:meth:`VerdictRule.to_dict`), so the verdicts are computed with what was registered, and the
report prints it. ``--margin NAME=VALUE`` and ``--primary NAME,...`` change it
(:func:`parse_margins`, :func:`parse_primary`); ``--alpha`` sets the family-wise error rate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tracekit.defaults import DEFAULT_ALPHA
from tracekit.errors import ConfigError

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_ENDPOINTS",
    "MIN_REPEATS",
    "Endpoint",
    "VerdictRule",
    "parse_margins",
    "parse_primary",
]

#: Fewer paired repeats than this leave every label inconclusive.
MIN_REPEATS = 3

Better = Literal["higher", "lower"]
Scale = Literal["relative", "absolute"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One endpoint of the rule.

    Attributes
    ----------
    name
        Its name on the command line and in ``qualification.json`` (``ttft_p99``).
    column
        The ``cells.parquet`` column it is computed from (``ttft_p99_s``).
    title
        What the report calls it.
    group
        ``efficiency``, ``throughput`` or ``latency``.
    better
        ``higher`` or ``lower``.
    scale
        ``relative``: the paired change in percent of the built-in runs' mean;
        ``absolute``: the paired difference of a share, in percentage points.
    margin
        The practical margin, in the scale's unit (> 0).
    primary
        Whether an improvement beyond the margin counts as a benefit.
    """

    name: str
    column: str
    title: str
    group: Literal["efficiency", "throughput", "latency"]
    better: Better
    scale: Scale
    margin: float
    primary: bool = False

    @property
    def unit(self) -> str:
        """``%`` (relative) or ``pp`` (percentage points)."""
        return "%" if self.scale == "relative" else "pp"

    @property
    def sign(self) -> int:
        """+1 when higher is better, -1 when lower is: ``gain = sign * change``."""
        return 1 if self.better == "higher" else -1

    def to_dict(self) -> dict[str, Any]:
        """The endpoint as ``qualify.json`` and ``qualification.json`` record it."""
        return {**dataclasses.asdict(self), "unit": self.unit}


# The defaults. Margins follow what reviewers of scheduler changes accept (vLLM PR #49675
# registered a throughput ratio >= 0.95 and a P99 TTFT ratio <= 1.10): 10% for tail latencies,
# 5% for medians and the P95, 2% for throughput, 1 pp for SLO attainment; recomputation
# counts from a tenth more truly recomputed tokens, or half a point more of all computed tokens.
DEFAULT_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("recomputed_tokens", "truly_recomputed_tokens",
             "recomputed tokens (truly recomputed)", "efficiency", "lower", "relative", 10.0,
             primary=True),
    Endpoint("recompute_tax", "recompute_tax",
             "recompute tax (recomputed / computed tokens)", "efficiency", "lower", "absolute",
             0.5, primary=True),
    Endpoint("output_throughput", "output_tokens_per_s",
             "output throughput (tokens/s)", "throughput", "higher", "relative", 2.0,
             primary=True),
    Endpoint("goodput", "goodput_rps",
             "goodput (requests/s meeting the SLO)", "throughput", "higher", "relative", 2.0,
             primary=True),
    Endpoint("ttft_p50", "ttft_p50_s", "TTFT P50", "latency", "lower", "relative", 5.0),
    Endpoint("ttft_p99", "ttft_p99_s", "TTFT P99", "latency", "lower", "relative", 10.0),
    Endpoint("tpot_p50", "tpot_p50_s", "TPOT P50", "latency", "lower", "relative", 5.0),
    Endpoint("tpot_p99", "tpot_p99_s", "TPOT P99", "latency", "lower", "relative", 10.0),
    Endpoint("e2e_p95", "e2e_p95_s", "E2E P95", "latency", "lower", "relative", 5.0,
             primary=True),
    Endpoint("e2e_p99", "e2e_p99_s", "E2E P99", "latency", "lower", "relative", 10.0),
    Endpoint("slo_attainment", "slo_attainment",
             "SLO attainment", "latency", "higher", "absolute", 1.0),
)  # fmt: skip
_NAMES = tuple(e.name for e in DEFAULT_ENDPOINTS)


@dataclass(frozen=True, slots=True)
class VerdictRule:
    """The pre-registered rule: endpoints with margins, the error rate and the correction.

    Attributes
    ----------
    endpoints
        The endpoints judged, in report order.
    alpha
        The family-wise error rate (0 < alpha < 1): with probability at least ``1 - alpha``
        every label of the report is right at once.
    min_repeats
        Paired repeats below which a cell is inconclusive.
    correction
        ``bonferroni``: each interval has confidence ``1 - alpha / m``, ``m`` being the number
        of comparisons of the report (strategies x loads x endpoints), so all of them hold at
        once with probability ``1 - alpha``.
    """

    endpoints: tuple[Endpoint, ...] = DEFAULT_ENDPOINTS
    alpha: float = DEFAULT_ALPHA
    min_repeats: int = MIN_REPEATS
    correction: Literal["bonferroni"] = "bonferroni"

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not (0 < self.alpha < 1):
            raise ConfigError(f"--alpha {self.alpha!r}: expected a number in (0, 1); pass 0.05")
        if not self.endpoints:
            raise ConfigError("the verdict rule needs at least one endpoint")
        if not any(e.primary for e in self.endpoints):
            raise ConfigError(
                "--primary: no primary endpoint; name at least one of "
                + ", ".join(e.name for e in self.endpoints)
            )
        for endpoint in self.endpoints:
            if not (math.isfinite(endpoint.margin) and endpoint.margin > 0):
                raise ConfigError(
                    f"--margin {endpoint.name}={endpoint.margin!r}: expected a finite number "
                    f"> 0 (in {endpoint.unit})"
                )

    @property
    def primary(self) -> tuple[Endpoint, ...]:
        """The primary endpoints."""
        return tuple(e for e in self.endpoints if e.primary)

    def confidence(self, comparisons: int) -> float:
        """Each interval's confidence for a family of ``comparisons`` intervals."""
        return 1.0 - self.alpha / max(1, comparisons)

    def with_settings(
        self,
        margins: Mapping[str, float] | None = None,
        primary: Sequence[str] | None = None,
        alpha: float | None = None,
    ) -> VerdictRule:
        """A copy with some margins, the primary set and/or ``alpha`` replaced."""
        margins = dict(margins or {})
        endpoints = tuple(
            dataclasses.replace(
                e,
                margin=float(margins.get(e.name, e.margin)),
                primary=e.primary if primary is None else e.name in primary,
            )
            for e in self.endpoints
        )
        return VerdictRule(endpoints, self.alpha if alpha is None else alpha, self.min_repeats)

    def to_dict(self) -> dict[str, Any]:
        """The rule as ``qualify.json`` records it (``rule``)."""
        return {
            "endpoints": [e.to_dict() for e in self.endpoints],
            "alpha": self.alpha,
            "min_repeats": self.min_repeats,
            "correction": self.correction,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> VerdictRule:
        """The rule recorded in ``qualify.json`` (the defaults when it records none).

        Raises
        ------
        tracekit.errors.ConfigError
            For a recorded rule that cannot be read (an unknown field or value).
        """
        if not data:
            return cls()
        try:
            endpoints = tuple(
                Endpoint(**{k: v for k, v in e.items() if k != "unit"}) for e in data["endpoints"]
            )
            return cls(
                endpoints, float(data["alpha"]), int(data["min_repeats"]), data["correction"]
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"qualify.json: the recorded verdict rule cannot be read ({exc}); re-run "
                "tracekit qualify"
            ) from None


def _known(name: str, option: str) -> str:
    name = name.strip()
    if name not in _NAMES:
        raise ConfigError(f"{option} {name!r}: unknown endpoint; use one of {', '.join(_NAMES)}")
    return name


def parse_margins(values: Sequence[str]) -> dict[str, float]:
    """``--margin NAME=VALUE`` (repeatable, or comma-separated) as ``{name: margin}``.

    Raises
    ------
    tracekit.errors.ConfigError
        For an unknown name or a value that is not a finite number > 0.
    """
    margins: dict[str, float] = {}
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            name, sep, number = part.partition("=")
            if not sep:
                raise ConfigError(
                    f"--margin {part!r}: expected NAME=VALUE; pass e.g. --margin ttft_p99=10"
                )
            name = _known(name, "--margin")
            try:
                margin = float(number)
            except ValueError:
                margin = math.nan
            if not (math.isfinite(margin) and margin > 0):
                raise ConfigError(
                    f"--margin {part!r}: expected a finite number > 0; pass e.g. --margin {name}=5"
                )
            margins[name] = margin
    return margins


def parse_primary(text: str | None) -> tuple[str, ...] | None:
    """``--primary a,b`` as endpoint names (``None``: keep the defaults)."""
    if text is None:
        return None
    names = tuple(_known(n, "--primary") for n in text.split(",") if n.strip())
    if not names:
        raise ConfigError("--primary: name at least one endpoint, e.g. --primary goodput")
    return names
