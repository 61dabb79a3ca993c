"""tracekit: replay, compare and qualify KV-cache preemption policies on recorded scheduler traces.

The engine contracts (``tracekit.hosts``) use the standard library only; everything else needs the
``tracekit`` extra (``pip install ".[tracekit]"`` from the checkout). The two halves ship in one
distribution and share its version, kept in ``bidkv._version``: this is the one place tracekit
reads it.
"""

from bidkv._version import __version__

__all__ = ["__version__"]
