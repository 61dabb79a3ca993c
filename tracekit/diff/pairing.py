"""Pairing the runs of a legacy-host recording with those of a typed-host recording.

Two runs are comparable when they replay the same workload (file hash and loader options) on the
same engine configuration with the same strategy, configuration and seed, one through each host
path. A bundle pairs with a bundle; datasets pair run by run on that key. Anything else is an
input error (:class:`IncomparableTracesError`, exit status 2): the diff would compare histories
that were never meant to agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError
from tracekit.trace.bundle import Bundle, TraceDataset, open_trace
from tracekit.trace.validate import check_bundle
from tracekit.trace.values import ALL_COLUMNS

__all__ = ["IncomparableTracesError", "RunPair", "pair_runs"]

#: The diff compares every column of the tables it reads (docs/diff.md).
READS = dict.fromkeys(("decisions", "candidates", "requests", "steps"), ALL_COLUMNS)


class IncomparableTracesError(TracekitError):
    """The two recordings cannot be compared (different runs, host paths or incomplete data)."""


# Manifest parts that must agree, in the order their differences are reported.
_KEY_PARTS = (
    ("workload", "different workload"),
    ("engine", "different engine"),
    ("engine_config", "different engine config"),
    ("strategy", "different strategy"),
    ("strategy_config", "different strategy config"),
    ("seed", "different seed"),
)


@dataclass(frozen=True, slots=True)
class RunPair:
    """One legacy-host run and the typed-host run of the same workload and configuration."""

    legacy_data: TraceDataset
    legacy: Bundle
    typed_data: TraceDataset
    typed: Bundle

    @property
    def strategy_config(self) -> dict[str, Any]:
        """The (shared) policy configuration; empty for user policies."""
        return dict(self.typed.manifest.get("strategy_config") or {})

    def describe(self) -> dict[str, Any]:
        """The shared key, for reports."""
        manifest = self.typed.manifest
        workload = manifest.get("workload") or {}
        return {
            "workload": workload.get("name"),
            "workload_sha256": workload.get("sha256"),
            "engine": manifest.get("engine"),
            "scheduling_policy": manifest.get("scheduling_policy"),
            "strategy": manifest.get("strategy"),
            "seed": manifest.get("seed"),
        }


def _part(manifest: dict[str, Any], name: str) -> Any:
    value = manifest.get(name)
    if name == "workload" and isinstance(value, dict):
        # Name and source path may differ between machines; the content and the options may not.
        value = {k: value.get(k) for k in ("sha256", "format", "options", "num_requests")}
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _key(bundle: Bundle) -> tuple[str, ...]:
    return tuple(_canonical(_part(bundle.manifest, name)) for name, _ in _KEY_PARTS)


def _first_difference(legacy: Bundle, typed: Bundle) -> str | None:
    """A one-line description of the first key part that differs, or None."""
    for name, label in _KEY_PARTS:
        a, b = _part(legacy.manifest, name), _part(typed.manifest, name)
        if _canonical(a) == _canonical(b):
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(
                k for k in set(a) | set(b) if _canonical(a.get(k)) != _canonical(b.get(k))
            )
            shown = ", ".join(f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in keys[:3])
            return f"{label} ({shown})"
        return f"{label} ({a!r} vs {b!r})"
    return None


def _check_bundle(bundle: Bundle, role: str, expected: str) -> None:
    manifest = bundle.manifest
    where = f"{role} {bundle.path}"
    host_path = manifest.get("host_path")
    if host_path in ("legacy", "typed") and host_path != expected:
        raise IncomparableTracesError(
            f"{where}: recorded through the {host_path} host, expected {expected}; pass the "
            "legacy recording first and the typed one second"
        )
    if host_path != expected:
        raise IncomparableTracesError(
            f"{where}: host_path is {host_path!r}; diff compares a 'legacy' recording with a "
            "'typed' one (record them with --host legacy and --host typed)"
        )
    if not bundle.complete:
        raise IncomparableTracesError(
            f"{where}: the recording is incomplete (complete: false); re-record it"
        )
    if manifest.get("partial_candidates"):
        raise IncomparableTracesError(
            f"{where}: holds only partial candidates (imported snapshots); the candidate "
            "universes cannot be compared"
        )
    for table in ("decisions", "candidates"):
        if not bundle.has_table(table):
            raise IncomparableTracesError(f"{where}: has no {table} table; re-record it")


def pair_runs(legacy_path: str | Path, typed_path: str | Path) -> list[RunPair]:
    """Open both recordings and pair their runs.

    Parameters
    ----------
    legacy_path, typed_path
        A bundle or a dataset each; every run under ``legacy_path`` must have been recorded
        through the legacy host and every run under ``typed_path`` through the typed host.

    Returns
    -------
    list of RunPair
        In the legacy recording's order.

    Raises
    ------
    IncomparableTracesError
        A run has the wrong host path, is incomplete or holds partial candidates; two bundles
        differ in workload, engine configuration, strategy, strategy configuration or seed; or
        a dataset run finds no partner (or two).
    tracekit.errors.TraceSchemaError
        A path holds no readable trace.
    """
    legacy_data, typed_data = open_trace(legacy_path), open_trace(typed_path)
    for bundle in (*legacy_data, *typed_data):
        check_bundle(bundle, READS)
    same_host = _same_host_path(legacy_data, typed_data)
    if same_host is not None:
        raise IncomparableTracesError(
            f"both recordings were made through the {same_host} host; record one with "
            "--host legacy and one with --host typed"
        )
    for bundle in legacy_data:
        _check_bundle(bundle, "LEGACY", "legacy")
    for bundle in typed_data:
        _check_bundle(bundle, "TYPED", "typed")
    if len(legacy_data) == 1 and len(typed_data) == 1:
        legacy, typed = legacy_data.bundles[0], typed_data.bundles[0]
        problem = _first_difference(legacy, typed)
        if problem is not None:
            raise IncomparableTracesError(
                f"{legacy.path} and {typed.path} are not comparable: {problem}; record both "
                "from the same workload, engine options and policy configuration"
            )
        return [RunPair(legacy_data, legacy, typed_data, typed)]
    return _pair_datasets(legacy_data, typed_data)


def _same_host_path(legacy: TraceDataset, typed: TraceDataset) -> str | None:
    """The host path both sides share when neither side holds the other's (swapped or twice)."""
    paths = {b.manifest.get("host_path") for b in legacy} | {
        b.manifest.get("host_path") for b in typed
    }
    if len(paths) == 1 and paths <= {"legacy", "typed"}:
        return next(iter(paths))
    return None


def _pair_datasets(legacy_data: TraceDataset, typed_data: TraceDataset) -> list[RunPair]:
    by_key: dict[tuple[str, ...], Bundle] = {}
    for bundle in typed_data:
        key = _key(bundle)
        if key in by_key:
            raise IncomparableTracesError(
                f"TYPED {bundle.path} and {by_key[key].path} record the same run; keep one"
            )
        by_key[key] = bundle
    pairs = []
    seen: set[tuple[str, ...]] = set()
    for bundle in legacy_data:
        key = _key(bundle)
        if key in seen:
            raise IncomparableTracesError(
                f"LEGACY {bundle.path} repeats the run of another legacy bundle; keep one"
            )
        seen.add(key)
        typed = by_key.get(key)
        if typed is None:
            raise IncomparableTracesError(
                f"LEGACY {bundle.path}: no typed run of the same workload, engine config, strategy "
                f"and config under {typed_data.root}; record it with --host typed"
            )
        pairs.append(RunPair(legacy_data, bundle, typed_data, typed))
    unpaired = [b for k, b in by_key.items() if k not in seen]
    if unpaired:
        raise IncomparableTracesError(
            f"TYPED {unpaired[0].path}: no legacy run of the same workload, engine config, "
            f"strategy and config under {legacy_data.root}; record it with --host legacy"
        )
    return pairs
