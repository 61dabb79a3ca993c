"""KV-memory pressure: :class:`PressureConfig` and :class:`PressureDetector`."""

from bidkv.pressure.detector import PressureConfig, PressureDetector

__all__ = ["PressureConfig", "PressureDetector"]
