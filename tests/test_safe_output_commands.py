"""Safe output through the commands: no damage, every stop leaves nothing, one meaning each.

The cases an audit found (docs/guarantees.md, "Existing files" and "Interruption"): a stale
staging folder with a huge pid crashed ``record sim``; a failing ``record sim`` left its
staging folder; ``record sim --out`` at a dangling link failed at the final rename and left
one too; ``report --out`` replaced an existing ``qualification.json``; ``sweep --out`` wrote
into a trace bundle or the workload's folder; a SIGKILLed ``replay --mode closed`` left its
staging folder for good; Ctrl-C exited 1 (a finding) or 2 (bad input) instead of 130; and
``--overwrite`` replaced folders no command of tracekit wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tracekit.cli import cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"
CLI = [sys.executable, "-m", "tracekit"]
HUGE = 99999999999999999999
SMALL = ["--limit", "60", "--num-blocks", "300", "--max-model-len", "4608"]


def invoke(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def snapshot(folder: Path) -> dict[str, bytes | str]:
    return {
        p.relative_to(folder).as_posix(): (
            f"link->{os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
        )
        for p in sorted(folder.rglob("*"))
    }


def one_error_line(result: Result) -> str:
    """The one ``Error:`` line (progress lines on stderr may come before it)."""
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.output.strip().endswith(errors[0]), result.output
    assert "Traceback" not in result.output
    return errors[0]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small recording of the built-in policy that preempts (60 requests, 300 blocks)."""
    out = tmp_path_factory.mktemp("recording") / "run"
    result = invoke("record", "sim", "--workload", SAMPLE, *SMALL, "--record-scheduled",
                    "--out", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


# ------------------------------------------------------------------------------ record sim
def test_a_stale_staging_folder_with_a_huge_pid_is_cleaned_not_a_traceback(
    tmp_path: Path,
) -> None:
    stale = tmp_path / f".run.partial-{HUGE}"
    (stale / "decisions").mkdir(parents=True)
    result = invoke("record", "sim", "--workload", SAMPLE, "--limit", "5", "--out",
                    tmp_path / "run")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert names(tmp_path) == ["run"]


def test_a_record_sim_that_fails_in_the_writer_leaves_nothing(tmp_path: Path) -> None:
    # A step time Parquet cannot store fails in the writer's last flush, inside close().
    result = invoke("record", "sim", "--workload", SAMPLE, "--limit", "20", "--clock", "steps",
                    "--step-s", "1e-30", "--out", tmp_path / "out")  # fmt: skip
    assert result.exit_code != 0
    assert names(tmp_path) == []


def test_a_failure_at_the_final_rename_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit import safe_output

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(safe_output.os, "rename", refuse)
    monkeypatch.setattr(safe_output, "_RENAMEAT2", [None])
    result = invoke("record", "sim", "--workload", SAMPLE, "--limit", "5", "--out",
                    tmp_path / "out")  # fmt: skip
    assert result.exit_code == 2
    assert "cross-device" in one_error_line(result).lower()
    assert names(tmp_path) == []


@pytest.mark.parametrize("kind", ["dangling", "to a folder"])
def test_record_sim_at_a_link_is_refused_before_the_run(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "target"
    if kind == "to a folder":
        target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    before = snapshot(tmp_path)
    result = invoke("record", "sim", "--workload", SAMPLE, "--limit", "5", "--out", link)
    assert result.exit_code == 2
    assert "symbolic link" in one_error_line(result)
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ report --out
def test_report_out_replaces_only_the_files_report_wrote(
    report_results: Path, tmp_path: Path
) -> None:
    page, document = tmp_path / "r.html", tmp_path / "qualification.json"
    document.write_text('{"mine": true}\n')
    refused = invoke("report", report_results, "--out", page)
    assert refused.exit_code == 2
    assert "already exists" in one_error_line(refused) and "--overwrite" in refused.output
    refused = invoke("report", report_results, "--out", page, "--overwrite")
    assert refused.exit_code == 2
    assert "not a qualification document" in one_error_line(refused)
    assert names(tmp_path) == ["qualification.json"]
    assert document.read_text() == '{"mine": true}\n'

    document.unlink()
    assert invoke("report", report_results, "--out", page).exit_code == 0
    assert names(tmp_path) == ["qualification.json", "r.html"]
    again = invoke("report", report_results, "--out", page)
    assert again.exit_code == 2 and "already exists" in one_error_line(again)
    replaced = invoke("report", report_results, "--out", page, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    page.write_text("<p>my own page</p>\n")
    refused = invoke("report", report_results, "--out", page, "--overwrite")
    assert refused.exit_code == 2 and "not a report page" in one_error_line(refused)
    assert page.read_text() == "<p>my own page</p>\n"


# ------------------------------------------------------------------------------ sweep --out
@pytest.mark.parametrize(
    "where", ["a bundle", "inside a bundle", "the workload's folder", "a folder of user files"]
)
def test_sweep_never_writes_into_a_bundle_a_workload_folder_or_a_users_folder(
    tmp_path: Path, recording: Path, where: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(SAMPLE, data / "w.csv")
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        'strategies = ["builtin"]\n\n[[workloads]]\npath = "data/w.csv"\nlimit = 20\n\n'
        '[[engines]]\nlabel = "e"\n',
        "utf-8",
    )
    bundle = tmp_path / "bundle"
    shutil.copytree(recording, bundle)
    users = tmp_path / "mine"
    users.mkdir()
    (users / "cells.parquet").write_text("my own cells")
    out = {
        "a bundle": bundle,
        "inside a bundle": bundle / "sweep",
        "the workload's folder": data,
        "a folder of user files": users,
    }[where]
    before = snapshot(tmp_path)
    result = invoke("sweep", matrix, "--out", out, "--jobs", "1")
    assert result.exit_code == 2, result.output
    message = one_error_line(result)
    assert {
        "a bundle": "is a trace bundle",
        "inside a bundle": "inside the trace bundle",
        "the workload's folder": "holds the input",
        "a folder of user files": "not a sweep folder",
    }[where] in message
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ stops
def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "SOURCE_DATE_EPOCH": "1700000000"}


def _start(args: list[object], staging: Callable[[int], Path]) -> subprocess.Popen[bytes]:
    """Start a command and return once its staging folder exists (it is then mid-run)."""
    process = subprocess.Popen(
        [*CLI, *map(str, args)], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while not staging(process.pid).is_dir():
        if process.poll() is not None:
            _, err = process.communicate()
            pytest.fail(f"ended before its staging folder was seen: {err.decode()[-2000:]}")
        assert time.monotonic() < deadline, "no staging folder appeared"
        time.sleep(0.01)
    return process


def test_a_killed_closed_replay_leaves_a_staging_folder_the_next_replay_removes(
    tmp_path: Path, recording: Path
) -> None:
    out = tmp_path / "closed"
    process = _start(
        ["replay", recording, "--strategy", "all", "--mode", "closed", "--out", out],
        lambda pid: tmp_path / f".closed.partial-{pid}",
    )
    process.kill()
    process.communicate()
    assert names(tmp_path) == [f".closed.partial-{process.pid}"]
    result = invoke("replay", recording, "--strategy", "pe", "--mode", "closed", "--out", out)
    assert result.exit_code == 0, result.output
    assert names(tmp_path) == ["closed"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_exits_130_and_leaves_nothing(
    tmp_path: Path, recording: Path, signum: int
) -> None:
    out = tmp_path / "closed"
    process = _start(
        ["replay", recording, "--strategy", "all", "--mode", "closed", "--out", out],
        lambda pid: tmp_path / f".closed.partial-{pid}",
    )
    # Once the runs are under way (a bundle folder inside the staging folder): a stop there
    # went through the run loop, which reported a SIGTERM as Ctrl-C.
    staging = tmp_path / f".closed.partial-{process.pid}"
    deadline = time.monotonic() + 120
    while not any(p.is_dir() for p in staging.glob("*/*")) and process.poll() is None:
        assert time.monotonic() < deadline, "no run started"
        time.sleep(0.01)
    process.send_signal(signum)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130, err.decode()[-2000:]
    lines = err.decode().strip().splitlines()
    assert lines[-1].startswith("Error: ") and "Traceback" not in err.decode()
    # It says what stopped it (a SIGTERM was reported as Ctrl-C).
    assert ("SIGTERM" if signum == signal.SIGTERM else "Ctrl-C") in lines[-1], lines[-1]
    assert names(tmp_path) == []


# ------------------------------------------------------------------------------ --overwrite
def _user_folder(path: Path) -> Path:
    path.mkdir()
    (path / "notes.txt").write_text("mine\n")
    return path


def _user_file(path: Path) -> Path:
    path.write_text('{"mine": true}\n')
    return path


# name -> (arguments before --out, output is a folder)
OVERWRITE: dict[str, tuple[list[object], bool]] = {
    "record sim": (["record", "sim", "--workload", SAMPLE, "--limit", "10"], True),
    "replay": (["replay", "{recording}", "--strategy", "pe"], True),
    "replay closed": (["replay", "{recording}", "--strategy", "pe", "--mode", "closed"], True),
    "oracle": (["oracle", "{recording}", "--strategy", "pe", "--limit", "2", "--no-greedy"], True),
    "calibrate": (["calibrate", "{recording}"], False),
    "capacity": (["capacity", "--workload", SAMPLE, "--limit", "30"], False),
    "experiment traces": (["experiment", "traces", "--num-requests", "5", "--rates", "1.0"], True),
}


@pytest.mark.parametrize("name", sorted(OVERWRITE))
def test_overwrite_has_one_meaning_everywhere(tmp_path: Path, recording: Path, name: str) -> None:
    template, folder = OVERWRITE[name]
    args = [recording if a == "{recording}" else a for a in template]
    out = tmp_path / "out"
    first = invoke(*args, "--out", out)
    assert first.exit_code == 0, first.output
    written = snapshot(tmp_path)
    # An existing output: refused without --overwrite, untouched.
    again = invoke(*args, "--out", out)
    assert again.exit_code == 2
    line = one_error_line(again)
    assert "already exists" in line and "--overwrite" in line
    assert snapshot(tmp_path) == written
    # With it: replaced (the same inputs give the same output), nothing else left beside it.
    replaced = invoke(*args, "--out", out, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert names(tmp_path) == ["out"]
    # What the command did not write is left alone, even with --overwrite: the user's own, and
    # another command's output (a trace bundle is not a replay folder, and so on).
    others = [_user_folder(tmp_path / "mine") if folder else _user_file(tmp_path / "mine.json")]
    if name == "record sim":
        replay = _user_folder(tmp_path / "a-replay")
        (replay / ".tracekit-replay").write_text("{}\n")
        others.append(replay)
    elif folder:
        others.append(shutil.copytree(recording, tmp_path / "a-bundle"))
    else:
        other_format = "tracekit.capacity" if name == "calibrate" else "tracekit-step-time-model"
        others.append(tmp_path / "other.json")
        others[-1].write_text(json.dumps({"format": other_format}))
    before = snapshot(tmp_path)
    for other in others:
        refused = invoke(*args, "--out", other, "--overwrite")
        assert refused.exit_code == 2, (other, refused.output)
        line = one_error_line(refused)
        assert "left alone" in line or "is a trace bundle" in line, line
    assert snapshot(tmp_path) == before


def test_capacity_out_writes_the_json_document_with_its_format(tmp_path: Path) -> None:
    out = tmp_path / "capacity.json"
    args = ["capacity", "--workload", SAMPLE, "--limit", "30"]
    printed = invoke(*args, "--json")
    written = invoke(*args, "--out", out)
    assert printed.exit_code == written.exit_code == 0
    document = json.loads(out.read_text())
    assert document.pop("format") == "tracekit.capacity" and document.pop("version") == 1
    assert document == json.loads(printed.stdout)


# ------------------------------------------------------------------------------ experiment
@pytest.mark.parametrize("command", ["traces", "run"])
def test_experiment_folders_are_new_empty_or_their_own(
    tmp_path: Path, recording: Path, command: str
) -> None:
    """``experiment traces`` wrote into any folder (a bundle's manifest.json too), and
    ``experiment run`` wrote its summaries into any folder without a bundle."""
    args = ["experiment", "traces", "--num-requests", "5", "--rates", "1.0"]
    if command == "run":
        args = ["experiment", "run", "--runs", "1", "--num-requests", "5"]
    bundle = shutil.copytree(recording, tmp_path / "bundle")
    users = _user_folder(tmp_path / "mine")
    before = snapshot(tmp_path)
    for out in (bundle, users, bundle / "inside"):
        refused = invoke(*args, "--out", out)
        assert refused.exit_code == 2, (out, refused.output)
        assert any(
            reason in one_error_line(refused)
            for reason in ("trace bundle", "left alone", "inside the trace bundle")
        )
    assert snapshot(tmp_path) == before
    if command == "traces":  # a new folder, and again (its own) with --overwrite
        assert invoke(*args, "--out", tmp_path / "frozen").exit_code == 0
        assert invoke(*args, "--out", tmp_path / "frozen", "--overwrite").exit_code == 0


# ------------------------------------------------------------------------------ exit codes
def test_qualify_exits_with_its_verdict(tmp_path: Path) -> None:
    """1 is a finding everywhere: diff's differences, and qualify's NO-GO (it exited 0)."""
    out = tmp_path / "results"
    result = invoke("qualify", "--workload", SAMPLE, *SMALL, "--strategy", "builtin",
                    "--load-plan", "single", "--jobs", "1", "--out", out)  # fmt: skip
    headline = json.loads((out / "qualification.json").read_text())["headline"]
    assert headline["decision"] in ("go", "no-go")
    assert result.exit_code == (1 if headline["decision"] == "no-go" else 0), result.output
    # The verdict line, then the report, either way.
    assert result.stdout.strip().splitlines() == [headline["text"], str(out / "report.html")]
