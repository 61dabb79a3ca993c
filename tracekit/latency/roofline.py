"""Today's roofline cost model behind the step-time interface (no dependencies).

:class:`RooflineModel` delegates to :class:`tracekit.engine.clock.CostModel` (imported, not
copied), so its times are exactly those of the engine's ``cost-model`` clock. The figures are
modelled from datasheets, not measured (``docs/engine.md``).
"""

from __future__ import annotations

from typing import Any

from tracekit.engine.clock import COST_MODEL_PRESETS, CostModel
from tracekit.errors import ConfigError
from tracekit.latency.interface import StepShape

__all__ = ["DEFAULT_PRESET", "RooflineModel"]

#: The engine's default preset (``EngineConfig.cost_model``).
DEFAULT_PRESET = "a6000-llama3-8b"


class RooflineModel:
    """The roofline of one forward pass, as the engine's cost-model clock computes it.

    Parameters
    ----------
    cost_model
        The engine cost model to delegate to.
    """

    __slots__ = ("cost_model", "name")

    def __init__(self, cost_model: CostModel) -> None:
        self.cost_model = cost_model
        self.name = f"roofline:{cost_model.name}"

    @classmethod
    def from_preset(cls, preset: str = DEFAULT_PRESET) -> RooflineModel:
        """The model of a named engine preset.

        Raises
        ------
        ConfigError
            When ``preset`` is not one of ``COST_MODEL_PRESETS``.
        """
        try:
            return cls(COST_MODEL_PRESETS[preset])
        except KeyError:
            known = ", ".join(sorted(COST_MODEL_PRESETS))
            raise ConfigError(
                f"--latency roofline: unknown preset {preset!r}; expected one of {known}"
            ) from None

    def step_time_s(self, shape: StepShape) -> float:
        """``CostModel.step_time`` of the shape's totals; an empty step lasts the overhead."""
        if shape.num_sequences == 0:
            return self.cost_model.overhead_s
        return self.cost_model.step_time(
            shape.num_scheduled_tokens, shape.num_sequences, shape.kv_tokens_read
        )

    def step_time_totals_s(self, p: int, tokens: int, prefix: int, d: int, context: int) -> float:
        """:meth:`step_time_s` of any step with these totals."""
        if p + d == 0:
            return self.cost_model.overhead_s
        return self.cost_model.step_time(tokens + d, p + d, prefix + tokens + context + d)

    def describe(self) -> dict[str, Any]:
        """Kind, name, preset and every figure of the cost model."""
        cm = self.cost_model
        return {
            "kind": "roofline",
            "name": self.name,
            "preset": cm.name,
            "measured": False,
            "parameters": {
                "weight_bytes": cm.weight_bytes,
                "kv_bytes_per_token": cm.kv_bytes_per_token,
                "flops_per_token": cm.flops_per_token,
                "bandwidth": cm.bandwidth,
                "peak_flops": cm.peak_flops,
                "bandwidth_efficiency": cm.bandwidth_efficiency,
                "compute_efficiency": cm.compute_efficiency,
                "overhead_s": cm.overhead_s,
                "per_sequence_s": cm.per_sequence_s,
            },
        }
