"""The SLO options speak one dialect: ``--slo-ttft-s``/``--slo-tpot-s`` in seconds everywhere.

``experiment run`` took ``--slo-ttft-ms``/``--slo-tpot-ms`` and its error said "pass e.g. 2.0"
(2 ms); ``--slo-tpot-s``, whose default is 0.1, got the same "2.0"; and no ``--slo-*`` option
showed its range in ``--help``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracekit.experiment
from tracekit.cli import cli
from tracekit.cli.common import leaf_commands
from tracekit.errors import ConfigError

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


def invoke(*args: object) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_every_slo_option_is_in_seconds_and_states_its_range() -> None:
    found = []
    for name, command in leaf_commands(cli):
        for param in command.params:
            opts = [o for o in getattr(param, "opts", ()) if o.startswith("--slo-")]
            if not opts or getattr(param, "hidden", False):
                continue
            found.append(f"{name} {opts[0]}")
            assert opts[0].endswith("-s"), f"{name} {opts[0]}: not in seconds"
            assert "finite number > 0" in (param.help or ""), f"{name} {opts[0]}: no range"  # type: ignore[attr-defined]
    assert {"experiment run --slo-ttft-s", "qualify --slo-tpot-s", "oracle --slo-ttft-s"} <= set(
        found
    )


@pytest.mark.parametrize(
    ("args", "example"),
    [
        (["qualify", "--workload", SAMPLE, "--slo-tpot-s", "0", "--out", "o"], "0.1"),
        (["qualify", "--workload", SAMPLE, "--slo-ttft-s", "-1", "--out", "o"], "2"),
        (["experiment", "run", "--slo-ttft-s", "0", "--out", "o"], "0.3"),
        (["experiment", "run", "--slo-tpot-s", "nan", "--out", "o"], "0.1"),
        (["oracle", "b", "--objective", "slo", "--slo-tpot-s", "inf", "--out", "o"], "0.1"),
    ],
)
def test_the_fix_offered_is_in_the_options_unit(args: list[object], example: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.output.strip().endswith(f"; pass e.g. {example}"), result.output


def _spec_of(monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    seen: dict[str, Any] = {}

    def fake(spec: Any, out: Any, **kwargs: Any) -> Any:
        seen["spec"] = spec
        raise ConfigError("stop here")

    # The command imports the experiment when it runs: patched where it lives.
    monkeypatch.setattr(tracekit.experiment, "run_matrix", fake)
    result = invoke("experiment", "run", *args, "--out", "o")
    assert result.exit_code == 2 and "stop here" in result.output, result.output
    return seen["spec"], result.output


def test_experiment_run_takes_seconds_and_the_old_milliseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec, _ = _spec_of(monkeypatch)
    assert (spec.slo.ttft_ms, spec.slo.tpot_ms) == (300.0, None)  # the paper's target
    spec, _ = _spec_of(monkeypatch, "--slo-ttft-s", "0.25", "--slo-tpot-s", "0.05")
    assert (spec.slo.ttft_ms, spec.slo.tpot_ms) == (250.0, 50.0)
    spec, output = _spec_of(monkeypatch, "--slo-ttft-ms", "250")
    assert spec.slo.ttft_ms == 250.0
    assert "warning: --slo-ttft-ms is deprecated; use --slo-ttft-s (in seconds: " in output
    assert "--slo-ttft-s 0.25)" in output
    both = invoke("experiment", "run", "--slo-ttft-ms", "250", "--slo-ttft-s", "1", "--out", "o")
    assert both.exit_code == 2 and "--slo-ttft-ms 250.0 contradicts --slo-ttft-s 1" in both.output
    assert "--slo-ttft-ms" not in invoke("experiment", "run", "--help").output
