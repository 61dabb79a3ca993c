"""tracekit: replay, compare and qualify KV-cache preemption policies on recorded scheduler traces.

The engine contracts (``tracekit.hosts``) use the standard library only; everything else needs the
``tracekit`` extra (``pip install 'bidkv[tracekit]'``).
"""

from bidkv._version import __version__

__all__ = ["__version__"]
