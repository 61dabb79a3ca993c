"""The single source of the distribution's version."""

__version__ = "0.3.0"
