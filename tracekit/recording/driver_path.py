"""The PYTHONPATH folder of a driver that runs inside another engine's virtual environment.

The real-vLLM and real-SGLang recorders start a driver process with that engine's interpreter.
The driver needs ``bidkv`` and ``tracekit`` and nothing else from this environment: pointing
PYTHONPATH at the project root works for a source checkout but not for an install into
site-packages (it would put this environment's numpy beside the engine's), so the folder holds
links to the two packages only.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

__all__ = ["project_packages_folder"]


def project_packages_folder(prefix: str) -> Path:
    """A new temporary folder holding links to the ``bidkv`` and ``tracekit`` packages.

    The packages are located without importing them (``bidkv`` is reached only through
    :mod:`tracekit.strategies`).
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    for name in ("bidkv", "tracekit"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        source = Path(spec.origin).resolve().parent
        (folder / source.name).symlink_to(source, target_is_directory=True)
    return folder
