"""The README's examples run verbatim, and its two set-up commands name what CI runs."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_helpers import qualify_exit

from tracekit.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_readme_has_the_original_examples() -> None:
    assert len(PYTHON_BLOCKS) == 2


def test_configuration_example_asserts_hold() -> None:
    (config_block,) = [b for b in PYTHON_BLOCKS if "BidKVConfig" in b]
    result = _run(config_block)
    assert result.returncode == 0, result.stderr


def test_registry_example_prints_what_the_original_readme_says() -> None:
    (registry_block,) = [b for b in PYTHON_BLOCKS if "BaselineRegistry" in b]
    result = _run(registry_block)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "bidkv\n['bidkv', 'preempt-evict']\n"


@pytest.mark.parametrize("extra", ["tracekit", "tracekit,dev,ray"])
def test_readme_setup_commands_install_the_project_extras(extra: str) -> None:
    assert f'pip install ".[{extra}]"' in README


def test_ci_runs_the_readme_test_command() -> None:
    """CI runs the README's command for every tier, and the lint and type checks it names."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "The test command itself is `pytest`" in README
    assert '`pytest -m ""` runs every tier, and is what CI runs' in README
    lines = [line.strip() for line in ci.splitlines()]
    assert [line for line in lines if line.startswith("pytest")] == ['pytest -m "" || status=$?']
    assert "ruff check ." in lines and "mypy" in lines


def test_policy_examples_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "policy_examples.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    # By hand: U(r1) = 910 / (1 + 0.5*10/256 + 0.3*1) = 694.6 beats U(r0) = 520/1.234 = 421.4;
    # r1 has one preemption (< 2) and the requester r2 frees 67*1.25 < 910, so no guard fires.
    assert "BidKV victim: r1" in result.stdout


#: The slice of the README's workload its job runs on here; benchmarks/qualify_load.py runs the
#: whole job (about 20 s of an idle machine's two cores; this slice takes a third of that).
README_JOB_SLICE = ["--limit", "60"]


@pytest.mark.e2e
def test_readme_main_command_produces_the_report(tmp_path: Path, monkeypatch) -> None:
    (line,) = [line for line in README.splitlines() if "bin/tracekit qualify" in line]
    words = shlex.split(line.split("bin/tracekit ", 1)[1])
    out_at = words.index("--out") + 1
    words[out_at] = str(tmp_path / "report-folder")
    monkeypatch.chdir(ROOT)  # the README runs from the project root
    result = CliRunner().invoke(cli, [*words, *README_JOB_SLICE])
    # 0 for GO, 1 for NO-GO (a finding): the report is written either way.
    assert result.exit_code == qualify_exit(tmp_path / "report-folder"), result.output
    report = tmp_path / "report-folder" / "report.html"
    # The verdict line, then the report's path.
    verdict, path = result.stdout.strip().splitlines()
    assert verdict.startswith(("GO", "NO-GO")), result.output
    assert path == str(report)
    assert report.stat().st_size > 100_000


def test_no_doc_installs_a_name_from_the_package_index() -> None:
    """``pip install bidkv`` fetches an unrelated ``bidkv`` 0.1.0 from the package index, so
    every ``pip install`` in the README and docs installs this checkout or a wheel of it."""
    texts = {"README.md": README}
    texts.update({str(p.relative_to(ROOT)): p.read_text("utf-8") for p in ROOT.glob("docs/*.md")})
    found = 0
    for name, text in texts.items():
        for match in re.finditer(r"pip install ((?:-[\w-]+ )*)(\S+)", text):
            target = match.group(2).strip("\"'`")
            found += 1
            assert target.startswith((".", "/", "$")) or target.endswith(".whl"), (name, target)
    assert found >= 3
    assert "Do not\ninstall `bidkv` by name from the package index" in README


def test_the_full_size_readme_job_is_the_benchmark_s() -> None:
    """benchmarks/qualify_load.py runs the README's own command, at full size."""
    spec = importlib.util.spec_from_file_location(
        "qualify_load", ROOT / "benchmarks" / "qualify_load.py"
    )
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    (line,) = [line for line in README.splitlines() if "bin/tracekit qualify" in line]
    words = shlex.split(line.split("bin/tracekit ", 1)[1])
    words[words.index("--out") + 1] = "OUT"
    assert benchmark.readme_command(Path("OUT")) == words
    assert not set(README_JOB_SLICE) & set(words)  # the README's job has no slice of its own
