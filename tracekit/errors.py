"""The one root of every error the toolkit raises on bad input.

Messages name the file, the field (and row or line where known), what was expected and what
was found, and how to fix it, on one line. The command line turns them into a one-line error and
a non-zero exit code.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ManifestError",
    "TraceSchemaError",
    "TracekitError",
    "WorkloadError",
]


class TracekitError(Exception):
    """Base class of all toolkit errors about user input."""


class ConfigError(TracekitError):
    """A command option or policy configuration value is invalid."""


class ManifestError(TracekitError):
    """An extension manifest fails its JSON Schema or a semantic rule."""


class ManifestReadError(ManifestError):
    """A manifest file cannot be read as JSON at all (bad input rather than a broken rule)."""


class TraceSchemaError(TracekitError):
    """A trace bundle does not match the trace schema (missing columns, wrong version, ...)."""


class WorkloadError(TracekitError):
    """A workload file cannot be read as requests."""
