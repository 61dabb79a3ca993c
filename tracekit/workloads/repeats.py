"""Repeats of a workload: disjoint time windows of it, or the whole of it with different seeds.

Qualification and sweeps need at least three independent repeats for their paired intervals. Both
cut them here, with one rule.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import polars as pl

from tracekit.errors import ConfigError
from tracekit.workloads.model import Workload

__all__ = ["Repeat", "RepeatBy", "RepeatKind", "plan_repeats"]

RepeatKind = Literal["windows", "seeds"]
#: ``tracekit qualify --repeat-by``: a kind, or ``auto`` (seeds where the arrivals are generated,
#: windows elsewhere).
RepeatBy = Literal["auto", "windows", "seeds"]


@dataclasses.dataclass(frozen=True, slots=True)
class Repeat:
    """One repeat: a workload (a window of the input, or all of it) and a seed."""

    index: int
    workload: Workload
    seed: int
    window: tuple[float, float] | None

    @property
    def label(self) -> str:
        """Folder name of the repeat."""
        return f"r{self.index}"


def plan_repeats(workload: Workload, repeats: int, kind: RepeatKind, seed: int) -> list[Repeat]:
    """Cut ``repeats`` repeats from ``workload``.

    ``windows``: disjoint, equal-length time windows of the arrivals, each re-based to 0, so the
    repeats are independent samples of the same traffic. ``seeds``: the whole workload with seeds
    ``seed, seed + 1, ...`` (only seeded strategies and options differ between repeats).
    """
    if kind == "seeds":
        return [Repeat(k, workload, seed + k, None) for k in range(repeats)]
    end = workload.duration_s
    if end <= 0:
        raise ConfigError(f"{workload.source}: all requests arrive at once; use --repeat-by seeds")
    # The last window is closed on the right so that the last arrival belongs to it; its edge is
    # ``end`` itself, because ``end * repeats / repeats`` can round below the last arrival.
    edges = [end * k / repeats for k in range(repeats)] + [end]
    out = []
    for k in range(repeats):
        low, high = edges[k], edges[k + 1]
        inside = pl.col("arrival_s") >= low
        inside &= (
            (pl.col("arrival_s") <= high) if k == repeats - 1 else (pl.col("arrival_s") < high)
        )
        frame = workload.frame.filter(inside).with_columns(pl.col("arrival_s") - low)
        if frame.height == 0:
            raise ConfigError(
                f"{workload.source}: window {k} ({low:.1f}-{high:.1f} s) holds no request; use "
                "fewer --repeats or --repeat-by seeds"
            )
        options = {**workload.options, "repeat_window": [low, high]}
        sliced = dataclasses.replace(workload, frame=frame, options=options)
        out.append(Repeat(k, sliced, seed, (low, high)))
    return out
