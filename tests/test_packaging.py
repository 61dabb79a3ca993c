"""The source distribution carries what its tests and documented defaults need."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest

# Builds an sdist and a wheel, installs it in a fresh environment: the e2e tier (docs/testing.md).
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


def _tracked_copy(dest: Path) -> Path:
    """The files git tracks, copied to ``dest`` (a build writes egg-info beside its sources)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / name.decode()
        target = dest / name.decode()
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, target)
    return dest


@pytest.fixture(scope="module")
def sdist_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know the tracked files")
    src = _tracked_copy(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"
    built = (
        subprocess.run(
            [sys.executable, "-c", code], cwd=src, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    with tarfile.open(out / built) as archive:
        return {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}


def test_sdist_holds_the_files_that_its_tests_and_defaults_read(sdist_names: set[str]) -> None:
    for needed in (
        "LICENSE",
        "traces/azure-llm-2023/azure_conv_sample.csv",
        "traces/azure-llm-2023/LICENSE",
        "traces/sharegpt-lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
        "traces/DATA_SOURCES.md",
        "docs/index.md",
        "examples/sweeps/smoke.toml",
        "schemas/trace-v1.json",
        "schemas/trace-v2.json",
        "schemas/trace-v3.json",
        "examples/workloads/conversations-synthetic.csv",
        "tests/data/workloads/azure_small.csv",
    ):
        assert needed in sdist_names, needed


def test_every_path_a_test_opens_under_the_root_is_in_the_sdist(sdist_names: set[str]) -> None:
    # Every top-level folder the tests name as ROOT / "<folder>" must travel with them.
    folders = set()
    for test in (ROOT / "tests").glob("*.py"):
        text = test.read_text("utf-8")
        for folder in ("traces", "docs", "examples", "schemas", "scripts", "benchmarks"):
            if f'ROOT / "{folder}"' in text or f"ROOT / '{folder}'" in text:
                folders.add(folder)
    for folder in folders:
        assert any(name.startswith(f"{folder}/") for name in sdist_names), folder


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the tracked files, installed by pip into a new environment.

    A virtual environment outside the checkout gets the wheel with ``pip install --no-deps
    --no-index`` (pip's own install: files, metadata, the ``tracekit`` console script). Its
    dependencies are this environment's: one ``.pth`` line puts this environment's
    site-packages after the new environment's own, so the wheel's copy of the package is the
    one imported and nothing is downloaded. Returns the new environment's interpreter.
    """
    if not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know the tracked files")
    src = _tracked_copy(tmp_path_factory.mktemp("wsrc"))
    out = tmp_path_factory.mktemp("wheel")
    code = f"from setuptools import build_meta; print(build_meta.build_wheel({str(out)!r}))"
    built = (
        subprocess.run(
            [sys.executable, "-c", code], cwd=src, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    env_dir = tmp_path_factory.mktemp("env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    own_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(out / built)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    # Only now the dependencies: had pip seen this environment's own install of the project,
    # it would have called the wheel "already satisfied" and installed nothing.
    deps = sysconfig.get_paths()["purelib"]
    (Path(own_site) / "_tracekit_test_deps.pth").write_text(deps + "\n", encoding="utf-8")
    return python


def _from_wheel(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The installed wheel's environment; no PYTHONPATH (a checkout on it would shadow the wheel).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_pip_installed_the_wheel_with_its_console_script(
    installed_wheel: Path, tmp_path: Path
) -> None:
    where = _from_wheel(
        installed_wheel, tmp_path, "-c", "import tracekit; print(tracekit.__file__)"
    )
    site = Path(where.stdout.strip()).parents[1]
    assert site.is_relative_to(installed_wheel.parents[1]), where.stdout + where.stderr
    assert not site.is_relative_to(ROOT)
    script = installed_wheel.parent / "tracekit"
    done = subprocess.run(
        [str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "qualify" in done.stdout, done.stdout + done.stderr


def test_the_wheel_ships_the_quick_start_sample_and_the_default_pool(
    installed_wheel: Path, tmp_path: Path
) -> None:
    code = "import tracekit; print(tracekit.__file__)"
    where = _from_wheel(installed_wheel, tmp_path, "-c", code)
    assert where.stdout.startswith(str(installed_wheel.parents[1])), where.stdout + where.stderr
    sample = _from_wheel(installed_wheel, tmp_path, "-m", "tracekit.data", "azure_conv_sample.csv")
    path = Path(sample.stdout.strip())
    assert path.is_file() and not path.is_symlink()
    assert path.read_bytes() == (ROOT / "traces/azure-llm-2023/azure_conv_sample.csv").read_bytes()
    for licence in ("LICENSE-azure-llm-2023", "LICENSE-sharegpt-lengths"):
        assert (path.parent / licence).is_file()


def test_the_readme_quick_start_runs_from_the_wheel_outside_the_checkout(
    installed_wheel: Path, tmp_path: Path
) -> None:
    sample = _from_wheel(installed_wheel, tmp_path, "-m", "tracekit.data", "azure_conv_sample.csv")
    workload = sample.stdout.strip()
    record = _from_wheel(
        installed_wheel,
        tmp_path,
        "-m",
        "tracekit",
        "record",
        "sim",
        "--workload",
        workload,
        "--limit",
        "200",
        "--strategy",
        "bidkv",
        "--out",
        "runs/typed",
    )
    assert record.returncode == 0, record.stderr
    check = _from_wheel(installed_wheel, tmp_path, "-m", "tracekit", "validate", "runs/typed")
    assert check.returncode == 0, check.stdout + check.stderr
    # The experiment's default pool resolves from the package, not from the current folder.
    traces = _from_wheel(
        installed_wheel,
        tmp_path,
        "-m",
        "tracekit",
        "experiment",
        "traces",
        "--out",
        "frozen",
        "--num-requests",
        "20",
    )
    assert traces.returncode == 0, traces.stderr


def test_the_rest_of_the_quick_start_and_experiment_run_work_from_the_wheel(
    installed_wheel: Path, tmp_path: Path
) -> None:
    """Beyond record and validate: the Quick start's reading commands, and ``experiment run``
    with its default pool (it had no ``--pool`` and a pool path relative to the checkout)."""
    sample = _from_wheel(installed_wheel, tmp_path, "-m", "tracekit.data", "azure_conv_sample.csv")
    workload = sample.stdout.strip()
    small = ["--limit", "150", "--strategy", "bidkv"]
    for host in ("typed", "legacy"):
        args = ["record", "sim", "--workload", workload, *small, "--host", host,
                "--out", f"runs/{host}"]  # fmt: skip
        done = _from_wheel(installed_wheel, tmp_path, "-m", "tracekit", *args)
        assert done.returncode == 0, done.stderr
    commands = [
        ["inspect", "runs/typed"],
        ["replay", "runs/typed", "--strategy", "all", "--out", "replay/open"],
        ["diff", "runs/legacy", "runs/typed", "--allow-contract-differences"],
        ["query", "runs", "select outcome, count(*) from decisions group by 1"],
        ["experiment", "run", "--out", "exp", "--strategies", "preempt-evict", "--rates", "3.8",
         "--runs", "1", "--num-requests", "20"],
    ]  # fmt: skip
    for args in commands:
        done = _from_wheel(installed_wheel, tmp_path, "-m", "tracekit", *args)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    manifest = json.loads(next((tmp_path / "exp" / "traces").rglob("manifest.json")).read_text())
    # The default pool, read from inside the unpacked wheel (there is no checkout here); the
    # manifest names it by its checkout path, as a run from the checkout does.
    assert manifest["pool"]["source"].endswith("sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
    assert not (tmp_path / "traces").exists() and manifest["pool"]["num_rows"] > 0
