"""What every fidelity report shares: its input error, agreement of values, the exit status.

The vLLM comparison (:mod:`tracekit.vllm.fidelity`) and the SGLang one
(:mod:`tracekit.sglang.fidelity`, :mod:`tracekit.sglang.compare`) build their reports on these;
:mod:`tracekit.real_engine.fidelity` picks which one runs.
"""

from __future__ import annotations

import math
from typing import Any

from tracekit.errors import TracekitError

__all__ = ["FidelityInputError", "FidelityVerdict", "same_value"]


class FidelityInputError(TracekitError):
    """The two bundles are not two recordings of the same run (exit 2, bad input)."""


class FidelityVerdict:
    """A fidelity report's verdict, from its first ``mismatch`` (None: every record agreed)."""

    __slots__ = ()
    mismatch: Any

    @property
    def matched(self) -> bool:
        """Whether every compared record is identical."""
        return self.mismatch is None

    @property
    def exit_code(self) -> int:
        """0 on a match, 1 on a mismatch (2, bad input, is raised as an error)."""
        return 0 if self.matched else 1


def same_value(x: Any, y: Any) -> bool:
    """Whether two recorded values agree: floats to 1e-9 relative, sequences item by item."""
    if isinstance(x, float) and isinstance(y, float):
        return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(same_value(p, q) for p, q in zip(x, y, strict=True))
    return bool(x == y)
