"""Record the committed SGLang fixtures again and compare them as they stream, writing nothing.

The live test (``tests/test_sglang_live.py``) must show that the installed SGLang still makes
every committed fixture (:mod:`tracekit.sglang.fixtures`). Recording a fixture again as a bundle
and comparing the two bundles costs more than SGLang's own loop: the driver's 130 MB of step
records for all fixtures are decoded, turned into trace tables, written, read back and decoded
again. :func:`check_fixtures` instead runs every fixture in one driver process and compares each
step record's text with the committed ``sglang-steps.jsonl.xz`` line for line (the committed line
*is* the driver's record, re-encoded with the same separators, see
:func:`tracekit.sglang.record.record_sglang`), so the step records are never decoded unless they
differ. That is stricter than comparing the step streams field by field (every field of every
record must be equal) and cheaper. Also compared: the scenario (configuration and requests)
against the committed ``sglang-scenario.json``, the number of steps, and each request's outcome
(:data:`tracekit.sglang.record.OUTCOME_COLUMNS`) against the committed ``requests`` table.

Only a record's ``run`` (its place in the batch it was recorded in) is left out of the
comparison, and the order in which one arrival's preemptions were requeued (SGLang's set order,
different in every run: :func:`tracekit.sglang.protocol.unordered_requeue`). Other runs that
need SGLang can share the driver (``also``): importing SGLang takes 10 to 20 s, more than most
fixtures.
"""

from __future__ import annotations

import json
import lzma
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.real_engine.environment import SGLANG
from tracekit.real_engine.process import record_runs, run_messages
from tracekit.sglang.fixtures import FIXTURES, FIXTURES_DIR
from tracekit.sglang.protocol import (
    PROTOCOL_VERSION,
    SglangConfig,
    scenario_message,
    unordered_requeue,
)
from tracekit.sglang.record import (
    OUTCOME_COLUMNS,
    SCENARIO_FILE,
    STEPS_FILE,
    SglangDriverError,
    record_run,
    request_outcome,
    request_rows,
    run_driver,
)
from tracekit.workloads import Workload

__all__ = ["FixtureCheck", "check_fixtures"]

# A step record starts with its kind and run: {"kind":"step","run":<index>,"step":...}.
_STEP_HEAD = '{"kind":"step","run":'


@dataclass(frozen=True, slots=True)
class FixtureCheck:
    """One fixture recorded again: ``difference`` is None when it matched the committed one."""

    name: str
    num_steps: int
    difference: str | None

    @property
    def matched(self) -> bool:
        """Whether the new recording equals the committed one."""
        return self.difference is None


def check_fixtures(
    root: Path,
    names: Sequence[str] | None = None,
    *,
    venv: str | os.PathLike[str] | None = None,
    also: Sequence[tuple[Workload, Path, SglangConfig]] = (),
) -> tuple[list[FixtureCheck], list[Path]]:
    """Record fixtures (all, or ``names``) again from the installed SGLang; compare each.

    Parameters
    ----------
    root
        The repository root (the fixtures and their workloads are read from it).
    names
        The fixtures to check (default: every one).
    venv
        The SGLang environment (see :func:`tracekit.sglang.record.find_sglang_python`).
    also
        Further runs ``(workload, out, config)`` to record as bundles in the same driver
        process, before the fixtures.

    Returns
    -------
    tuple
        One :class:`FixtureCheck` per fixture, in order, and the bundles of ``also``.
    """
    chosen = list(names) if names else list(FIXTURES)
    extra = [(request_rows(w), c) for w, _, c in also]
    rows = [request_rows(FIXTURES[n].load_workload(root)) for n in chosen]
    scenarios = [scenario_message(i, c, r) for i, (r, c) in enumerate(extra)]
    scenarios += [
        scenario_message(len(extra) + i, FIXTURES[n].config, r)
        for i, (n, r) in enumerate(zip(chosen, rows, strict=True))
    ]
    first_fixture = len(extra)

    def parse(line: str) -> dict[str, Any]:
        # A fixture's step record stays text (its run index cut off): it is compared as text.
        if line.startswith(_STEP_HEAD):
            comma = line.index(",", len(_STEP_HEAD))
            run = int(line[len(_STEP_HEAD) : comma])
            if run >= first_fixture:
                return {"kind": "step", "run": run, "text": line[comma + 1 :].rstrip("\n")}
        message: dict[str, Any] = json.loads(line)
        return message

    messages = run_driver(scenarios, venv=venv, parse=parse)
    checks: list[FixtureCheck] = []

    def handle(index: int, hello: dict[str, Any]) -> Path:
        if index < first_fixture:
            workload, out, config = also[index]
            return record_run(
                index, messages, hello, workload, config, out, requests=extra[index][0]
            )
        name = chosen[index - first_fixture]
        bundle = root / FIXTURES_DIR / name
        checks.append(_check(name, bundle, scenarios[index], _messages_of(index, messages)))
        return bundle

    bundles = record_runs(
        messages,
        len(scenarios),
        handle,
        driver=SGLANG.driver,
        error=SglangDriverError,
        protocol=PROTOCOL_VERSION,
    )
    return checks, bundles[:first_fixture]


def _messages_of(index: int, messages: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Run ``index``'s messages, its ``end`` last (a driver error raises)."""
    return run_messages(index, messages, SGLANG.driver, SglangDriverError)


def _check(
    name: str,
    bundle: Path,
    scenario: Mapping[str, Any],
    messages: Iterator[dict[str, Any]],
) -> FixtureCheck:
    """Compare one run's messages with the committed bundle (the messages are all read)."""
    committed_lines = _committed_steps(bundle)
    sent = json.loads(json.dumps({"config": scenario["config"], "requests": scenario["requests"]}))
    with open(bundle / SCENARIO_FILE, encoding="utf-8") as handle:
        committed_scenario = json.load(handle)
    difference: str | None = None
    if sent != committed_scenario:
        difference = (
            f"{name}: the scenario sent differs from the committed {SCENARIO_FILE} (the fixture's "
            "workload or configuration changed; remake it with python -m tracekit.sglang.fixtures)"
        )
    step_s = float(scenario["config"]["step_s"])
    arrivals = {str(r[0]): float(r[1]) for r in scenario["requests"]}
    count = 0
    outcomes: dict[str, dict[str, Any]] = {}
    for message in messages:
        kind = message.get("kind")
        if kind == "step":
            if difference is None:
                difference = _step_difference(name, count, message["text"], committed_lines)
            count += 1
        elif kind == "request":
            rid = str(message["request_id"])
            outcomes[rid] = request_outcome(message, arrivals[rid], step_s)
    if difference is None and count != len(committed_lines):
        difference = f"{name}: {count} steps recorded, {len(committed_lines)} committed"
    if difference is None:
        difference = _outcome_difference(name, bundle, outcomes)
    return FixtureCheck(name, count, difference)


def _committed_steps(bundle: Path) -> list[str]:
    """The committed step records' text after their run index, in order."""
    path = bundle / (STEPS_FILE + ".xz")
    text = lzma.decompress(path.read_bytes()).decode("utf-8")
    lines = []
    for line in text.splitlines():
        if not line.startswith(_STEP_HEAD):
            raise ValueError(f"{path}: not a step record: {line[:80]}")
        lines.append(line[line.index(",", len(_STEP_HEAD)) + 1 :])
    return lines


def _step_difference(name: str, index: int, text: str, committed: Sequence[str]) -> str | None:
    """None when step record ``index`` equals the committed one, else what differs."""
    if index < len(committed) and text == committed[index]:
        return None
    if index >= len(committed):
        return f"{name}: more steps recorded than the {len(committed)} committed"
    new, old = json.loads("{" + text), json.loads("{" + committed[index])
    new, old = _unordered(new), _unordered(old)
    fields = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
    if not fields:
        return None
    shown = "; ".join(
        f"{k}: committed {_short(old.get(k))}, recorded {_short(new.get(k))}" for k in fields
    )
    return f"{name}: step record {index} (step {old.get('step')}) differs: {shown}"


def _unordered(record: dict[str, Any]) -> dict[str, Any]:
    """A step record without the order its preemptions were requeued in.

    That order is SGLang's set order, different in every run
    (:func:`tracekit.sglang.protocol.unordered_requeue`).
    """
    preempted = record.get("preempted") or []
    if len(preempted) < 2:
        return record
    waiting, _ = unordered_requeue(record.get("waiting", []), [p[0] for p in preempted])
    return {**record, "waiting": list(waiting), "preempted": sorted(preempted)}


def _outcome_difference(
    name: str, bundle: Path, outcomes: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """None when every request ended as the committed requests table says."""
    table = pl.read_parquet(bundle / "requests.parquet", columns=["request_id", *OUTCOME_COLUMNS])
    committed = {row["request_id"]: row for row in table.iter_rows(named=True)}
    if set(committed) != set(outcomes):
        return f"{name}: {len(outcomes)} requests ended, {len(committed)} committed"
    for rid, outcome in outcomes.items():
        for column in OUTCOME_COLUMNS:
            old, new = committed[rid][column], outcome[column]
            if old != new and not (
                isinstance(old, float) and isinstance(new, float) and abs(old - new) <= 1e-9
            ):
                return f"{name}: request {rid}: {column} committed {old!r}, recorded {new!r}"
    return None


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."
