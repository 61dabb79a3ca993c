"""The sweep matrix file: checked against its JSON Schema, then parsed into a :class:`Matrix`.

A matrix names every dimension of a qualification sweep: workloads, rates, strategies, repeats,
engine configurations and a grid of production-policy settings (``docs/sweep.md``). Parsing
checks everything that can be checked without loading a workload: key names and types, strategy
names and policy settings (through :func:`tracekit.strategies.resolve_strategy`) and engine
values (through :func:`tracekit.engine.config.make_engine_config`). Every problem is one
:class:`~tracekit.errors.ConfigError` line naming the file, the key and the fix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tracekit.analysis.serving import SloTargets
from tracekit.engine import EngineConfig
from tracekit.engine.config import make_engine_config, recorded_form
from tracekit.errors import ConfigError
from tracekit.strategies import (
    KNOWN_STRATEGY_NAMES,
    POLICY_SETTINGS,
    HostPath,
    canonical_strategy,
    did_you_mean,
    resolve_strategy,
)
from tracekit.sweep.checks import Checker, matrix_schema

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import tomli as tomllib

__all__ = [
    "DEFAULT_ENGINE",
    "EngineSpec",
    "Matrix",
    "PolicyPoint",
    "RateUnit",
    "RepeatKind",
    "WorkloadSpec",
    "is_production",
    "load_matrix",
]

RateUnit = Literal["scale", "rps"]
RepeatKind = Literal["windows", "seeds"]

#: The engine configuration of an ``[[engines]]`` entry that sets nothing: ``EngineConfig``'s
#: defaults, as for ``tracekit record sim``.
DEFAULT_ENGINE = EngineConfig()

ENGINE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineConfig))
# Settings each production strategy sets itself: a grid over them makes no sense.
RESERVED_SETTINGS = ("enable_utility_victim_selection", "utility_strategy")


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """One ``[[workloads]]`` entry: a file and how to load it.

    Attributes
    ----------
    key
        The entry's key in the matrix (``workloads[0]``), for error messages.
    path
        The file to read (relative paths are resolved against the matrix file's folder).
    source
        The path as written in the matrix; recorded in manifests so that run ids do not depend
        on where the project is checked out.
    name
        Partition label; ``None`` takes the loader's name (the file stem for most formats).
    format, limit, window, priority_seed, priority_levels, options
        Arguments of :func:`tracekit.workloads.load_workload`.
    shared_prefix_tokens, prefix_groups, prefix_seed
        A synthetic shared prompt prefix (:func:`tracekit.workloads.with_shared_prefix`);
        ``shared_prefix_tokens`` None: none.
    client
        The ``client`` table: the load generator (``docs/sweep.md``, "Client models").
    """

    key: str
    path: Path
    source: str
    name: str | None
    format: str | None
    limit: int | None
    window: tuple[float, float | None] | None
    priority_seed: int | None
    priority_levels: int
    options: dict[str, Any]
    shared_prefix_tokens: int | None = None
    prefix_groups: int | None = None
    prefix_seed: int = 0
    # The entry's client model (docs/sweep.md, "Client models"): LoadSpec fields, at every rate.
    client: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One ``[[engines]]`` entry: a label (the ``config=`` partition) and its configuration."""

    label: str
    config: EngineConfig
    settings: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PolicyPoint:
    """One point of the policy-settings grid (the settings production strategies receive).

    Attributes
    ----------
    label
        ``p`` and 8 hex digits of the settings' hash; empty when the matrix has no ``[policy]``.
    settings
        Setting name -> value, in the order of the ``[policy]`` table.
    """

    label: str
    settings: dict[str, Any]

    @property
    def describe(self) -> str:
        """``name=value,...`` or ``defaults``: the policy part of a cell label."""
        return ",".join(f"{k}={v}" for k, v in self.settings.items()) or "defaults"


@dataclass(frozen=True, slots=True)
class Matrix:
    """A parsed, validated sweep matrix (see ``docs/sweep.md`` for every key).

    Attributes
    ----------
    path, sha256
        The matrix file and the SHA-256 of its bytes.
    name
        The sweep's name (default: the file stem).
    seed
        Base seed: repeat ``k`` of kind ``seeds`` uses ``seed + k``.
    strategies
        Strategy names as written (``builtin``, production names, ``module:Object``).
    candidate
        The strategy the report qualifies (``None``: none is production).
    host
        Host path of every policy: ``typed`` or ``legacy``.
    rate_unit, rates
        ``scale`` (rate_scale of the trace) or ``rps`` (absolute mean requests/s), and values.
    repeats, repeat_kind
        Number of repeats and how they differ (disjoint ``windows`` or ``seeds``).
    workloads, engines, policy
        Workload entries, engine configurations and policy-grid points (at least one each).
    policy_grid
        The ``[policy]`` table as lists (empty: production strategies use their defaults).
    slo
        Latency targets of the SLO-attainment column of ``cells.parquet``.
    """

    path: Path
    sha256: str
    name: str
    seed: int
    strategies: tuple[str, ...]
    candidate: str | None
    host: HostPath
    rate_unit: RateUnit
    rates: tuple[float, ...]
    repeats: int
    repeat_kind: RepeatKind
    workloads: tuple[WorkloadSpec, ...]
    engines: tuple[EngineSpec, ...]
    policy: tuple[PolicyPoint, ...]
    policy_grid: dict[str, list[Any]]
    slo: SloTargets

    def to_dict(self) -> dict[str, Any]:
        """The expanded matrix as JSON-compatible values (written to ``sweep.json``)."""
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "name": self.name,
            "seed": self.seed,
            "strategies": list(self.strategies),
            "candidate": self.candidate,
            "host": self.host,
            "rate_unit": self.rate_unit,
            "rates": list(self.rates),
            "repeats": {"count": self.repeats, "kind": self.repeat_kind},
            "workloads": [
                {
                    "source": w.source,
                    "name": w.name,
                    "format": w.format,
                    "limit": w.limit,
                    "window": list(w.window) if w.window else None,
                    "priority_seed": w.priority_seed,
                    "priority_levels": w.priority_levels,
                    "options": w.options,
                    # Token content: only when set, so matrices without it describe as before.
                    **(
                        {
                            "shared_prefix_tokens": w.shared_prefix_tokens,
                            "prefix_groups": w.prefix_groups,
                            "prefix_seed": w.prefix_seed,
                        }
                        if w.shared_prefix_tokens is not None
                        else {}
                    ),
                }
                for w in self.workloads
            ],
            "engines": [
                {"label": e.label, "config": recorded_form(e.config)} for e in self.engines
            ],
            "policy_grid": self.policy_grid,
            "policy_points": [{"label": p.label, "settings": p.settings} for p in self.policy],
            "slo": dataclasses.asdict(self.slo),
        }


def is_production(strategy: str) -> bool:
    """Whether ``strategy`` names the production policy (so it takes policy settings)."""
    return strategy != "builtin" and ":" not in strategy


def digest(value: Any) -> str:
    """Eight hex digits of the SHA-256 of ``value`` as sorted JSON: a short, stable label."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


def load_matrix(path: str | Path) -> Matrix:
    """Read and validate a sweep matrix file.

    Parameters
    ----------
    path
        A TOML file (``docs/sweep.md`` describes its keys).

    Returns
    -------
    Matrix
        The validated matrix, with the policy grid expanded into its points.

    Raises
    ------
    tracekit.errors.ConfigError
        For an unreadable file, invalid TOML, an unknown key, a bad type or value, an empty list,
        an unknown strategy, a bad policy setting or engine value (one line each).
    """
    path = Path(path)
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the sweep matrix ({exc.strerror}); pass a TOML matrix file"
        ) from None
    try:
        data = tomllib.loads(raw_bytes.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; save the matrix as UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix the syntax there") from None
    check = Checker(path)
    check.schema(data, matrix_schema(ENGINE_FIELDS, POLICY_SETTINGS))
    seed = data.get("seed", 0)
    policy_grid = _policy_grid(check, data.get("policy", {}))
    points = _policy_points(policy_grid)
    strategies = _strategies(check, data["strategies"], points, seed)
    candidate = _candidate(check, data.get("candidate"), strategies)
    rate_unit, rates = _rates(check, data)
    repeats, repeat_kind = _repeats(data.get("repeats", 1))
    return Matrix(
        path=path,
        sha256=hashlib.sha256(raw_bytes).hexdigest(),
        name=data.get("name", path.stem).strip(),
        seed=seed,
        strategies=strategies,
        candidate=candidate,
        host=data.get("host", "typed"),
        rate_unit=rate_unit,
        rates=rates,
        repeats=repeats,
        repeat_kind=repeat_kind,
        workloads=_workloads(check, data["workloads"]),
        engines=_engines(check, data.get("engines", [{}])),
        policy=points,
        policy_grid=policy_grid,
        slo=_slo(check, data.get("slo", {})),
    )


def _policy_grid(check: Checker, table: Mapping[str, Any]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for name, values in table.items():
        key = f"policy.{name}"
        if name in RESERVED_SETTINGS:
            raise check.fail(
                key, "is set by each strategy", "list the strategies under 'strategies' instead"
            )
        values = values if isinstance(values, list) else [values]
        check.unique(key, values)
        grid[name] = values
    return grid


def _policy_points(grid: Mapping[str, list[Any]]) -> tuple[PolicyPoint, ...]:
    if not grid:
        return (PolicyPoint("", {}),)
    names = list(grid)
    points = []
    for combo in itertools.product(*(grid[n] for n in names)):
        settings = dict(zip(names, combo, strict=True))
        points.append(PolicyPoint(f"p{digest(settings)}", settings))
    return tuple(points)


def _strategies(
    check: Checker, value: Any, points: Sequence[PolicyPoint], seed: int
) -> tuple[str, ...]:
    resolved: list[str] = []
    for index, name in enumerate(value):
        key = f"strategies[{index}]"
        name = name.strip()
        if is_production(name):
            try:
                name = canonical_strategy(name)
            except ValueError:
                raise check.fail(
                    key,
                    f"names unknown strategy {name!r}{did_you_mean(name)}",
                    f"use builtin, module:Object or one of {', '.join(KNOWN_STRATEGY_NAMES)}",
                ) from None
        for point in points:
            try:
                resolve_strategy(name, point.settings, seed=seed)
            except ConfigError as exc:
                # builtin checks the policy settings too: their error is the point's.
                if not is_production(name) and name != "builtin":
                    reason = str(exc).split(": ", 1)[-1]
                    raise ConfigError(f"{check.path}: key '{key}' {name!r}: {reason}") from None
                reason = str(exc).removeprefix("--policy-config: ")
                raise check.fail(
                    "policy", f"point {point.describe}: {reason}", "fix that value in its list"
                ) from None
        resolved.append(name)
    check.unique("strategies", resolved)
    return tuple(resolved)


def _candidate(check: Checker, value: Any, strategies: Sequence[str]) -> str | None:
    if value is None:
        production = [s for s in strategies if is_production(s)]
        return "bidkv" if "bidkv" in production else (production[-1] if production else None)
    name = value.strip()
    if is_production(name):
        with contextlib.suppress(ValueError):
            name = canonical_strategy(name)
    if name not in strategies:
        raise check.fail(
            "candidate", f"{name!r} is not in 'strategies'", "add it there or pick one listed"
        )
    return name


def _rates(check: Checker, data: Mapping[str, Any]) -> tuple[RateUnit, tuple[float, ...]]:
    if "rate_scale" in data and "rate_rps" in data:
        raise check.fail(
            "rate_rps", "and 'rate_scale' are both set", "keep one of them (see docs/sweep.md)"
        )
    unit: RateUnit = "rps" if "rate_rps" in data else "scale"
    key = "rate_rps" if unit == "rps" else "rate_scale"
    values = data.get(key, [1.0])
    rates = tuple(check.number(f"{key}[{i}]", v, positive=True) for i, v in enumerate(values))
    check.unique(key, rates)
    return unit, rates


def _repeats(value: int | Mapping[str, Any]) -> tuple[int, RepeatKind]:
    if not isinstance(value, Mapping):
        return value, "windows"
    return value.get("count", 1), value.get("kind", "windows")


def _workloads(check: Checker, entries: Sequence[Any]) -> tuple[WorkloadSpec, ...]:
    specs = []
    for index, entry in enumerate(entries):
        key = f"workloads[{index}]"
        table = {"path": entry} if isinstance(entry, str) else entry
        source = table["path"].strip()
        file = Path(source)
        if not file.is_absolute():
            file = check.path.parent / file
        if not file.is_file():
            raise check.fail(
                f"{key}.path",
                f"names no file ({file})",
                "give a path relative to the matrix file's folder, or an absolute one",
            )
        fmt = table.get("format")
        specs.append(
            WorkloadSpec(
                key=key,
                path=file,
                source=source,
                name=table.get("name"),
                format=None if fmt is None else fmt.strip(),
                limit=table.get("limit"),
                window=_window(check, f"{key}.window", table.get("window")),
                priority_seed=table.get("priority_seed"),
                priority_levels=table.get("priority_levels", 3),
                options=dict(table.get("options", {})),
                shared_prefix_tokens=table.get("shared_prefix_tokens"),
                prefix_groups=table.get("prefix_groups"),
                prefix_seed=table.get("prefix_seed", 0),
                client=dict(table.get("client", {})),
            )
        )
    return tuple(specs)


def _window(check: Checker, key: str, value: Any) -> tuple[float, float | None] | None:
    if value is None:
        return None
    start = check.number(f"{key}[0]", value[0])
    end = check.number(f"{key}[1]", value[1]) if len(value) == 2 else None
    if start < 0 or (end is not None and end <= start):
        raise check.fail(key, f"{value} is empty or negative", "use 0 <= start_s < end_s")
    return start, end


def _engines(check: Checker, entries: Sequence[Mapping[str, Any]]) -> tuple[EngineSpec, ...]:
    specs = []
    for index, entry in enumerate(entries):
        key = f"engines[{index}]"
        table = dict(entry)
        label = table.pop("label", None)
        try:
            config = make_engine_config(**table)
        except ConfigError as exc:
            reason = str(exc).removeprefix("engine configuration: ")
            raise check.fail(
                key, f"is invalid: {reason}", "fix that field (docs/engine.md)"
            ) from None
        if label is None:
            label = "default" if config == DEFAULT_ENGINE else f"e{digest(recorded_form(config))}"
        specs.append(EngineSpec(label, config, table))
    check.unique(
        "engines",
        [recorded_form(s.config) for s in specs],
        [s.label for s in specs],
        "give each entry different settings: a label alone does not make a configuration",
    )
    check.unique("engines", [s.label for s in specs])
    return tuple(specs)


def _slo(check: Checker, table: Mapping[str, Any]) -> SloTargets:
    default = SloTargets()
    ttft = check.number("slo.ttft_s", table.get("ttft_s", default.ttft_s), positive=True)
    tpot = table.get("tpot_s", default.tpot_s)
    if tpot is False:
        return SloTargets(ttft, None)
    return SloTargets(ttft, check.number("slo.tpot_s", tpot, positive=True))
