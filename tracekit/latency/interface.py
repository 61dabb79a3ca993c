"""The step-time boundary as latency models see it: a step's make-up, the models' protocol.

The engine defines both (``tracekit.engine.step_time``), because it builds the shapes and calls
the models; this package implements the protocol and imports the engine, never the reverse.
They are re-exported here so that a model is written against one module of its own package.
A :class:`StepShape` describes one scheduled step (one forward pass) the way an engine's step
loop knows it: each prefill chunk with the tokens it schedules and the tokens its request has
already computed, and each decoding sequence with its context. A :class:`StepTimeModel` turns a
shape into seconds. The engine's roofline, the AIConfigurator and AISimulate tables and a model
calibrated from a live engine all sit behind the same protocol (``docs/latency.md``).
"""

from __future__ import annotations

from tracekit.engine.step_time import PrefillChunk, StepShape, StepTimeModel

__all__ = ["PrefillChunk", "StepShape", "StepTimeModel"]
