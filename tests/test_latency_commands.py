"""``--latency`` from every command that runs the engine.

record sim, qualify, sweep (an ``[[engines]]`` key, pickled to worker processes) and
experiment run; the calibrate round trip is in ``test_latency_calibrate_cmd``.

Independent facts: a calibrated model with known coefficients fixes every step's duration
(``duration = c . make-up``, checked against the make-up derived from the bundle's tables), and
the manifests and report headers must name the model that was asked for.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from report_helpers import qualify_exit
from sweep_helpers import SAMPLE, write_matrix

from tracekit.cli import cli
from tracekit.errors import ConfigError
from tracekit.latency.measured import step_makeup
from tracekit.qualify import write_report
from tracekit.sweep import load_matrix, run_sweep
from tracekit.trace import open_trace

KNOWN = {
    "intercept": 0.006,
    "num_prefill_tokens": 0.00012,
    "num_decode_seqs": 0.0004,
    "kv_tokens_read": 3e-7,
    "num_sequences": 0.0002,
}


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "known.json"
    path.write_text(
        json.dumps({"format": "tracekit-step-time-model", "version": 1, "coefficients": KNOWN})
    )
    return path


def _known_durations(bundle: Path) -> tuple[list[float], list[float]]:
    """The recorded durations, and the KNOWN model applied to each step's make-up."""
    frame = step_makeup(open_trace(bundle))
    expected = frame.select(
        pl.lit(KNOWN["intercept"])
        + sum(pl.col(t) * c for t, c in KNOWN.items() if t != "intercept")
    ).to_series()
    return frame["duration_s"].to_list(), expected.to_list()


def test_sweep_engines_take_a_latency_key_through_worker_processes(
    known: Path, tmp_path: Path
) -> None:
    matrix = write_matrix(
        tmp_path,
        f"""
strategies = ["builtin", "bidkv"]
[[workloads]]
path = "{SAMPLE}"
limit = 60
[[engines]]
label = "roofline"
num_blocks = 300
max_model_len = 4608
[[engines]]
label = "calibrated"
num_blocks = 300
max_model_len = 4608
latency = "calibrated:{known}"
""",
    )
    result = run_sweep(matrix, tmp_path / "out", jobs=2)
    assert result.exit_code == 0 and result.count("done") == 4
    manifests = {
        p.parent.name if "config=" not in str(p) else str(p): json.loads(p.read_text())
        for p in (tmp_path / "out").rglob("manifest.json")
    }
    by_config = {
        next(part for part in key.split("/") if part.startswith("config=")): m
        for key, m in manifests.items()
    }
    assert by_config["config=roofline"]["latency"]["spec"] == "roofline:a6000-llama3-8b"
    assert by_config["config=calibrated"]["latency"]["spec"] == f"calibrated:{known}"
    # A version-1 file: the pairs term it predates is 0.
    assert by_config["config=calibrated"]["latency"]["coefficients"] == KNOWN | {
        "prefill_attention_pairs": 0.0
    }
    report = write_report(tmp_path / "out").read_text("utf-8")
    assert "<dt>step times</dt><dd>roofline: roofline:a6000-llama3-8b" in report
    assert f"calibrated: calibrated:{known} (fitted" in report


@pytest.mark.parametrize(
    ("latency", "words"),
    [
        pytest.param("roofline:h100", "unknown roofline preset 'h100'", id="unknown-preset"),
        # A matrix asking for aiconfigurator without the package is refused on load.
        pytest.param(
            "aiconfigurator:l40s/meta-llama/Meta-Llama-3.1-8B",
            "aiconfigurator-core",
            id="aiconfigurator-absent",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("aiconfigurator_core") is not None,
                reason="checks the error raised when aiconfigurator-core is absent",
            ),
        ),
    ],
)
def test_a_bad_latency_in_a_matrix_names_the_engine(
    tmp_path: Path, latency: str, words: str
) -> None:
    matrix = write_matrix(
        tmp_path,
        f'strategies = ["builtin"]\n[[workloads]]\npath = "{SAMPLE}"\n'
        f'[[engines]]\nlatency = "{latency}"\n',
    )
    with pytest.raises(ConfigError) as err:
        load_matrix(matrix)
    assert "engines[0]" in str(err.value) and words in str(err.value)


def test_record_sim_steps_last_what_the_calibrated_model_says(known: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["record", "sim", "--workload", str(SAMPLE), "--limit", "60", "--num-blocks", "300",
         "--max-model-len", "4608", "--record-scheduled", "--latency", f"calibrated:{known}",
         "--out", str(tmp_path / "b")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    recorded, expected = _known_durations(tmp_path / "b")
    assert len(recorded) > 100
    assert recorded == pytest.approx(expected, rel=1e-12)


@pytest.mark.e2e
def test_qualify_records_and_reports_the_latency_model(known: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = CliRunner().invoke(
        cli,
        ["qualify", "--workload", str(SAMPLE), "--limit", "120", "--num-blocks", "300",
         "--max-model-len", "4608", "--strategy", "builtin,bidkv",
         "--latency", f"calibrated:{known}", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == qualify_exit(out), result.output
    inputs = json.loads((out / "qualify.json").read_text())
    assert inputs["engine_config"]["latency"] == f"calibrated:{known}"
    specs = {json.loads(p.read_text())["latency"]["spec"] for p in out.rglob("manifest.json")}
    assert specs == {f"calibrated:{known}"}
    page = (out / "report.html").read_text("utf-8")
    assert f"<dt>step times</dt><dd>calibrated:{known} (fitted" in page


def test_experiment_run_takes_latency(known: Path, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    result = CliRunner().invoke(
        cli,
        ["experiment", "run", "--out", str(out), "--runs", "1", "--num-requests", "60",
         "--rates", "1", "--strategies", "bidkv", "--latency", f"calibrated:{known}"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    spec = json.loads((out / "matrix.json").read_text())["spec"]
    assert spec["engine_config"]["latency"] == f"calibrated:{known}"
    assert spec["engine_config"]["cost_model"] == "a6000-llama3-8b"
    bundles = [p for p in (out / "bundles").rglob("manifest.json")]
    assert bundles and all(
        json.loads(p.read_text())["latency"]["kind"] == "calibrated" for p in bundles
    )


@pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is not None,
    reason="checks the error raised when aiconfigurator-core is absent",
)
def test_experiment_aiconfigurator_without_the_package_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "exp"
    result = CliRunner().invoke(
        cli, ["experiment", "run", "--out", str(out), "--latency", "aiconfigurator"]
    )
    assert result.exit_code == 2
    assert "aiconfigurator-core" in result.output and "Python 3.11" in result.output
    assert not out.exists()


def test_record_vllm_takes_only_the_roofline(known: Path, tmp_path: Path) -> None:
    # The real scheduler's adapter does not advance the engine's request states (the clock's
    # guard, tests/test_latency_clock.py): refused when parsed, before the driver starts.
    out = tmp_path / "v"
    result = CliRunner().invoke(
        cli,
        ["record", "vllm", "--workload", str(SAMPLE), "--limit", "5",
         "--latency", f"calibrated:{known}", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "only roofline[:PRESET] times it" in result.output and not out.exists()


@pytest.mark.parametrize(
    "path", [("record", "sim"), ("record", "vllm"), ("qualify",), ("experiment", "run")]
)
def test_every_command_that_runs_the_engine_takes_latency(path: tuple[str, ...]) -> None:
    import click

    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    params = {p.name: p for p in command.params}
    assert "latency" in params and params["latency"].default is None


def test_closed_replay_reruns_with_the_recorded_latency_model(known: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["record", "sim", "--workload", str(SAMPLE), "--limit", "60", "--num-blocks", "300",
         "--max-model-len", "4608", "--latency", f"calibrated:{known}",
         "--out", str(tmp_path / "b")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        cli,
        ["replay", str(tmp_path / "b"), "--mode", "closed", "--strategy", "bidkv",
         "--out", str(tmp_path / "r")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    manifests = list((tmp_path / "r").rglob("manifest.json"))
    assert manifests
    for path in manifests:
        assert json.loads(path.read_text())["latency"]["spec"] == f"calibrated:{known}"
