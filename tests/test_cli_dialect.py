"""One dialect: the same option name for the same meaning in every command (docs/index.md,
"Conventions").

Before: SLO targets were --slo-ttft-s in qualify and capacity but --ttft-s in oracle; --format
was the workload's format in record/qualify/capacity and the output format in query; replay
took --workers where every other command took --jobs, with another default; report,
calibrate and manifest validate had no --json. The old spellings stay as hidden aliases that
warn.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.cli.common import leaf_commands

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def _visible(command: click.Command) -> dict[str, click.Parameter]:
    return {
        opt: p
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden
        for opt in p.opts
    }


COMMANDS = dict(leaf_commands(cli))


def test_one_name_per_meaning() -> None:
    for name, command in COMMANDS.items():
        options = _visible(command)
        assert "--workers" not in options, name
        assert not {"--ttft-s", "--tpot-s"} & set(options), name
        if "--format" in options:
            assert name == "query", name  # the output format; a workload's is --workload-format
        if "--workload" in options:
            assert "--workload-format" in options, name


def test_every_jobs_option_has_the_one_default() -> None:
    with_jobs = [n for n, c in COMMANDS.items() if "--jobs" in _visible(c)]
    assert {"replay", "oracle", "qualify", "sweep", "experiment run"} <= set(with_jobs)
    for name in with_jobs:
        option = _visible(COMMANDS[name])["--jobs"]
        assert option.default is None, name  # the library's default_jobs(): the cores
        assert "default: the number of cores" in (option.help or ""), name


def test_json_wherever_a_command_prints_a_result() -> None:
    for name in ("validate", "inspect", "diff", "fidelity", "manifest render", "manifest validate",
                 "record sim", "record import", "record vllm", "replay", "qualify", "report",
                 "sweep", "capacity", "oracle", "calibrate", "outputs"):  # fmt: skip
        assert "--json" in _visible(COMMANDS[name]), name


def test_old_spellings_warn_and_keep_working(tmp_path: Path, write_bundle) -> None:  # type: ignore[no-untyped-def]
    bundle = write_bundle(tmp_path / "b")
    replay = CliRunner().invoke(
        cli,
        [
            "replay",
            str(bundle),
            "--strategy",
            "lcf",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert replay.exit_code == 0, replay.output
    assert "warning: --workers is deprecated; use --jobs (same meaning)" in replay.output
    record = CliRunner().invoke(
        cli,
        [
            "record",
            "sim",
            "--workload",
            str(SAMPLE),
            "--limit",
            "5",
            "--format",
            "azure",
            "--out",
            str(tmp_path / "s"),
        ],
    )
    assert record.exit_code == 0, record.output
    assert "warning: --format is deprecated; use --workload-format" in record.output
    wrong = CliRunner().invoke(
        cli,
        [
            "record",
            "sim",
            "--workload",
            str(SAMPLE),
            "--limit",
            "5",
            "--workload-format",
            "mooncake",
            "--out",
            str(tmp_path / "m"),
        ],
    )
    assert wrong.exit_code == 2 and not (tmp_path / "m").exists()
