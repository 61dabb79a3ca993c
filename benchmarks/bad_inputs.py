"""The bad-input suite: thousands of wrong inputs across every command, and what each did.

Builds small real inputs once (a workload, two recordings of one run, a qualify results folder,
a sweep matrix, an extension manifest, a preemption-event log), then derives from them a case
per bad input, in families:

- ``option``: every numeric option of every command (walked from the command tree) with values
  outside its range, NaN, infinities, wrong types and empty strings; every closed choice with a
  near miss, an empty string and the wrong case;
- ``spelling``: options parsed from text (``--window``, ``--arrivals``, ``--order``,
  ``--latency``, ``--strategy``, ``--load-fractions``, ``--rates``, ``--env``, ``--ray``);
- ``policy-config``: bad ``--policy-config`` documents;
- ``workload``: damaged workload files of each format, for the commands that load one;
- ``bundle``: damaged trace bundles (manifest, files, columns, row counts) for every reader;
- ``value``: one bad value (NaN, infinite, negative, beyond any run, null, another run id) in
  each column a reader reads, for every reader (validate reads every column);
- ``path``: missing inputs, files for folders, folders without bundles, unwritable ``--out``;
- ``output``: outputs that must not be written;
- ``sql``, ``matrix``, ``manifest``, ``results``, ``import``: bad queries, sweep matrices,
  extension manifests, results folders and legacy logs;
- ``combination``: an option given where the chosen engine mode, clock, objective or plan
  would ignore it (``--watermark`` in sglang mode, ``--step-s`` under the cost-model clock,
  oracle's ``--slo-*`` without ``--objective slo``, ...);
- ``interrupt`` (``benchmarks/bad_input_stops.py``): SIGINT, SIGTERM and SIGKILL at three
  stages of every long command, each checking the exit status, the one ``Error:`` line, what
  is left, and that the next run cleans up and writes byte-identical output;
- ``injection`` (``benchmarks/bad_input_report.py``): 71 HTML/JS/CSS/URL/bidi/control-character
  forms in four places of a results folder (request id, workload name, strategy name, policy
  setting), each page held to the page of a plain word;
- ``policy-random`` (``benchmarks/bad_input_policy.py``): 20,000 seeded ``--policy-config``
  documents through the settings parser, judged against docs/policy.md;
- ``controller`` (``benchmarks/controller_fuzz.py``): 180,000 fuzzed controller contexts.

Each case runs in its own folder holding copies of its inputs, through the command line in this
process (``click.testing.CliRunner``). It is one of:

- ``clear``: a non-zero exit code the command documents for bad input (2; ``validate`` and
  ``manifest validate`` also 1 for a broken invariant or rule), with an ``Error:`` line (or
  ``validate``'s list of findings) that names what the case says it must name;
- ``wrong-exit``: refused with another exit code (``diff`` answering 1, "different");
- ``unclear``: refused without naming the option or file;
- ``silent``: exit 0, the bad input accepted;
- ``traceback``: an exception escaped (or the case hung past ``--timeout``).

``damage`` is counted apart: any input file changed, or any file or folder left in the case's
folder by a command that refused its input (a partial output, a staging folder).

The bulk families report counts only: ``valid`` is a random document within the documentation,
taken (not a failure); a controller context answered as documented is ``clear``.

Usage: ``python benchmarks/bad_inputs.py [--family F] [--every N] [--show CATEGORY] [--json]
[--policy-documents N] [--fuzz N,N]`` (``--every 10`` runs about one case in ten of each family,
chosen by a hash of its name, and at least one of each; the test suite runs such a slice).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fnmatch
import hashlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import polars as pl
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
EXTENSION = ROOT / "bidkv" / "manifests" / "vllm-hust-extension-v0.3.json"
# A vllm bench serve result (--save-detailed): the input of tracekit accuracy.
BENCH_RESULT = ROOT / "tests" / "data" / "bench-results" / "vllm-bench-rate8.json"
SMALL = ["--limit", "40", "--num-blocks", "300", "--max-model-len", "4608"]
CATEGORIES = ("clear", "valid", "wrong-exit", "unclear", "silent", "traceback")

Args = Callable[[Path], list[str]]
Prepare = Callable[[Path, Path], None]


@dataclass(frozen=True)
class Case:
    """One bad input.

    Attributes
    ----------
    family
        The kind of bad input (see the module docstring).
    command
        The command it is given to (``record sim``).
    name
        What is wrong, in a few words.
    args
        The command line, given the case's folder.
    prepare
        Puts the case's inputs in its folder, given the fixtures' folder and the case's.
    exits
        The exit codes that refuse it as documented.
    mentions
        Text the error must contain (the option or the file), or "" for none; ``{case}``
        stands for the case's folder.
    keeps
        Name patterns of what a refused command may leave: the partial folder that the next
        run removes.
    removes
        Name patterns of what the command must remove (a stale staging folder); such a case is
        not refused: it is a clear answer when it exits 0 and they are gone.
    """

    family: str
    command: str
    name: str
    args: Args
    prepare: Prepare | None = None
    exits: frozenset[int] = frozenset({2})
    mentions: str = ""
    keeps: tuple[str, ...] = ()
    removes: tuple[str, ...] = ()


@dataclass
class Outcome:
    """What a case did."""

    case: Case
    category: str
    exit_code: int | None
    damage: list[str] = field(default_factory=list)
    detail: str = ""
    seconds: float = 0.0


# --- fixtures ---------------------------------------------------------------------------------


def build_fixtures(root: Path) -> Path:
    """The real inputs every case copies from, recorded once into ``root``."""
    from tracekit.cli import cli

    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(SAMPLE, root / "w.csv")
    shutil.copy(EXTENSION, root / "ext.json")
    shutil.copy(BENCH_RESULT, root / "bench.json")
    for host in ("typed", "legacy"):
        if not (root / host / "manifest.json").exists():
            args = ["record", "sim", "--workload", str(root / "w.csv"), *SMALL, "--strategy",
                    "bidkv", "--host", host, "--record-scheduled",
                    "--out", str(root / host)]  # fmt: skip
            _must(cli, args)
    if not (root / "results" / "report.html").exists():
        # The smallest qualify run: 20 requests, one cell, two strategies.
        args = ["qualify", "--workload", str(root / "w.csv"), *SMALL, "--limit", "20", "--strategy",
                "builtin,bidkv", "--load-plan", "single", "--repeats", "3", "--jobs", "1",
                "--out", str(root / "results")]  # fmt: skip
        _must(cli, args)
    (root / "matrix.toml").write_text(
        'strategies = ["builtin", "bidkv"]\n\n[[workloads]]\npath = "w.csv"\nlimit = 20\n\n'
        "[[engines]]\nnum_blocks = 300\nmax_model_len = 4608\n",
        "utf-8",
    )
    event = {
        "event_id": 1, "ts": 10.0, "kv_usage": 0.93, "num_candidates": 1,
        "candidates": [{
            "request_id": "a", "completion_ratio": 0.1, "tokens_freed": 100,
            "num_prompt_tokens": 90, "num_output_tokens": 10, "num_computed_tokens": 100,
            "max_output_tokens": 256, "num_preemptions": 0, "utility_bidkv": 12.5,
            "arrival_ms": 0.0, "age_ms": 5.0,
        }],
        "strategy_choices": {"pe-lifo": "a", "bidkv": "a"},
    }  # fmt: skip
    (root / "events.jsonl").write_text(json.dumps(event) + "\n", "utf-8")
    return root


def _must(cli: click.Group, args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    # qualify exits 1 for a NO-GO: a result, not a failure.
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    if result.exit_code not in (0, 1) or crashed:
        raise RuntimeError(f"fixture {' '.join(args[:2])} failed: {result.output}")


def _copy(*names: str) -> Prepare:
    """Copy fixtures ``names`` into the case folder."""

    def prepare(fixtures: Path, case: Path) -> None:
        for name in names:
            source = fixtures / name
            if source.is_dir():
                shutil.copytree(source, case / name)
            else:
                shutil.copy(source, case / name)

    return prepare


def _then(first: Prepare | None, second: Callable[[Path], None]) -> Prepare:
    def prepare(fixtures: Path, case: Path) -> None:
        if first is not None:
            first(fixtures, case)
        second(case)

    return prepare


# --- base command lines -----------------------------------------------------------------------

# Every command's cheapest valid command line, given a case folder holding the fixtures it
# copies; a bad option is appended (click keeps the last value of an option given twice).
BASES: dict[str, tuple[tuple[str, ...], Args]] = {
    "record sim": (("w.csv",), lambda c: ["record", "sim", "--workload", str(c / "w.csv"),
                                          "--limit", "20", "--out", str(c / "out")]),
    "record vllm": (("w.csv",), lambda c: ["record", "vllm", "--workload", str(c / "w.csv"),
                                           "--limit", "20", "--out", str(c / "out")]),
    "record sglang": (("w.csv",), lambda c: ["record", "sglang", "--workload", str(c / "w.csv"),
                                             "--limit", "20", "--out", str(c / "out")]),
    "record import": (("events.jsonl",), lambda c: ["record", "import", str(c / "events.jsonl"),
                                                    "--out", str(c / "out")]),
    "replay": (("typed",), lambda c: ["replay", str(c / "typed"), "--strategy", "lcf", "--jobs",
                                      "1", "--out", str(c / "out")]),
    "oracle": (("typed",), lambda c: ["oracle", str(c / "typed"), "--out", str(c / "out"),
                                      "--no-greedy", "--limit", "2", "--jobs", "1"]),
    "qualify": (("w.csv",), lambda c: ["qualify", "--workload", str(c / "w.csv"), "--limit", "20",
                                       "--num-blocks", "300", "--max-model-len", "4608",
                                       "--load-plan", "single", "--strategy", "builtin,bidkv",
                                       "--repeats", "3", "--jobs", "1", "--out",
                                       str(c / "out")]),
    "capacity": (("w.csv",), lambda c: ["capacity", "--workload", str(c / "w.csv"), "--limit",
                                        "20"]),
    "experiment traces": ((), lambda c: ["experiment", "traces", "--out", str(c / "out"),
                                         "--num-requests", "5", "--rates", "1"]),
    "experiment run": ((), lambda c: ["experiment", "run", "--out", str(c / "out"), "--runs", "1",
                                      "--num-requests", "5", "--rates", "1", "--strategies",
                                      "preempt-evict", "--jobs", "1"]),
    "calibrate": (("typed",), lambda c: ["calibrate", str(c / "typed"), "--out",
                                         str(c / "m.json")]),
    "sweep": (("w.csv", "matrix.toml"), lambda c: ["sweep", str(c / "matrix.toml"), "--out",
                                                   str(c / "out"), "--jobs", "1"]),
    "validate": (("typed",), lambda c: ["validate", str(c / "typed")]),
    "inspect": (("typed",), lambda c: ["inspect", str(c / "typed")]),
    "query": (("typed",), lambda c: ["query", str(c / "typed"), "select 1"]),
    "diff": (("typed", "legacy"), lambda c: ["diff", str(c / "legacy"), str(c / "typed")]),
    "fidelity": (("typed",), lambda c: ["fidelity", str(c / "typed"), str(c / "typed")]),
    "report": (("results",), lambda c: ["report", str(c / "results"), "--out",
                                        str(c / "page" / "r.html")]),
    "manifest validate": (("ext.json",), lambda c: ["manifest", "validate", str(c / "ext.json")]),
    "manifest render": (("ext.json",), lambda c: ["manifest", "render", str(c / "ext.json")]),
    "outputs": (("typed",), lambda c: ["outputs", str(c / "typed"), str(c / "typed")]),
    "accuracy": (("bench.json",), lambda c: ["accuracy", str(c / "bench.json")]),
}  # fmt: skip


def _with(command: str, *extra: str | Callable[[Path], str], name: str, family: str,
          mentions: str = "", prepare: Prepare | None = None,
          exits: frozenset[int] = frozenset({2})) -> Case:  # fmt: skip
    """A case: ``command``'s base command line followed by ``extra``."""
    fixtures, base = BASES[command]

    def args(case: Path) -> list[str]:
        return [*base(case), *(e(case) if callable(e) else e for e in extra)]

    ready = _copy(*fixtures) if prepare is None else _then(_copy(*fixtures), prepare)  # type: ignore[arg-type]
    return Case(family, command, name, args, ready, exits, mentions)


# --- options: every numeric option, every closed choice ---------------------------------------


def _bad_numbers(param: click.Parameter) -> list[str]:
    """Values outside ``param``'s range, NaN, infinities, wrong types and empty strings."""
    from tracekit.cli.options import slo_target
    from tracekit.cli.params import Count, Number

    kind = param.type
    if isinstance(kind, Count):
        values = [str(kind.min - 1), str(kind.max + 1), "1.5", "abc", "nan", "", "0x10", "1e3"]
        if kind.max + 1 < 10**20:
            values.append(str(10**20))
        return values
    if isinstance(kind, Number):
        low, high = kind.min, kind.max
        below = [str(low)] if kind.min_open else [str(low - 1 if low <= 0 else low / 10)]
        values = [*below, repr(high * 10 + 1), "1e300", "nan", "-inf", "abc", "", "1e400"]
        if not kind.infinite:
            values.append("inf")
        return values
    if param.callback is slo_target:
        return ["0", "-1", "nan", "inf", "-inf", "abc", "", "1e-400"]
    return []


def _bad_choices(param: click.Parameter) -> list[str]:
    choices = [str(c) for c in param.type.choices]  # type: ignore[attr-defined]
    first = choices[0]
    values = [first[:-1] if len(first) > 2 else first + "x", "", "none-such"]
    if first.upper() != first and first.upper() not in choices:
        values.append(first.upper())
    return values


def option_cases() -> list[Case]:
    """Every numeric option and closed choice of every command, with bad values."""
    from tracekit.cli import cli
    from tracekit.cli.common import leaf_commands

    cases = []
    for command, cmd in leaf_commands(cli):
        if command not in BASES:
            continue
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.hidden or param.is_flag:
                continue
            option = param.opts[0]
            if isinstance(param.type, click.Choice):
                values, family = _bad_choices(param), "option"
            else:
                values, family = _bad_numbers(param), "option"
            for value in values:
                cases.append(_with(command, option, value, name=f"{option} {value!r}",
                                   family=family, mentions=option))  # fmt: skip
    return cases


# --- options parsed from text -----------------------------------------------------------------

SPELLINGS: dict[str, tuple[tuple[str, ...], list[list[str]]]] = {
    "--window": (("record sim", "capacity", "qualify"),
                 [[v] for v in ("abc", "5", "10:5", "-1:5", "nan:5", "0:inf", "a:b", "0:1e300",
                                ":", "")]),
    "--arrivals": (("record sim", "capacity"),
                   [[v, "--rate", "1"] for v in ("posson", "gamma", "gamma:0", "gamma:-1",
                                                 "gamma:nan", "gamma:x", "gamma:1e308",
                                                 "poisson:2", "", "zipf")]
                   + [["poisson"], ["recorded", "--rate", "2"]]),
    "--order": (("record sim", "capacity"),
                [[v] for v in ("sideways", "shuffled", "shuffled:x", "shuffled:1e3",
                               "shuffled:99999999999999999999999", "ascending:1", "")]),
    "--latency": (("record sim", "capacity", "qualify"),
                  [[v] for v in ("roofine", "aiconfigurator", "aiconfigurator:nosuch/model",
                                 "calibrated:/nonexistent/model.json", "", ":",
                                 "roofline:nosuch")]),
    "--strategy": (("record sim", "replay", "oracle", "qualify"),
                   [[v] for v in ("bidk", "nosuch", "nosuchmodule:Thing", "", ",", "os:system")]),
    "--candidate": (("qualify",), [[v] for v in ("bidk", "", "nosuchmodule:Thing")]),
    "--load-fractions": (("qualify",),
                         [[v] for v in ("1e30", "1,1", "0", "-1", "abc", "", "nan", "0.5,inf")]),
    "--rates": (("experiment traces", "experiment run"),
                [[v] for v in ("0", "-1", "nan", "abc", "", "1e30", "1,inf")]),
    "--env": (("manifest render",), [[v] for v in ("NOEQUALS", "=x")]),
    "--ray": (("sweep",), [[v] for v in ("", "  ")]),
    "--strategies": (("experiment run",), [[v] for v in ("nosuch", "")]),
    "--server-log": (("accuracy",), [[v] for v in ("/nonexistent.log",)]),
}  # fmt: skip
# What an error must name where it is not the option's own spelling (the library's field).
SPELLING_MENTIONS = {
    "--strategies": "strategies",
}  # fmt: skip


def spelling_cases() -> list[Case]:
    """Options whose value is parsed from text, each with bad spellings."""
    cases = []
    for option, (commands, values) in SPELLINGS.items():
        for command in commands:
            for value in values:
                cases.append(_with(command, option, *value, name=f"{option} {' '.join(value)!r}",
                                   family="spelling",
                                   mentions=SPELLING_MENTIONS.get(option, option)))  # fmt: skip
    for kind in ("aiconfig", "", "AICONFIGURATOR", "roofline"):
        cases.append(Case("spelling", "latency tables", f"KIND {kind!r}",
                          lambda c, k=kind: ["latency", "tables", k], None, frozenset({2}),
                          f"{kind!r}"))  # fmt: skip
    return cases


POLICY_CONFIGS = [
    "{bad",
    "[]",
    '""',
    "",
    "null",
    "NaN",
    '{"colour": 1}',
    '{"utility_kv_gat": 0.5}',
    '{"utility_kv_gate": 1e999}',
    '{"utility_completion_weight": 1' + "0" * 400 + "}",
    '{"utility_cooldown_s": 1e309}',
    '{"utility_slo_s": -1}',
    '{"utility_epsilon": 0}',
    '{"utility_min_running": 1.5}',
    '{"utility_snapshot_enabled": "yes"}',
    '{"utility_liveness_preemptions": "7"}',
    '{"utility_seed": 1' + "0" * 30 + "}",
    '{"utility_strategy": "nosuch"}',
    "@missing.json",
    '{"utility_kv_gate": NaN}',
]


def policy_config_cases() -> list[Case]:
    """Bad --policy-config documents on every command that takes one."""
    cases = []
    for command in ("record sim", "replay", "oracle", "qualify"):
        for value in POLICY_CONFIGS:
            extra = ["--strategy", "bidkv"] if command != "qualify" else []
            cases.append(_with(command, *extra, "--policy-config", value,
                               name=f"--policy-config {value[:40]!r}", family="policy-config",
                               mentions="policy"))  # fmt: skip
    for value in POLICY_CONFIGS:
        cases.append(Case("policy-config", "diff", f"--conformance --policy-config {value[:40]!r}",
                          lambda c, v=value: ["diff", "--conformance", "--policy-config", v],
                          None, frozenset({2}), "policy"))  # fmt: skip
    return cases


# --- combinations: an option the chosen mode, clock, objective or plan would ignore ----------

# A valid value of each scoped engine setting's option (ENGINE_SCOPES): given where it is not
# read, it must be refused, naming the option.
_SCOPED_VALUES = {
    "watermark": ["--watermark", "0.01"],
    "long_prefill_token_threshold": ["--long-prefill-token-threshold", "64"],
    "vllm_version": ["--vllm-version", "0.33"],
    "enable_prefix_caching": ["--no-prefix-caching"],
    "async_scheduling": ["--no-async-scheduling"],
    "retraction_policy": ["--retraction-policy", "length"],
    "radix_cache": ["--no-radix-cache"],
    "chunked_prefill_size": ["--chunked-prefill-size", "64"],
    "overlap_schedule": ["--disable-overlap-schedule"],
    "schedule_low_priority_values_first": ["--schedule-low-priority-values-first"],
    "disable_priority_preemption": ["--disable-priority-preemption"],
    "priority_scheduling_preemption_threshold": ["--priority-scheduling-preemption-threshold", "3"],
    "step_s": ["--step-s", "0.05"],
}  # fmt: skip
# (command, extra arguments, the option the error must name)
COMBINATIONS: list[tuple[str, list[str], str]] = [
    ("qualify", ["--load-plan", "single", "--load-fractions", "0.5"], "--load-fractions"),
    ("qualify", ["--load-plan", "single", "--load-concurrency", "4"], "--load-concurrency"),
    ("qualify", ["--load-plan", "single", "--capacity-target", "0.5"], "--capacity-target"),
    ("qualify", ["--load-plan", "single", "--capacity-tolerance", "0.1"], "--capacity-tolerance"),
    ("qualify", ["--load-plan", "capacity", "--arrivals", "poisson", "--rate", "inf"], "--rate"),
    ("capacity", ["--arrivals", "poisson", "--rate", "inf"], "--rate"),
    ("oracle", ["--slo-ttft-s", "3"], "--slo-ttft-s"),
    ("oracle", ["--slo-tpot-s", "0.2"], "--slo-tpot-s"),
    ("oracle", ["--objective", "e2e", "--slo-ttft-s", "3"], "--slo-ttft-s"),
    ("replay", ["--mode", "closed", "--limit", "2"], "--limit"),
    ("replay", ["--mode", "closed", "--reference"], "--reference"),
    ("replay", ["--host", "legacy"], "--host"),
    ("experiment run", ["--resume", "--overwrite"], "--overwrite"),
    ("experiment traces", ["--mode", "verify", "--overwrite"], "--overwrite"),
]  # fmt: skip


def combination_cases() -> list[Case]:
    """Options given where the chosen mode, clock, objective or plan would ignore them."""
    from tracekit.engine.config import ENGINE_SCOPES

    cases = []
    for name, (what, which) in ENGINE_SCOPES.items():
        if name not in _SCOPED_VALUES:
            continue  # full_sequence_must_fit has no option
        other = {"mode": {"vllm": "sglang", "sglang": "vllm"}, "clock": {"steps": "cost-model"}}
        flag = "--engine-mode" if what == "mode" else "--clock"
        setting = [flag, other[what][which]]
        option = _SCOPED_VALUES[name][0]
        for command in ("record sim", "capacity", "qualify"):
            cases.append(_with(command, *setting, *_SCOPED_VALUES[name],
                               name=f"{option} with {' '.join(setting)}", family="combination",
                               mentions=option))  # fmt: skip
    for command, extra, option in COMBINATIONS:
        cases.append(_with(command, *extra, name=" ".join(extra), family="combination",
                           mentions=option))  # fmt: skip
    return cases


# --- workload files ---------------------------------------------------------------------------

_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
_ROW = "2023-11-16 18:15:46.6805900,374,44\n"
AZURE_FILES: dict[str, bytes] = {
    "empty": b"",
    "header only": _HEADER.encode(),
    "a missing column": b"TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n",
    "words for tokens": (_HEADER + "2023-11-16 18:15:46.6805900,abc,44\n").encode(),
    "negative tokens": (_HEADER + "2023-11-16 18:15:46.6805900,-5,44\n").encode(),
    "zero prompt": (_HEADER + "2023-11-16 18:15:46.6805900,0,44\n").encode(),
    "NaN tokens": (_HEADER + "2023-11-16 18:15:46.6805900,nan,44\n").encode(),
    "2**62 tokens": (_HEADER + f"2023-11-16 18:15:46.6805900,{2**62},44\n").encode(),
    "1e300 tokens": (_HEADER + "2023-11-16 18:15:46.6805900,1e300,44\n").encode(),
    "a bad timestamp": (_HEADER + "yesterday,374,44\n").encode(),
    "a float timestamp": (_HEADER + "1.5,374,44\n").encode(),
    "an empty cell": (_HEADER + "2023-11-16 18:15:46.6805900,,44\n").encode(),
    "binary garbage": bytes(range(256)) * 4,
    "not UTF-8": (_HEADER + _ROW).encode("utf-16"),
    "a ragged row": (_HEADER + _ROW + "2023-11-16 18:15:47.0,1\n").encode(),
    "a fraction of a token": (_HEADER + "2023-11-16 18:15:46.6805900,3.5,44\n").encode(),
}
CANONICAL_HEADER = "arrival_s,prompt_tokens,output_tokens\n"
CANONICAL_FILES: dict[str, bytes] = {
    "negative arrival": (CANONICAL_HEADER + "-1,10,5\n").encode(),
    "NaN arrival": (CANONICAL_HEADER + "nan,10,5\n").encode(),
    "infinite arrival": (CANONICAL_HEADER + "inf,10,5\n").encode(),
    "1e300 arrival": (CANONICAL_HEADER + "1e300,10,5\n").encode(),
    "zero output": (CANONICAL_HEADER + "0,10,0\n").encode(),
    "max_tokens below output": b"arrival_s,prompt_tokens,output_tokens,max_tokens\n0,10,5,2\n",
    "a word for priority": b"arrival_s,prompt_tokens,output_tokens,priority\n0,10,5,high\n",
    "a repeated request id": (
        b"arrival_s,prompt_tokens,output_tokens,request_id\n0,10,5,a\n1,10,5,a\n"
    ),
    "an empty request id": b"arrival_s,prompt_tokens,output_tokens,request_id\n0,10,5,\n",
    "2**63 prompt": (CANONICAL_HEADER + f"0,{2**63},5\n").encode(),
    "header only": CANONICAL_HEADER.encode(),
}
MOONCAKE_LINE = {"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}
MOONCAKE_FILES: dict[str, bytes] = {
    "not JSON": b"{not json}\n",
    "a list line": b"[1, 2, 3]\n",
    "a missing field": json.dumps({"timestamp": 0, "input_length": 600}).encode() + b"\n",
    "a negative length": json.dumps({**MOONCAKE_LINE, "input_length": -1}).encode() + b"\n",
    "a string timestamp": json.dumps({**MOONCAKE_LINE, "timestamp": "now"}).encode() + b"\n",
    "hash ids not a list": json.dumps({**MOONCAKE_LINE, "hash_ids": 5}).encode() + b"\n",
    "too few hash ids": json.dumps({**MOONCAKE_LINE, "hash_ids": []}).encode() + b"\n",
    "a NaN timestamp": (
        b'{"timestamp": NaN, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}\n'
    ),
    "a huge length": json.dumps({**MOONCAKE_LINE, "input_length": 10**30}).encode() + b"\n",
    "a truncated line": json.dumps(MOONCAKE_LINE).encode()[:20],
}


def _parquet(case: Path, name: str, frame: pl.DataFrame) -> None:
    frame.write_parquet(case / name)


PARQUET_FILES: dict[str, Callable[[Path], None]] = {
    "a truncated Parquet file": lambda c: (
        _parquet(c, "w.parquet", pl.DataFrame({"arrival_s": [0.0], "prompt_tokens": [10],
                                               "output_tokens": [5]})),
        (c / "w.parquet").write_bytes((c / "w.parquet").read_bytes()[:40]),
    ),
    "an empty Parquet table": lambda c: _parquet(
        c, "w.parquet", pl.DataFrame(schema={"arrival_s": pl.Float64, "prompt_tokens": pl.Int64,
                                             "output_tokens": pl.Int64})),
    "strings for tokens": lambda c: _parquet(
        c, "w.parquet", pl.DataFrame({"arrival_s": [0.0], "prompt_tokens": ["ten"],
                                      "output_tokens": [5]})),
    "null tokens": lambda c: _parquet(
        c, "w.parquet", pl.DataFrame({"arrival_s": [0.0], "prompt_tokens": [None],
                                      "output_tokens": [5]},
                                     schema_overrides={"prompt_tokens": pl.Int64})),
    "NaN arrival": lambda c: _parquet(
        c, "w.parquet", pl.DataFrame({"arrival_s": [math.nan], "prompt_tokens": [10],
                                      "output_tokens": [5]})),
}  # fmt: skip


def workload_cases() -> list[Case]:
    """Damaged workload files, given to every command that loads one."""
    files: list[tuple[str, str, Callable[[Path], None]]] = []
    for label, data in AZURE_FILES.items():
        files.append(
            (f"Azure CSV: {label}", "bad.csv", lambda c, d=data: (c / "bad.csv").write_bytes(d))
        )
    for label, data in CANONICAL_FILES.items():
        files.append(
            (f"CSV table: {label}", "bad.csv", lambda c, d=data: (c / "bad.csv").write_bytes(d))
        )
    for label, data in MOONCAKE_FILES.items():
        files.append(
            (
                f"Mooncake JSONL: {label}",
                "bad.jsonl",
                lambda c, d=data: (c / "bad.jsonl").write_bytes(d),
            )
        )
    for label, write in PARQUET_FILES.items():
        files.append((f"Parquet: {label}", "w.parquet", write))
    files.append(("a folder", "bad.csv", lambda c: (c / "bad.csv").mkdir()))
    files.append(("a missing file", "missing.csv", lambda c: None))
    cases = []
    for label, name, write in files:
        for command in ("record sim", "capacity", "qualify", "record vllm", "record sglang"):
            if command in ("capacity", "qualify", "record vllm", "record sglang") and not (
                label.startswith(("Azure CSV: e", "Mooncake JSONL: not", "Parquet: a trunc"))
                or label in ("a folder", "a missing file")
            ):
                continue  # one loader: the other commands get a sample of the files
            cases.append(_with(command, "--workload", lambda c, n=name: str(c / n),
                               name=label, family="workload", mentions=f"{{case}}/{name}",
                               prepare=lambda c, w=write: w(c)))  # fmt: skip
    return cases


# --- damaged bundles --------------------------------------------------------------------------


def _manifest(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def damage(bundle: Path) -> None:
        path = bundle / "manifest.json"
        manifest = json.loads(path.read_text("utf-8"))
        change(manifest)
        path.write_text(json.dumps(manifest), "utf-8")

    return damage


def _table(table: str, change: Callable[[pl.DataFrame], pl.DataFrame]) -> Callable[[Path], None]:
    def damage(bundle: Path) -> None:
        file = bundle / f"{table}.parquet"
        change(pl.read_parquet(file)).write_parquet(file)

    return damage


def _bytes(name: str, change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def damage(bundle: Path) -> None:
        file = bundle / name
        file.write_bytes(change(file.read_bytes()))

    return damage


STRUCTURE: dict[str, Callable[[Path], None]] = {
    "a manifest that is not JSON": _bytes("manifest.json", lambda b: b"{not json"),
    "a manifest that is not UTF-8": _bytes("manifest.json", lambda b: b.decode().encode("utf-16")),
    "a manifest that is a list": _bytes("manifest.json", lambda b: b"[1, 2]"),
    "a manifest nested 100,000 deep": _bytes("manifest.json", lambda b: b"[" * 100_000),
    "another format": _manifest(lambda m: m.update(format="other")),
    "schema version 99": _manifest(lambda m: m.update(schema_version=99)),
    "schema version '2'": _manifest(lambda m: m.update(schema_version="2")),
    "no run id": _manifest(lambda m: m.pop("run_id")),
    "an empty run id": _manifest(lambda m: m.update(run_id="")),
    "no decisions entry": _manifest(lambda m: m["tables"].pop("decisions")),
    "tables is a string": _manifest(lambda m: m.update(tables="x")),
    "-1 rows listed": _manifest(lambda m: m["tables"]["steps"].update(rows=-1)),
    "complete is 'yes'": _manifest(lambda m: m.update(complete="yes")),
    "num_blocks -1": _manifest(lambda m: m["engine_config"].update(num_blocks=-1)),
    "block_size 0": _manifest(lambda m: m["engine_config"].update(block_size=0)),
    "num_blocks 2**62": _manifest(lambda m: m["engine_config"].update(num_blocks=2**62)),
    "engine_config a string": _manifest(lambda m: m.update(engine_config="x")),
    "time_scaling NaN": _manifest(lambda m: m.update(time_scaling=math.nan)),
    "seed a word": _manifest(lambda m: m.update(seed="abc")),
    "missing_tables a string": _manifest(lambda m: m.update(missing_tables="x")),
    "a truncated decisions file": _bytes("decisions.parquet", lambda b: b[: len(b) // 2]),
    "an empty requests file": _bytes("requests.parquet", lambda b: b""),
    "garbage candidates": _bytes("candidates.parquet", lambda b: b"not parquet\n" * 50),
    "a deleted decisions file": lambda b: (b / "decisions.parquet").unlink(),
    "a deleted manifest": lambda b: (b / "manifest.json").unlink(),
    "an extra column": _table("steps", lambda f: f.with_columns(pl.lit(1).alias("extra"))),
    "a mistyped column": _table(
        "steps", lambda f: f.with_columns(pl.col("time_s").cast(pl.String))
    ),
    "a missing column": _table("requests", lambda f: f.drop("arrival_s")),
    "an emptied decisions table": _table("decisions", lambda f: f.head(0)),
    "an emptied requests table": _table("requests", lambda f: f.head(0)),
    "steps doubled": _table("steps", lambda f: pl.concat([f, f])),
    "candidates cut short": _table("candidates", lambda f: f.head(f.height - 1)),
}


def _reader_args() -> dict[str, tuple[Args, frozenset[int]]]:
    """Every reader's command line on a damaged bundle ``t`` (``ref`` and ``legacy`` intact)."""
    two = frozenset({2})
    return {
        "validate": (lambda c: ["validate", str(c / "t")], frozenset({1, 2})),
        "inspect": (lambda c: ["inspect", str(c / "t")], two),
        "query": (lambda c: ["query", str(c / "t"), "select count(*) from decisions"], two),
        "replay": (lambda c: ["replay", str(c / "t"), "--strategy", "lcf", "--jobs", "1",
                              "--out", str(c / "out")], two),
        "replay --mode closed": (lambda c: ["replay", str(c / "t"), "--strategy", "lcf",
                                            "--mode", "closed", "--jobs", "1", "--out",
                                            str(c / "out")], two),
        "oracle": (lambda c: ["oracle", str(c / "t"), "--out", str(c / "out"), "--no-greedy",
                              "--limit", "2", "--jobs", "1"], two),
        "diff": (lambda c: ["diff", str(c / "legacy"), str(c / "t")], two),
        "fidelity": (lambda c: ["fidelity", str(c / "ref"), str(c / "t")], two),
        "calibrate": (lambda c: ["calibrate", str(c / "t"), "--out", str(c / "m.json")], two),
    }  # fmt: skip


def _damaged(damage: Callable[[Path], None]) -> Prepare:
    def prepare(fixtures: Path, case: Path) -> None:
        shutil.copytree(fixtures / "typed", case / "t")
        shutil.copytree(fixtures / "typed", case / "ref")
        shutil.copytree(fixtures / "legacy", case / "legacy")
        damage(case / "t")

    return prepare


def bundle_cases() -> list[Case]:
    """Every structural damage, for every reader."""
    return [
        Case("bundle", reader, label, args, _damaged(damage), exits, "{case}/t")
        for label, damage in STRUCTURE.items()
        for reader, (args, exits) in _reader_args().items()
    ]


def _reads() -> dict[str, dict[str, Any]]:
    """The tables and columns each reader reads (their own declarations)."""
    from tracekit.diff.pairing import READS as DIFF
    from tracekit.replay.open_mode import READS as OPEN
    from tracekit.trace.inspect import READS as INSPECT
    from tracekit.trace.schema import trace_schema

    every = dict.fromkeys(trace_schema().tables)
    return {
        "validate": every,
        "inspect": INSPECT,
        "replay": OPEN,
        "replay --mode closed": {"requests": None},
        "oracle": {"requests": None},
        "diff": DIFF,
        "fidelity": every,
        "calibrate": dict.fromkeys(("steps", "scheduled", "decisions", "admissions", "requests")),
    }


def _bad_values(table: str, column: Any) -> list[Any]:
    """Values of ``column`` that break a row rule (docs/trace-format.md, "Validation")."""
    from tracekit.trace.values import FLOORS, NON_NEGATIVE_TIMES, SIGNED

    values: list[Any] = [] if column.nullable else [None]
    if column.name == "run_id":
        return [*values, "another-run"]
    if column.type == "int64":
        if column.name in SIGNED:
            return [*values, 2**62]
        return [*values, FLOORS.get((table, column.name), 0) - 1, 2**62]
    if column.type == "float64":
        values += [math.nan, math.inf, 1e300]
        if column.name == "kv_usage":
            values.append(1.5)
        if column.name in NON_NEGATIVE_TIMES.get(table, ()):
            values.append(-1.0)
        return values
    return values


def _set_first(table: str, column: str, value: Any) -> Callable[[Path], None]:
    def damage(bundle: Path) -> None:
        file = bundle / f"{table}.parquet"
        frame = pl.read_parquet(file)
        values = frame[column].to_list()
        values[0] = value
        series = pl.Series(column, values, dtype=frame.schema[column], strict=False)
        frame.with_columns(series).write_parquet(file)

    return damage


def value_cases() -> list[Case]:
    """One bad value in each column each reader reads, for every reader."""
    from tracekit.trace.schema import trace_schema

    readers = _reader_args()
    cases = []
    for reader, reads in _reads().items():
        args, exits = readers[reader]
        for table, columns in reads.items():
            spec = trace_schema().table(table)
            for column in spec.columns:
                if columns is not None and column.name not in columns:
                    continue
                for value in _bad_values(table, column):
                    cases.append(Case("value", reader, f"{table}.{column.name} = {value!r}", args,
                                      _damaged(_set_first(table, column.name, value)), exits,
                                      f"{{case}}/t/{table}.parquet"))  # fmt: skip
    return cases


# --- paths and outputs ------------------------------------------------------------------------

# (command, the command line with PATH for a path it reads)
INPUT_PATHS: list[tuple[str, Callable[[Path, str], list[str]]]] = [
    ("validate", lambda c, p: ["validate", p]),
    ("inspect", lambda c, p: ["inspect", p]),
    ("query", lambda c, p: ["query", p, "select 1"]),
    ("replay", lambda c, p: ["replay", p, "--strategy", "lcf", "--out", str(c / "out")]),
    ("oracle", lambda c, p: ["oracle", p, "--out", str(c / "out")]),
    ("diff", lambda c, p: ["diff", p, p]),
    ("fidelity", lambda c, p: ["fidelity", p, p]),
    ("calibrate", lambda c, p: ["calibrate", p, "--out", str(c / "m.json")]),
    ("outputs", lambda c, p: ["outputs", p, p]),
    ("report", lambda c, p: ["report", p]),
    ("sweep", lambda c, p: ["sweep", p, "--out", str(c / "out")]),
    ("manifest validate", lambda c, p: ["manifest", "validate", p]),
    ("manifest render", lambda c, p: ["manifest", "render", p]),
    ("record import", lambda c, p: ["record", "import", p, "--out", str(c / "out")]),
    ("record sim", lambda c, p: ["record", "sim", "--workload", p, "--out", str(c / "out")]),
    ("experiment traces", lambda c, p: ["experiment", "traces", "--mode", "verify", "--out", p]),
    ("experiment run", lambda c, p: ["experiment", "run", "--pool", p, "--out", str(c / "out")]),
    ("accuracy", lambda c, p: ["accuracy", p]),
]
# What a bad path is: (name, how to make it, the path given)
BAD_PATHS: list[tuple[str, Callable[[Path], None], str]] = [
    ("a missing path", lambda c: None, "missing"),
    ("a file where a folder or file is read", lambda c: (c / "file").write_text("x\n"), "file"),
    ("an empty folder", lambda c: (c / "empty").mkdir(), "empty"),
    (
        "a folder of other files",
        lambda c: ((c / "other").mkdir(), (c / "other" / "a.txt").write_text("x")),
        "other",
    ),
]


def path_cases() -> list[Case]:
    """Bad input paths for every command, and --out paths that cannot be created."""
    cases = []
    for command, build in INPUT_PATHS:
        for label, make, name in BAD_PATHS:
            cases.append(Case("path", command, label,
                              lambda c, b=build, n=name: b(c, str(c / n)),
                              lambda f, c, m=make: m(c), frozenset({1, 2}) if command in
                              ("manifest validate", "experiment traces") else frozenset({2}),
                              f"{{case}}/{name}"))  # fmt: skip
    outs = ["record sim", "record import", "replay", "oracle", "qualify", "sweep",
            "experiment traces", "experiment run", "calibrate", "report"]  # fmt: skip
    for command in outs:
        fixtures, base = BASES[command]
        for label, make, target in (
            ("--out under a file", lambda c: (c / "file").write_text("x\n"), "file/out"),
            ("--out in a folder that cannot be written", lambda c: None, "/proc/tracekit-out"),
        ):

            def args(c: Path, b: Args = base, t: str = target) -> list[str]:
                line = b(c)
                out = t if t.startswith("/") else str(c / t)
                if "--out" in line:
                    line[line.index("--out") + 1] = out
                else:
                    line += ["--out", out]
                return line

            cases.append(Case("path", command, label, args,
                              _then(_copy(*fixtures), make), frozenset({2}), "--out"))  # fmt: skip
    return cases


def _dangling(case: Path) -> None:
    (case / "out").symlink_to(case / "nowhere" / "at-all")


def _existing_qualification(case: Path) -> None:
    (case / "page").mkdir()
    (case / "page" / "qualification.json").write_text("{}", "utf-8")


def output_cases() -> list[Case]:
    """Outputs that must not be written or left behind."""
    cases = []
    for command in ("record sim", "replay", "oracle", "qualify", "sweep", "record import"):
        cases.append(_with(command, name="--out is a dangling symlink", family="output",
                           mentions="--out", prepare=_dangling))  # fmt: skip
    # Not refused: the run goes on, and removes the staging folder no process can own.
    stale = _with("record sim", name="a stale staging folder with a huge pid beside --out",
                  family="output", mentions="",
                  prepare=lambda c: (c / f".out.partial-{2**70}").mkdir())  # fmt: skip
    cases.append(dataclasses.replace(stale, exits=frozenset({0}), removes=(".out.partial-*",)))
    cases.append(_with("report", name="--out over an existing qualification.json",
                       family="output", mentions="qualification.json",
                       prepare=_existing_qualification))  # fmt: skip
    for label, target in (("into a trace bundle", "typed"), ("into the workload's folder", ".")):
        cases.append(Case("output", "sweep", f"--out {label}",
                          lambda c, t=target: ["sweep", str(c / "matrix.toml"), "--jobs", "1",
                                               "--out", str(c / t)],
                          _copy("w.csv", "matrix.toml", "typed"), frozenset({2}),
                          "--out"))  # fmt: skip
    return cases


# --- queries, matrices, manifests, results, logs ----------------------------------------------

QUERIES = [
    "CREATE TABLE x AS SELECT 1",
    "DROP VIEW decisions",
    "COPY decisions TO 'x.csv'",
    "ATTACH 'x.db'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "select 1; select 2",
    "",
    "selec 1",
    "select * from read_csv('/etc/passwd')",
    "select * from nosuch",
    "PRAGMA version",
    "EXPORT DATABASE 'x'",
    "CALL dbgen(sf=1)",
    "select * from read_text('/etc/hostname')",
    "DELETE FROM runs",
    "UPDATE runs SET seed = 1",
    "INSERT INTO runs SELECT * FROM runs",
    "RESET lock_configuration",
]


def sql_cases() -> list[Case]:
    return [
        Case(
            "sql",
            "query",
            f"SQL {sql[:40]!r}",
            lambda c, s=sql: ["query", str(c / "typed"), s],
            _copy("typed"),
            frozenset({2}),
            "SQL",
        )
        for sql in QUERIES
    ]


# A valid matrix of one strategy on the workload, to which a bad part is added.
_ONE = 'strategies = ["bidkv"]\n[[workloads]]\npath = "w.csv"\n'


def _top(line: str) -> str:
    """A valid one-strategy matrix with ``line`` among its top-level keys."""
    return f'strategies = ["bidkv"]\n{line}\n[[workloads]]\npath = "w.csv"\n'


MATRICES = {
    "TOML that does not parse": "strategies = [\n",
    "an empty matrix": "",
    "no strategies": '[[workloads]]\npath = "w.csv"\n',
    "an unknown strategy": 'strategies = ["nosuch"]\n[[workloads]]\npath = "w.csv"\n',
    "strategies a string": 'strategies = "bidkv"\n[[workloads]]\npath = "w.csv"\n',
    "an unknown key": _top('colour = 1'),
    "rate_scale NaN": _top('rate_scale = [nan]'),
    "rate_scale -1": _top('rate_scale = [-1.0]'),
    "rate_scale 1e300": _top('rate_scale = [1e300]'),
    "zero repeats": 'strategies = ["bidkv"]\n[repeats]\ncount = 0\n[[workloads]]\npath = "w.csv"\n',
    "num_blocks -1": _ONE + '[[engines]]\nnum_blocks = -1\n',
    "block_size 0": _ONE + '[[engines]]\nblock_size = 0\n',
    "num_blocks 2**62": _ONE + f'[[engines]]\nnum_blocks = {2**62}\n',
    "a missing workload": 'strategies = ["bidkv"]\n[[workloads]]\npath = "missing.csv"\n',
    "limit -5": _ONE + 'limit = -5\n',
    "an unknown policy setting": _ONE + '[policy]\ncolour = [1]\n',
    "an SLO of -1": _ONE + '[slo]\nttft_s = -1\n',
    "a seed that is a word": _top('seed = "x"'),
    "an unknown engine key": _ONE + '[[engines]]\ncolour = 1\n',
    "binary garbage": "\x00\x01\x02",
}  # fmt: skip


def matrix_cases() -> list[Case]:
    cases = []
    for label, text in MATRICES.items():

        def prepare(fixtures: Path, case: Path, t: str = text) -> None:
            shutil.copy(fixtures / "w.csv", case / "w.csv")
            (case / "m.toml").write_text(t, "utf-8")

        for dry in (False, True):
            cases.append(Case("matrix", "sweep", label + (" (--dry-run)" if dry else ""),
                              lambda c, d=dry: ["sweep", str(c / "m.toml"), "--out",
                                                str(c / "out"), "--jobs", "1",
                                                *(["--dry-run"] if d else [])],
                              prepare, frozenset({2}), "m.toml"))  # fmt: skip
    return cases


def _extension(change: Callable[[dict[str, Any]], Any] | bytes) -> Prepare:
    def prepare(fixtures: Path, case: Path) -> None:
        if isinstance(change, bytes):
            (case / "ext.json").write_bytes(change)
            return
        manifest = json.loads((fixtures / "ext.json").read_text("utf-8"))
        change(manifest)
        (case / "ext.json").write_text(json.dumps(manifest), "utf-8")

    return prepare


EXTENSIONS: dict[str, Callable[[dict[str, Any]], Any] | bytes] = {
    "not JSON": b"{nope",
    "empty": b"",
    "a list": b"[]",
    "not UTF-8": '{"a": "\u00e9"}'.encode("latin-1"),
    "no schema_version": lambda m: m.pop("schema_version"),
    "an unknown schema_version": lambda m: m.update(schema_version="9.9"),
    "nested 100,000 deep": b"[" * 100_000,
    "name a number": lambda m: m.update(name=5),
}


def manifest_cases() -> list[Case]:
    cases = []
    for label, change in EXTENSIONS.items():
        for command in ("validate", "render"):
            cases.append(Case("manifest", f"manifest {command}", label,
                              lambda c, k=command: ["manifest", k, str(c / "ext.json")],
                              _extension(change),
                              frozenset({1, 2}) if command == "validate" else frozenset({2}),
                              "ext.json"))  # fmt: skip
    return cases


RESULTS: dict[str, Callable[[Path], None]] = {
    "cells.parquet truncated": _bytes("cells.parquet", lambda b: b[: len(b) // 2]),
    "cells.parquet empty": _bytes("cells.parquet", lambda b: b""),
    "cells.parquet garbage": _bytes("cells.parquet", lambda b: b"garbage\n" * 40),
    "cells.parquet gone": lambda r: (r / "cells.parquet").unlink(),
    "cells.parquet without rows": _table("cells", lambda f: f.head(0)),
    "cells.parquet without a column": _table("cells", lambda f: f.drop("throughput_rps")),
    "qualify.json gone": lambda r: (r / "qualify.json").unlink(),
    "qualify.json not JSON": _bytes("qualify.json", lambda b: b"{nope"),
    "qualify.json binary": _bytes("qualify.json", lambda b: bytes(range(256))),
    "qualify.json nested 100,000 deep": _bytes("qualify.json", lambda b: b"[" * 100_000),
    "replay summary garbage": _bytes("replay/summary.parquet", lambda b: b"garbage\n" * 40),
    "diff.json not JSON": _bytes("diff/diff.json", lambda b: b"{nope"),
}


def results_cases() -> list[Case]:
    def prepare(damage: Callable[[Path], None]) -> Prepare:
        def ready(fixtures: Path, case: Path) -> None:
            shutil.copytree(fixtures / "results", case / "results")
            damage(case / "results")

        return ready

    return [
        Case(
            "results",
            "report",
            label,
            lambda c: ["report", str(c / "results"), "--out", str(c / "page" / "r.html")],
            prepare(damage),
            frozenset({2}),
            "results",
        )
        for label, damage in RESULTS.items()
    ]


LOGS = {
    "an empty log": b"",
    "not JSON": b"{nope\n",
    "a JSON list": b"[1, 2]\n",
    "an event without candidates": b'{"event_id": 1, "ts": 1.0, "kv_usage": 0.9}\n',
    "candidates not a list": b'{"event_id": 1, "ts": 1.0, "kv_usage": 0.9, "candidates": 5}\n',
    "binary garbage": bytes(range(256)),
    "a NaN time": b'{"event_id": 1, "ts": NaN, "kv_usage": 0.9, "candidates": []}\n',
    "a snapshot without a decision": json.dumps({"latest_snapshot": {}}).encode() + b"\n",
}  # fmt: skip


def import_cases() -> list[Case]:
    return [
        Case(
            "import",
            "record import",
            label,
            lambda c: ["record", "import", str(c / "log.jsonl"), "--out", str(c / "out")],
            lambda f, c, d=data: (c / "log.jsonl").write_bytes(d),
            frozenset({2}),
            "log.jsonl",
        )
        for label, data in LOGS.items()
    ]


def all_cases() -> list[Case]:
    """Every case of the suite, family by family."""
    return [
        *option_cases(), *spelling_cases(), *policy_config_cases(), *workload_cases(),
        *bundle_cases(), *value_cases(), *path_cases(), *output_cases(), *sql_cases(),
        *matrix_cases(), *manifest_cases(), *results_cases(), *import_cases(),
        *combination_cases(),
    ]  # fmt: skip


# --- running ----------------------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, str]:
    """Every path below ``folder`` (symlinks not followed) and its content's digest."""
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            found[key] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            found[key] = "dir"
        else:
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


class _Hung(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise _Hung(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_case(case: Case, fixtures: Path, work: Path, timeout: float = 120.0) -> Outcome:
    """Run one case in a fresh folder under ``work`` and say what it did."""
    from tracekit.cli import cli

    folder = Path(tempfile.mkdtemp(prefix="case-", dir=work))
    try:
        if case.prepare is not None:
            case.prepare(fixtures, folder)
        args = case.args(folder)
        before = _snapshot(folder)
        started = time.perf_counter()
        try:
            with _deadline(timeout):
                result = CliRunner().invoke(cli, args, catch_exceptions=True)
        except _Hung as hung:
            return Outcome(case, "traceback", None, [], str(hung), time.perf_counter() - started)
        seconds = time.perf_counter() - started
        after = _snapshot(folder)
        changed = [
            k for k in before if after.get(k) != before[k]
            and not any(fnmatch.fnmatch(k.split("/")[0], p) for p in case.removes)
        ]  # fmt: skip
        kept = [k for k in after if any(fnmatch.fnmatch(k.split("/")[0], p) for p in case.removes)]
        left = [
            k for k in after
            if k not in before and not any(fnmatch.fnmatch(k.split("/")[0], p) for p in case.keeps)
        ]  # fmt: skip
        code = result.exit_code
        category = _category(case, result, folder)
        if case.removes:
            category = category if category == "traceback" or code != 0 else "clear"
            changed += kept  # what it had to remove and did not
        # A run that took its bad input made outputs: counted as the silent accept it is.
        damage = changed + (left if code != 0 and category != "silent" else [])
        return Outcome(case, category, code, damage, _last(result.output), seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _last(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _category(case: Case, result: Any, folder: Path) -> str:
    exception = result.exception
    if exception is not None and not isinstance(exception, SystemExit):
        return "traceback"
    output = result.output
    if "Traceback (most recent call last)" in output:
        return "traceback"
    if result.exit_code == 0:
        return "silent"
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error: ") or line.startswith("  - ")]
    if result.exit_code not in case.exits:
        # 1 without an error is a finding of a run that took the input (qualify's NO-GO).
        return "wrong-exit" if errors or result.exit_code != 1 else "silent"
    if not errors:
        return "unclear"
    mentions = case.mentions.format(case=folder)
    if mentions and not any(mentions in line for line in errors):
        return "unclear"
    return "clear"


def select(cases: list[Case], family: str | None, every: int) -> list[Case]:
    """The cases of ``family`` (all when None), about one in ``every``, at least one a family.

    Which ones is decided by a hash of the case's command and name, not its position, so that
    a slice samples every part of a family (its values, its commands) and is the same each run.
    """
    chosen = []
    for case in cases:
        if family is not None and case.family != family:
            continue
        key = hashlib.sha256(f"{case.family} {case.command} {case.name}".encode()).digest()
        if int.from_bytes(key[:8], "big") % every == 0:
            chosen.append(case)
    # Every family is sampled, however small.
    found = {case.family for case in chosen}
    for case in cases:
        if case.family not in found and (family is None or case.family == family):
            chosen.append(case)
            found.add(case.family)
    return chosen


def run_suite(
    cases: list[Case],
    fixtures: Path,
    work: Path,
    progress: Callable[[int, int], None] | None = None,
) -> list[Outcome]:
    """Run ``cases``; the outcome of each, in order."""
    outcomes = []
    for i, case in enumerate(cases):
        outcomes.append(run_case(case, fixtures, work))
        if progress is not None:
            progress(i + 1, len(cases))
    return outcomes


def summary(outcomes: list[Outcome], counted: dict[str, dict[str, int]] | None = None,
            damaged: int = 0) -> dict[str, Any]:  # fmt: skip
    """Counts per category, per family, and damage; the cases that are not clear errors.

    ``counted`` adds families judged in bulk (random policy configurations, the controller
    fuzz): family -> category -> count; ``damaged`` their damage.
    """
    families: dict[str, Counter[str]] = {}
    for outcome in outcomes:
        families.setdefault(outcome.case.family, Counter())[outcome.category] += 1
    for family, row in (counted or {}).items():
        families.setdefault(family, Counter()).update(row)
    counts: Counter[str] = Counter()
    for row in families.values():
        counts.update(row)
    damaged_cases = [o for o in outcomes if o.damage]
    return {
        "cases": sum(counts.values()),
        "counts": {c: counts.get(c, 0) for c in CATEGORIES},
        "damage": len(damaged_cases) + damaged,
        "families": {f: {c: n[c] for c in CATEGORIES if n[c]} for f, n in families.items()},
        "failing": [
            {
                "family": o.case.family,
                "command": o.case.command,
                "case": o.case.name,
                "category": o.category,
                "exit": o.exit_code,
                "damage": o.damage[:3],
                "output": o.detail,
            }
            for o in outcomes
            if o.category not in ("clear", "valid") or o.damage
        ],
        "seconds": round(sum(o.seconds for o in outcomes), 1),
    }


def render(report: dict[str, Any], show: str | None) -> str:
    """The summary as text: totals, a table per family, then the failing cases."""
    counts = report["counts"]
    lines = [
        f"{report['cases']:,} bad inputs: "
        + ", ".join(f"{c} {counts[c]:,}" for c in CATEGORIES)
        + f"; damage {report['damage']} ({report['seconds']} s in the commands)",
        "",
        f"{'family':16}" + "".join(f"{c:>11}" for c in CATEGORIES),
    ]
    for family, row in report["families"].items():
        lines.append(f"{family:16}" + "".join(f"{row.get(c, 0):>11,}" for c in CATEGORIES))
    failing = report["failing"]
    if failing:
        lines += ["", "not a clear error, or damage "]
        for f in failing:
            if (
                show is not None
                and f["category"] != show
                and not (show == "damage" and f["damage"])
            ):
                continue
            damage = f" damage {f['damage']}" if f["damage"] else ""
            lines.append(f"  {f['category']:10} {f['command']}: {f['case']} "
                         f"(exit {f['exit']}){damage}: {f['output'][:160]}")  # fmt: skip
    return "\n".join(lines)


def stop_outcomes(
    fixtures: Path, work: Path, every: int, progress: Callable[[int, int], None] | None = None
) -> list[Outcome]:
    """The stop checks (benchmarks/bad_input_stops.py), about one in ``every``, as outcomes."""
    import bad_input_stops

    stops = [
        s for s in bad_input_stops.stop_cases()
        if _chosen(f"interrupt {s.command.name} {s.name}", every)
    ]  # fmt: skip
    done = bad_input_stops.run_stops(stops, fixtures, work, progress)
    return [
        Outcome(Case("interrupt", o.stop.command.name, o.stop.name, lambda c: []), o.category,
                o.exit_code, o.damage, o.detail, o.seconds)
        for o in done
    ]  # fmt: skip


def injection_outcomes(
    fixtures: Path, work: Path, every: int, progress: Callable[[int, int], None] | None = None
) -> list[Outcome]:
    """The report injections (benchmarks/bad_input_report.py), about one in ``every``."""
    import bad_input_report

    results = bad_input_report.build_results(fixtures, SAMPLE)
    cases = [c for c in bad_input_report.injection_cases() if _chosen(f"inject {c.name}", every)]
    done = bad_input_report.run_injections(cases, results, work, progress)
    return [
        Outcome(Case("injection", "report", o.case.name, lambda c: []), o.category, o.exit_code,
                o.damage, o.detail)
        for o in done
    ]  # fmt: skip


def policy_counts(count: int) -> tuple[dict[str, int], int, dict[str, list[str]]]:
    """Random --policy-config documents (benchmarks/bad_input_policy.py): counts, damage."""
    import bad_input_policy

    result = bad_input_policy.run_policy_documents(count)
    return dict(result.counts), result.damage, result.examples


def controller_counts(counts: list[int]) -> dict[str, int]:
    """The controller fuzz (benchmarks/controller_fuzz.py) in the suite's categories."""
    import controller_fuzz

    total = controller_fuzz.run(counts, [20260 + i for i in range(len(counts))], 0.2)["total"]
    mapping = {"handled": "clear", "escaped": "traceback", "not plain": "silent",
               "otherwise": "silent"}  # fmt: skip
    row: Counter[str] = Counter()
    for category, n in total.items():  # type: ignore[attr-defined]
        row[mapping[category]] += n
    return dict(row)


def _chosen(key: str, every: int) -> bool:
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % every == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=None, help="Run one family only.")
    parser.add_argument("--every", type=int, default=1, help="About one case in N of a family.")
    parser.add_argument("--show", default=None, help="List only failing cases of a category.")
    parser.add_argument("--json", action="store_true", help="Print the summary as JSON.")
    parser.add_argument("--fixtures", type=Path, default=None, help="Reuse a fixtures folder.")
    parser.add_argument(
        "--policy-documents",
        type=int,
        default=20_000,
        help="Random --policy-config documents (family policy-random).",
    )
    parser.add_argument(
        "--fuzz",
        default="100000,80000",
        help="Controller fuzz contexts per seed (family controller); 0: none.",
    )
    args = parser.parse_args()

    def wanted(family: str) -> bool:
        return args.family is None or args.family == family

    with tempfile.TemporaryDirectory(prefix="tracekit-bad-inputs-") as tmp:
        fixtures = build_fixtures(args.fixtures or Path(tmp) / "fixtures")
        work = Path(tmp) / "work"
        work.mkdir()
        cli_families = {c.family for c in all_cases()}
        cases = select(all_cases(), args.family, args.every) if (
            args.family is None or args.family in cli_families) else []  # fmt: skip

        def progress(done: int, total: int) -> None:
            if done % 100 == 0 or done == total:
                print(f"bad inputs: {done}/{total}", file=sys.stderr, flush=True)

        outcomes = run_suite(cases, fixtures, work, progress)
        if wanted("interrupt"):
            outcomes += stop_outcomes(fixtures, work, args.every, progress)
        if wanted("injection"):
            outcomes += injection_outcomes(fixtures, work, args.every, progress)
        counted: dict[str, dict[str, int]] = {}
        damaged = 0
        if wanted("policy-random") and args.policy_documents:
            counted["policy-random"], damaged, _ = policy_counts(args.policy_documents)
        fuzz = [int(n) for n in args.fuzz.split(",") if int(n)]
        if wanted("controller") and fuzz:
            counted["controller"] = controller_counts(fuzz)
        report = summary(outcomes, counted, damaged)
    print(json.dumps(report, indent=2) if args.json else render(report, args.show))


if __name__ == "__main__":
    main()
