"""Every reader checks the values it reads, with the row rules ``validate`` applies.

The cases an audit found accepted with exit 0: ``validate`` took 2**62 in integer columns, 1e300
in time columns, a manifest without its ``decisions`` entry and an engine configuration of -1
blocks or 0-token blocks; ``inspect``, ``replay``, ``oracle`` and ``diff`` took NaN, infinite,
negative and absurd values in the columns they use, and a table whose rows disagree with the
manifest (an emptied table). Each is refused now: validate exits 1 (a value) or 2 (the manifest),
every reader exits 2 with one line naming the file, the column and the first row, and writes
nothing.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from trace_helpers import write_bundle

from tracekit.cli import cli
from tracekit.errors import TraceSchemaError
from tracekit.trace import open_trace
from tracekit.trace.schema import trace_schema
from tracekit.trace.validate import check_bundle, validate_trace
from tracekit.trace.values import ALL_COLUMNS, MAX_COUNT, row_rules

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
SMALL = ["--limit", "60", "--num-blocks", "300", "--max-model-len", "4608", "--strategy", "bidkv",
         "--clock", "steps"]  # fmt: skip


def invoke(*args: object):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A legacy and a typed recording of one small run (the typed one with its scheduled table)."""
    root = tmp_path_factory.mktemp("values")
    for host in ("legacy", "typed"):
        result = invoke("record", "sim", "--workload", SAMPLE, *SMALL, "--host", host,
                        "--record-scheduled", "--out", root / host)  # fmt: skip
        assert result.exit_code == 0, result.output
    return root / "legacy", root / "typed"


def _set(bundle: Path, table: str, column: str, value: object, row: int = 0) -> Path:
    """Set one value of ``table`` (same row count, so the manifest still holds)."""
    file = bundle / f"{table}.parquet"
    frame = pl.read_parquet(file)
    values = frame[column].to_list()
    values[row] = value
    frame.with_columns(pl.Series(column, values, dtype=frame.schema[column])).write_parquet(file)
    return file


def _edit_manifest(bundle: Path, change) -> None:  # type: ignore[no-untyped-def]
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text("utf-8"))
    change(manifest)
    path.write_text(json.dumps(manifest), "utf-8")


# --- validate: absurd values and manifests ------------------------------------------------

SCHEMA = trace_schema()
INTEGERS = [(t.name, c.name) for t in SCHEMA.tables.values() for c in t.columns
            if c.type == "int64" and t.name not in ("scheduled", "admissions")]  # fmt: skip
TIMES = [(t.name, c.name) for t in SCHEMA.tables.values() for c in t.columns
         if c.type == "float64" and c.name != "kv_usage" and t.name != "admissions"]  # fmt: skip


@pytest.mark.parametrize(("table", "column"), INTEGERS, ids=[f"{t}.{c}" for t, c in INTEGERS])
def test_validate_refuses_2_to_the_62_in_every_integer_column(
    tmp_path: Path, table: str, column: str
) -> None:
    bundle = write_bundle(tmp_path / "b")
    file = _set(bundle, table, column, 2**62)
    report = validate_trace(bundle)
    assert report.exit_code == 1, report.bundles[0].problems
    bound = "beyond 2**53" if column == "priority" else "above 2**40"
    hits = [p for p in report.bundles[0].problems if f"{table}.{column} is {bound}" in p]
    assert hits and hits[0].startswith(f"{file}: "), report.bundles[0].problems


@pytest.mark.parametrize(("table", "column"), TIMES, ids=[f"{t}.{c}" for t, c in TIMES])
def test_validate_refuses_1e300_in_every_time_column(
    tmp_path: Path, table: str, column: str
) -> None:
    bundle = write_bundle(tmp_path / "b")
    _set(bundle, table, column, 1e300)
    report = validate_trace(bundle)
    assert report.exit_code == 1, report.bundles[0].problems
    assert any(f"{table}.{column} is beyond 1e+10 s" in p for p in report.bundles[0].problems)


def test_the_largest_plausible_values_are_valid(tmp_path: Path) -> None:
    """The bounds leave room: 2**40 tokens, a priority of -2**53, a Unix-time arrival."""
    bundle = write_bundle(tmp_path / "b")
    _set(bundle, "requests", "max_tokens", MAX_COUNT)
    _set(bundle, "requests", "priority", -(2**53))
    _set(bundle, "candidates", "arrival_time", 1.8e9)
    assert validate_trace(bundle).status == "ok", validate_trace(bundle).bundles[0].problems


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda m: m["tables"].pop("decisions"), "field 'tables' has no entry 'decisions'"),
        (lambda m: m["engine_config"].update(num_blocks=-1), "'engine_config.num_blocks' is -1"),
        (lambda m: m["engine_config"].update(block_size=0), "'engine_config.block_size' is 0"),
        (lambda m: m["engine_config"].update(block_size=True), "'engine_config.block_size'"),
        (lambda m: m["engine_config"].update(num_blocks=2**62), "'engine_config.num_blocks'"),
    ],
    ids=[
        "no-decisions-entry",
        "num-blocks-minus-1",
        "block-size-0",
        "block-size-true",
        "num-blocks-2-62",
    ],
)
def test_validate_and_readers_refuse_a_bad_manifest(tmp_path: Path, change, words: str) -> None:  # type: ignore[no-untyped-def]
    bundle = write_bundle(tmp_path / "b")
    _edit_manifest(bundle, change)
    result = invoke("validate", bundle)
    assert result.exit_code == 2, result.output
    assert words in result.output
    inspected = invoke("inspect", bundle)
    assert inspected.exit_code == 2 and words in inspected.output
    assert len(inspected.output.splitlines()) == 1


# --- readers: the values they use ---------------------------------------------------------

NAN, INF = math.nan, math.inf
# (command, table, column, value): a column each reader uses, and a value it used to accept.
READER_CASES = [
    *[("inspect", "steps", "time_s", v) for v in (NAN, INF, -1.0, 1e300)],
    *[("inspect", "requests", "num_preemptions", v) for v in (-1, 2**62)],
    *[("replay", "decisions", "kv_usage", v) for v in (NAN, INF, -0.5, 1e300)],
    *[("replay", "candidates", "num_computed_tokens", v) for v in (-1, 2**62)],
    *[("replay-closed", "requests", "arrival_s", v) for v in (NAN, INF, -1.0, 1e300)],
    *[("oracle", "requests", "prompt_tokens", v) for v in (-1, 0, 2**62)],
    *[("oracle", "requests", "arrival_s", v) for v in (NAN, 1e300)],
    *[("diff", "decisions", "time_s", v) for v in (NAN, INF, -1.0, 1e300)],
    *[("diff", "candidates", "num_prompt_tokens", v) for v in (-1, 2**62)],
]


def _reader_args(command: str, pair: tuple[Path, Path], broken: Path, out: Path) -> list[object]:
    if command == "inspect":
        return ["inspect", broken]
    if command == "replay":
        return ["replay", broken, "--strategy", "lcf", "--out", out]
    if command == "replay-closed":
        return ["replay", broken, "--strategy", "lcf", "--mode", "closed", "--out", out]
    if command == "oracle":
        return ["oracle", broken, "--out", out, "--no-greedy", "--limit", "1"]
    if command == "query":
        return ["query", broken, "select count(*) from decisions"]
    if command == "fidelity":
        return ["fidelity", pair[1], broken]
    if command == "calibrate":
        return ["calibrate", broken, "--out", out / "model.json"]
    assert command == "diff"
    return ["diff", pair[0], broken]


@pytest.mark.parametrize(
    ("command", "table", "column", "value"),
    READER_CASES,
    ids=[f"{c}-{t}.{col}={v}" for c, t, col, v in READER_CASES],
)
def test_readers_refuse_bad_values_in_the_columns_they_use(
    pair: tuple[Path, Path], tmp_path: Path, command: str, table: str, column: str, value: object
) -> None:
    broken = tmp_path / "typed"
    shutil.copytree(pair[1], broken)
    file = _set(broken, table, column, value)
    out = tmp_path / "out"
    result = invoke(*_reader_args(command, pair, broken, out))
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {file}: {table}.{column} is "), result.output
    assert "row(s), the first at" in result.output and len(result.output.splitlines()) == 1
    assert not out.exists()


ROW_COUNT_READERS = ["inspect", "query", "replay", "replay-closed", "oracle", "diff",
                     "fidelity", "calibrate"]  # fmt: skip


@pytest.mark.parametrize("command", ROW_COUNT_READERS)
@pytest.mark.parametrize("table", ["requests", "decisions", "steps"])
def test_an_emptied_table_is_refused_everywhere(
    pair: tuple[Path, Path], tmp_path: Path, command: str, table: str
) -> None:
    broken = tmp_path / "typed"
    shutil.copytree(pair[1], broken)
    file = broken / f"{table}.parquet"
    pl.read_parquet(file).head(0).write_parquet(file)
    out = tmp_path / "out"
    result = invoke(*_reader_args(command, pair, broken, out))
    assert result.exit_code == 2, result.output
    assert f"{file}: table {table!r} has 0 rows, the manifest's field 'tables' says" in (
        result.output
    )
    assert len(result.output.splitlines()) == 1 and not out.exists()
    assert validate_trace(broken).exit_code == 1


def test_an_unfinished_bundle_may_hold_more_rows_than_listed_never_fewer(tmp_path: Path) -> None:
    """A recorder lists a part file after writing it: a kill in between leaves extra rows."""
    bundle = write_bundle(tmp_path / "b")
    rows = pl.read_parquet(bundle / "steps.parquet").height

    def listed(n: int):  # type: ignore[no-untyped-def]
        def change(m):  # type: ignore[no-untyped-def]
            m["complete"] = False
            m["tables"]["steps"]["rows"] = n

        return change

    _edit_manifest(bundle, listed(rows - 1))
    check_bundle(open_trace(bundle).bundles[0], {"steps": ALL_COLUMNS})
    _edit_manifest(bundle, listed(rows + 1))
    with pytest.raises(TraceSchemaError, match=f"has {rows} rows, the manifest's"):
        check_bundle(open_trace(bundle).bundles[0], {"steps": ALL_COLUMNS})


# --- one rule set ---------------------------------------------------------------------------


def test_validate_and_the_readers_apply_the_same_rules(tmp_path: Path) -> None:
    """Each rule broken alone: validate reports it (exit 1) and the reader check names it."""
    cases = [
        ("decisions", "kv_usage", 1.5, "decisions.kv_usage is outside [0, 1]"),
        ("decisions", "outcome", "maybe", "decisions.outcome is not one of"),
        ("steps", "kv_blocks_used", 11, "steps.kv_blocks_used is outside [0, kv_blocks_total]"),
        ("requests", "prompt_tokens", 0, "requests.prompt_tokens is not positive"),
        ("decisions", "step", -2, "decisions.step is below -1"),
    ]
    for i, (table, column, value, message) in enumerate(cases):
        bundle = write_bundle(tmp_path / f"b{i}")
        _set(bundle, table, column, value)
        assert any(message in p for p in validate_trace(bundle).bundles[0].problems), message
        with pytest.raises(TraceSchemaError, match=message.replace("[", r"\[").replace("]", r"\]")):
            check_bundle(open_trace(bundle).bundles[0], {table: ALL_COLUMNS})


def test_a_reader_skips_rules_of_columns_it_does_not_read(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b")
    _set(bundle, "decisions", "kv_usage", math.nan)
    check_bundle(open_trace(bundle).bundles[0], {"decisions": ("run_id", "outcome")})
    spec = SCHEMA.table("decisions")
    read = row_rules(spec, "run-a", columns=("run_id", "outcome"))
    assert {r.columns for r in read} == {("run_id",), ("outcome",)}
