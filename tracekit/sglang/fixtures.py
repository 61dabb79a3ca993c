"""The SGLang fixtures: small runs recorded from SGLang 0.5.23's real scheduling objects.

``tests/data/sglang-0.5.23/<name>/`` holds one bundle per fixture below, recorded by
:func:`tracekit.sglang.record.record_sglang` (no policy: SGLang's own retraction rule).
``tests/test_engine_sglang_fixtures.py`` re-runs each on the engine's SGLang mode and requires
every step to match (:mod:`tracekit.sglang.compare`) without SGLang; ``tests/test_sglang_live.py``
records them again from the installed SGLang and requires the same step streams. Remake them
(after a deliberate change) with::

    python -m tracekit.sglang.fixtures [--out tests/data] [--sglang-venv DIR] [names...]

and the scenario workloads (seeded, no source data) with ``--workloads``.

The base workloads (their step files are stored compressed, ``sglang-steps.jsonl.xz``):

``azure``
    The first 60 requests of the shipped Azure conversation sample at twice their rate, on a
    4,000-token pool with at most 32 running requests, 512-token chunks and a 2,048-token
    prefill budget: chunked prefills, the full-``max_new`` admission reservation, the
    ``new_token_ratio`` decay and a retraction once it has decayed.
``azure-late``
    A second Azure conversation slice (requests arriving 60 to 68 s into the sample, rate x2),
    same configuration. (The Azure *code* trace is not shipped with the project, so both Azure
    slices come from the conversation trace.)
``mooncake``
    Mooncake rows arriving 996.272 s to 1,005.711 s (rate x2) on a 12,000-token pool: prompts
    share ``hash_ids`` prefixes, so with the radix cache on they hit the tree; prompts of 8,192
    tokens or more are rejected.
``shared-prefix``
    The shared-prefix table of the vLLM fixtures (four prompt groups sharing one or two
    512-token content blocks, rate x2) on a 2,100-token pool: many radix-cache hits, chunked
    prefills that continue from the tree, eviction of the least recently used leaves.
``synthetic``
    The decode-heavy synthetic workload of the vLLM fixtures (``synthetic-chunked.csv``: short
    prompts with long outputs next to long prompts) on a 1,000-token pool: retractions.

Each is recorded with the radix cache on and off and with both retraction policies (``length``,
SGLang's default, and ``priority`` with priorities 0..2 from ``priority_seed=1``, lower values
first and no priority preemption: ``<base>-<radix|noradix>-<policy>``), in the normal loop
(``--disable-overlap-schedule``) and, suffixed ``-overlap``, in SGLang's default overlap loop;
on the steps clock (50 ms steps). ``azure-late-<radix|noradix>-priority-high`` is the
``azure-late`` slice under SGLang's own priority settings (larger values first, preemption at
admission on, ``--retraction-policy priority``).

The scenarios of the overlap, ``ignore_eos`` and priority options (workloads under
``traces/sglang-fixtures/workloads/``, made by :func:`scenario_requests`), each in both loops:

``priority-<...>``
    ``priority.csv``: bursts of requests with priorities 0, 5 and 20, each followed by a more
    important one (40), with ``--enable-priority-scheduling``. ``high`` is SGLang's direction
    (larger values first), ``low`` ``--schedule-low-priority-values-first``. On a 1,600-token
    pool with room for 32 running requests (memory bound: the more important request arrives
    while less important ones wait blocked, and decode outgrows the pool): ``high``,
    ``high-retract`` and ``low-retract`` (``--retraction-policy priority``), and
    ``high-retract-noradix``. On a 3,000-token pool with at most 4 running requests (slot
    bound): ``preempt`` and ``preempt-low`` (SGLang's default preemption at admission,
    threshold 10: each more important arrival preempts one running request),
    ``preempt-threshold`` (threshold 15: a difference of exactly 15 does not preempt) and
    ``preempt-disabled`` (``--disable-priority-preemption``: it waits at the head of the queue);
    ``preempt-noradix`` is ``preempt`` with the radix cache off.
``ignore-eos-<...>``
    ``ignore-eos.csv``: requests whose ``max_tokens`` exceeds their natural output, sent with
    ``ignore_eos`` (all of them: ``all``; every other one: ``mixed``), on an 1,500-token pool:
    ``PrefillAdder`` reserves their whole remaining output, and with the radix cache off admits
    them through ``add_one_req_ignore_eos``. ``-radix`` / ``-noradix`` say which.
    ``ignore-eos-long-noradix``: ``ignore-eos-long.csv`` on a 17,000-token pool, outputs past
    ``CLIP_MAX_NEW_TOKENS``: ``add_one_req_ignore_eos``'s drain check refuses a request the
    clipped reservation would admit; ``ignore-eos-long-radix`` the same through ``add_one_req``.
``mooncake-long-<radix|noradix>``
    Mooncake rows arriving 912 s to 932 s (88 requests; prompts up to 32,767 tokens, longer
    ones rejected) on a 120,000-token pool with 32 running requests, 2,048-token chunks and an
    8,192-token prefill budget: long prompts, radix hits where they share ``hash_ids``
    prefixes. Two arrivals sit a float's noise past a step's start (``8.050000000000068`` s:
    step 162, not 161), where the recorder once put them a step earlier than the engine.
``retract-many-radix``
    ``retract-many.csv``: a long request alone until ``new_token_ratio`` has decayed, then 100
    requests of 2 to 4 prompt tokens 10 ms apart, on a 4,000-token pool with room for 128: about
    90 run when the pool runs out, and ``retract_decode`` retracts the newest two at a time (a
    list: they are requeued in the order retracted).
``preempt-many-<radix|noradix>``
    ``preempt-many.csv``: three bursts of four requests with distinct priorities filling the
    batch (at most 4 running, a 1,000-token pool), each followed by a far more important request
    whose output needs one, two, then three of them preempted at once
    (``PrefillAdder.preempt_to_schedule``). SGLang requeues such a group in a ``set``'s order,
    which changes from run to run; the comparisons take it as unordered
    (:func:`tracekit.sglang.protocol.unordered_requeue`), and the distinct priorities make what
    follows independent of it.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.real_engine.fixtures import (
    AZURE_SAMPLE,
    MOONCAKE_SAMPLE,
    fixture_parser,
    fixture_workload,
    requests_csv,
)
from tracekit.sglang.protocol import SglangConfig
from tracekit.sglang.record import compress_steps
from tracekit.workloads import IGNORE_EOS, Workload, apply_ignore_eos

__all__ = [
    "FIXTURES",
    "FIXTURES_DIR",
    "SCENARIO_WORKLOADS",
    "SGLANG_VERSION",
    "SglangFixture",
    "record_fixtures",
    "scenario_csv",
    "scenario_requests",
]

#: The SGLang release the fixtures come from.
SGLANG_VERSION = "0.5.23"
#: Where the fixtures live, relative to the repository root.
FIXTURES_DIR = Path("tests") / "data" / f"sglang-{SGLANG_VERSION}"
#: Where the scenario workloads live, relative to the repository root.
SCENARIO_WORKLOADS = Path("traces") / "sglang-fixtures" / "workloads"

_SYNTHETIC = Path("traces") / "vllm-fixtures" / "workloads" / "synthetic-chunked.csv"
_SHARED_PREFIX = Path("traces") / "vllm-fixtures" / "workloads" / "shared-prefix.parquet"
_PRIORITY = SCENARIO_WORKLOADS / "priority.csv"
_IGNORE_EOS = SCENARIO_WORKLOADS / "ignore-eos.csv"
_IGNORE_EOS_LONG = SCENARIO_WORKLOADS / "ignore-eos-long.csv"
_RETRACT_MANY = SCENARIO_WORKLOADS / "retract-many.csv"
_PREEMPT_MANY = SCENARIO_WORKLOADS / "preempt-many.csv"


@dataclasses.dataclass(frozen=True)
class SglangFixture:
    """One fixture run: a workload slice and an SGLang configuration.

    ``ignore_eos``: ``None`` (the workload as loaded), ``"all"`` (every request sent with
    ``ignore_eos``, :func:`tracekit.workloads.apply_ignore_eos`) or ``"mixed"`` (every other
    request, in arrival order).
    """

    name: str
    workload: Path
    workload_options: dict[str, Any]
    config: SglangConfig
    ignore_eos: str | None = None

    def load_workload(self, root: Path) -> Workload:
        """The workload, read from ``root`` but recorded with its repository-relative path."""
        workload = fixture_workload(root, self.workload, self.workload_options)
        if self.ignore_eos == "all":
            return apply_ignore_eos(workload)
        if self.ignore_eos == "mixed":
            return _ignore_eos_every_other(workload)
        return workload


def _ignore_eos_every_other(workload: Workload) -> Workload:
    """``ignore_eos`` on the requests at even positions (they run to ``max_tokens``)."""
    frame = workload.frame.with_row_index("_i")
    flag = (pl.col("_i") % 2) == 0
    frame = frame.with_columns(
        output_tokens=pl.when(flag).then(pl.col("max_tokens")).otherwise(pl.col("output_tokens")),
        **{IGNORE_EOS: flag},
    ).drop("_i")
    options = {**workload.options, "ignore_eos": "every other request"}
    return dataclasses.replace(workload, frame=frame, options=options)


def _sized(
    kv_tokens: int,
    max_running_requests: int | None,
    chunked_prefill_size: int,
    max_prefill_tokens: int,
    max_context_len: int,
    **settings: Any,
) -> SglangConfig:
    """A fixture's configuration: its pool, batch and context sizes on the 50 ms steps clock."""
    return SglangConfig(
        kv_tokens=kv_tokens,
        max_running_requests=max_running_requests,
        chunked_prefill_size=chunked_prefill_size,
        max_prefill_tokens=max_prefill_tokens,
        max_context_len=max_context_len,
        step_s=0.05,
        **settings,
    )


def _legacy(config: SglangConfig, *, radix: bool, policy: str, overlap: bool) -> SglangConfig:
    """A base configuration with the settings of the first fixtures, in one of both loops."""
    return dataclasses.replace(
        config,
        radix_cache=radix,
        retraction_policy=policy,
        enable_priority_scheduling=policy == "priority",
        schedule_low_priority_values_first=True,
        disable_priority_preemption=True,
        overlap_schedule=overlap,
    )


# Both Azure slices (the first minute, and 60-68 s) run on the same pool.
_AZURE_SIZES = _sized(4000, 32, 512, 2048, 4000)
_BASE = {
    "azure": (
        AZURE_SAMPLE,
        {"limit": 60, "rate_scale": 2.0, "priority_seed": 1},
        _AZURE_SIZES,
    ),
    "azure-late": (
        AZURE_SAMPLE,
        {"window": (60.0, 68.0), "rate_scale": 2.0, "priority_seed": 1},
        _AZURE_SIZES,
    ),
    "mooncake": (
        MOONCAKE_SAMPLE,
        {"window": (996.272, 1005.711), "rate_scale": 2.0, "priority_seed": 1},
        _sized(12000, 12, 2048, 4096, 8192),
    ),
    "shared-prefix": (
        _SHARED_PREFIX,
        {"rate_scale": 2.0},
        _sized(2100, 16, 512, 1024, 2048),
    ),
    "synthetic": (
        _SYNTHETIC,
        {},
        _sized(1000, 12, 256, 512, 1000),
    ),
}

# Memory bound (decode outgrows the pool: retractions; the running cap never binds, so no
# preemption at admission) and slot bound (a full batch of 4: preemption at admission).
_PRIORITY_BASE = _sized(1600, 32, 256, 1024, 1200, enable_priority_scheduling=True)
_PREEMPT_BASE = dataclasses.replace(_PRIORITY_BASE, kv_tokens=3000, max_running_requests=4)
_SCENARIOS: dict[str, tuple[Path, dict[str, Any], SglangConfig, str | None]] = {
    "priority-high": (_PRIORITY, {}, _PRIORITY_BASE, None),
    "priority-high-retract": (
        _PRIORITY,
        {},
        dataclasses.replace(_PRIORITY_BASE, retraction_policy="priority"),
        None,
    ),
    "priority-low-retract": (
        _PRIORITY,
        {},
        dataclasses.replace(
            _PRIORITY_BASE, retraction_policy="priority", schedule_low_priority_values_first=True
        ),
        None,
    ),
    "priority-high-retract-noradix": (
        _PRIORITY,
        {},
        dataclasses.replace(_PRIORITY_BASE, retraction_policy="priority", radix_cache=False),
        None,
    ),
    "priority-preempt": (_PRIORITY, {}, _PREEMPT_BASE, None),
    "priority-preempt-low": (
        _PRIORITY,
        {},
        dataclasses.replace(_PREEMPT_BASE, schedule_low_priority_values_first=True),
        None,
    ),
    "priority-preempt-threshold": (
        _PRIORITY,
        {},
        dataclasses.replace(_PREEMPT_BASE, priority_scheduling_preemption_threshold=15),
        None,
    ),
    "priority-preempt-disabled": (
        _PRIORITY,
        {},
        dataclasses.replace(_PREEMPT_BASE, disable_priority_preemption=True),
        None,
    ),
}
_SCENARIOS["priority-preempt-noradix"] = (
    _PRIORITY,
    {},
    dataclasses.replace(_PREEMPT_BASE, radix_cache=False),
    None,
)
_IGNORE_EOS_BASE = _sized(1500, 16, 256, 1024, 1500)
# Outputs longer than CLIP_MAX_NEW_TOKENS (4,096): the running requests' reservation is clipped,
# add_one_req_ignore_eos's drain check is not (with the tree disabled; with it, add_one_req).
for _radix in (False, True):
    _SCENARIOS[f"ignore-eos-long-{'radix' if _radix else 'noradix'}"] = (
        _IGNORE_EOS_LONG,
        {},
        _sized(17000, None, 2048, 8192, 8192, radix_cache=_radix),
        "all",
    )
# A real trace's long prompts on a large pool (radix hits where prompts share hash_ids), and
# two arrivals a float's noise past a step's start (16.100000000000023 s, 8.050000000000068 s).
for _radix in (False, True):
    _SCENARIOS[f"mooncake-long-{'radix' if _radix else 'noradix'}"] = (
        MOONCAKE_SAMPLE,
        {"window": (912.0, 932.0)},
        _sized(120000, 32, 2048, 8192, 32768, radix_cache=_radix),
        None,
    )
# Many small requests running beside a long one once new_token_ratio has decayed: the pool
# runs out with about 90 running, and the newest (fewest outputs, a few tokens of KV each) are
# retracted two or three at a time.
_SCENARIOS["retract-many-radix"] = (_RETRACT_MANY, {}, _sized(4000, 128, 256, 1024, 4000), None)
# A full batch of four, each more important arrival preempting one, two, then three of them.
for _radix in (False, True):
    _SCENARIOS[f"preempt-many-{'radix' if _radix else 'noradix'}"] = (
        _PREEMPT_MANY,
        {},
        _sized(1000, 4, 256, 1024, 1000, enable_priority_scheduling=True, radix_cache=_radix),
        None,
    )
for _mode in ("all", "mixed"):
    for _radix in (False, True):
        _SCENARIOS[f"ignore-eos-{_mode}-{'radix' if _radix else 'noradix'}"] = (
            _IGNORE_EOS,
            {},
            dataclasses.replace(_IGNORE_EOS_BASE, radix_cache=_radix),
            _mode,
        )


def _fixtures() -> dict[str, SglangFixture]:
    out = {}
    for overlap in (False, True):
        suffix = "-overlap" if overlap else ""
        for base, (workload, options, config) in _BASE.items():
            for radix in (True, False):
                for policy in ("length", "priority"):
                    name = f"{base}-{'radix' if radix else 'noradix'}-{policy}{suffix}"
                    out[name] = SglangFixture(
                        name,
                        workload,
                        options,
                        _legacy(config, radix=radix, policy=policy, overlap=overlap),
                    )
        # A real workload under SGLang's own priority settings: larger values first, preemption
        # at admission on (threshold 10), --retraction-policy priority.
        workload, options, config = _BASE["azure-late"]
        for radix in (True, False):
            name = f"azure-late-{'radix' if radix else 'noradix'}-priority-high{suffix}"
            out[name] = SglangFixture(
                name,
                workload,
                options,
                dataclasses.replace(
                    config,
                    radix_cache=radix,
                    retraction_policy="priority",
                    enable_priority_scheduling=True,
                    overlap_schedule=overlap,
                ),
            )
        for base, (workload, options, config, ignore_eos) in _SCENARIOS.items():
            name = f"{base}{suffix}"
            out[name] = SglangFixture(
                name,
                workload,
                options,
                dataclasses.replace(config, overlap_schedule=overlap),
                ignore_eos,
            )
    return out


#: Every fixture, by name.
FIXTURES: dict[str, SglangFixture] = _fixtures()


#: The columns of a scenario workload, in the order :func:`_row` takes them.
_ROW_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "max_tokens", "priority")


def _row(
    arrival_s: float, prompt_tokens: int, output_tokens: int, max_tokens: int, priority: int = 0
) -> dict[str, Any]:
    # The arguments are drawn in the order they are given: the seeded workloads depend on it.
    values = (arrival_s, prompt_tokens, output_tokens, max_tokens, priority)
    return dict(zip(_ROW_COLUMNS, values, strict=True))


def scenario_requests(kind: str, seed: int | None = None) -> list[dict[str, Any]]:
    """The rows of a scenario workload (deterministic for a seed), one of :data:`SCENARIO_KINDS`.

    ``seed`` defaults to the committed workloads' (21, 11, 5 and 3).

    ``priority``: 12 bursts 1 s apart of three to five requests 20 ms apart (prompts 40 to
    400 tokens, outputs 20 to 300, priorities 0, 5 or 20), each followed 0.2 s later by one
    more important request (priority 40). ``ignore-eos``: 40 requests 0.15 s apart (prompts
    30 to 300, natural outputs 10 to 120 with ``max_tokens`` up to three times longer).
    ``ignore-eos-long``: six requests 0.1 s apart (prompts 100 to 600, outputs 4,200 to 4,600).
    ``retract-many``: one request (100 prompt tokens, 1,500 outputs) at 0 s, then 100 from 35 s,
    10 ms apart (prompts 2 to 4, outputs 150 to 300). ``preempt-many`` (nothing drawn): three
    bursts 100 s apart of four requests (50 prompt tokens, 200 outputs, priorities ``4 * burst +
    k``) 50 ms apart and, 1 s after the burst, one of priority ``50 + burst`` (100 prompt tokens,
    300, 450 or 600 outputs).
    """
    rng = random.Random(seed if seed is not None else _SEEDS.get(kind, 0))
    rows: list[dict[str, Any]] = []
    if kind == "priority":
        for burst in range(12):
            start = float(burst)
            size = rng.randint(4, 6)
            for k in range(size):
                last = k == size - 1
                priority = 40 if last else rng.choice([0, 0, 5, 20])
                output = rng.randint(20, 300)
                rows.append(
                    _row(
                        # The most important request of a burst comes 0.2 s after the others.
                        round(start + (0.2 if last else 0.02 * k), 3),
                        rng.randint(40, 400),
                        output,
                        output,
                        priority,
                    )
                )
        rows.sort(key=lambda r: r["arrival_s"])
        prefix = "pri"
    elif kind == "ignore-eos":
        for i in range(40):
            output = rng.randint(10, 120)
            rows.append(
                _row(round(0.15 * i, 3), rng.randint(30, 300), output, output * rng.randint(1, 3))
            )
        prefix = "eos"
    elif kind == "ignore-eos-long":
        for i in range(6):
            output = rng.randint(4200, 4600)
            rows.append(_row(round(0.1 * i, 3), rng.randint(100, 600), output, output))
        prefix = "long"
    elif kind == "retract-many":
        rows.append(_row(0.0, 100, 1500, 1500))
        for i in range(100):
            output = rng.randint(150, 300)
            rows.append(_row(round(35.0 + 0.01 * i, 3), rng.randint(2, 4), output, output))
        prefix = "many"
    elif kind == "preempt-many":
        # Not drawn: three bursts 100 s apart, four requests of distinct priorities (so that
        # the order SGLang requeues a preemption's victims in does not change what follows),
        # then one far more important request whose output needs one, two, three of them.
        for burst, output in enumerate((300, 450, 600)):
            start = 100.0 * burst
            for k in range(4):
                rows.append(_row(round(start + 0.05 * k, 3), 50, 200, 200, 4 * burst + k))
            rows.append(_row(start + 1.0, 100, output, output, 50 + burst))
        prefix = "pm"
    else:
        raise ValueError(f"unknown scenario workload {kind!r}; expected one of {', '.join(_SEEDS)}")
    return [{"request_id": f"{prefix}-{i:03d}", **row} for i, row in enumerate(rows)]


_SEEDS = {
    "priority": 21,
    "ignore-eos": 11,
    "ignore-eos-long": 5,
    "retract-many": 3,
    "preempt-many": 0,
}


#: The scenario workloads :func:`scenario_requests` makes (``<kind>.csv`` in
#: :data:`SCENARIO_WORKLOADS`).
SCENARIO_KINDS = tuple(_SEEDS)


def scenario_csv(kind: str) -> str:
    """:func:`scenario_requests` as the committed CSV text (canonical table columns)."""
    return requests_csv(scenario_requests(kind))


def record_fixtures(
    root: Path,
    *,
    out: Path | None = None,
    names: Sequence[str] | None = None,
    venv: str | None = None,
    compress: bool = True,
) -> list[Path]:
    """Record the fixtures (all, or ``names``) from the installed SGLang into ``out/<name>``.

    ``compress``: store the step files as committed (xz); off for a comparison that throws the
    bundles away (compressing takes longer than recording).
    """
    from tracekit.sglang.record import record_sglang

    chosen = list(names) if names else list(FIXTURES)
    base = out or root / FIXTURES_DIR
    fixtures = [FIXTURES[n] for n in chosen]
    bundles = record_sglang(
        [f.load_workload(root) for f in fixtures],
        [base / n for n in chosen],
        config=[f.config for f in fixtures],
        venv=venv,
        run_ids=[f"sglang-fixture-{n}" for n in chosen],
        overwrite=True,
    )
    if compress:
        for bundle in bundles:
            compress_steps(bundle)
    return bundles


def main(argv: list[str] | None = None) -> int:
    """``python -m tracekit.sglang.fixtures``: remake the fixtures from the installed SGLang."""
    parser = fixture_parser("sglang", str(FIXTURES_DIR))
    parser.add_argument(
        "--workloads",
        action="store_true",
        help=f"write the scenario workloads ({SCENARIO_WORKLOADS})",
    )
    parser.add_argument("names", nargs="*", help="fixtures to record (default: all)")
    args = parser.parse_args(argv)
    if args.workloads:
        folder = args.root / SCENARIO_WORKLOADS
        folder.mkdir(parents=True, exist_ok=True)
        for kind in SCENARIO_KINDS:
            path = folder / f"{kind}.csv"
            path.write_text(scenario_csv(kind), "utf-8")
            print(path)
        return 0
    for path in record_fixtures(
        args.root, out=args.out, names=args.names or None, venv=args.sglang_venv
    ):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
