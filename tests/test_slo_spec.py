"""Experiment-mode SLO targets refuse what the command line refuses, from Python too."""

from __future__ import annotations

import math

import pytest

from tracekit.errors import ConfigError
from tracekit.experiment import SloSpec


@pytest.mark.parametrize(
    ("ttft", "tpot"), [(math.nan, None), (-1.0, None), (0.0, None), (300.0, math.inf)]
)
def test_bad_targets_are_refused(ttft: float, tpot: float | None) -> None:
    with pytest.raises(ConfigError):
        SloSpec(ttft, tpot)


def test_good_targets_keep_their_label() -> None:
    assert SloSpec(2000.0, 100.0).label() == "TTFT<=2000ms & TPOT<=100ms"
