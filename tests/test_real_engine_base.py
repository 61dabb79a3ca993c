"""The real-engine base: both sides of the driver line protocol, and what the base may import."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracekit.errors import ConfigError
from tracekit.real_engine.environment import (
    SGLANG,
    VLLM,
    EngineDriverError,
    EngineUnavailableError,
    RealEngine,
)
from tracekit.real_engine.process import record_runs, run_messages

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "tracekit" / "real_engine"

# A driver on the shared serving loop: its backend is a dict; a scenario's ``n`` of 0 raises,
# and every run prints (which must not reach the message channel).
DRIVER = textwrap.dedent(
    """
    import os, sys
    from tracekit.real_engine.serve import serve_scenarios

    def run_one(backend, scenario, emit):
        print("chatter on stdout")
        emit({"kind": "record", "run": scenario["run"], "inverse": 1 / scenario["n"]})
        return {"kind": "end", "run": scenario["run"], "backend": backend["name"]}

    check = (lambda backend: print("checked", backend["name"], file=sys.stderr)) if (
        "--check" in sys.argv) else None
    sys.exit(serve_scenarios(None, lambda: ({"name": "fake"}, {"fake_version": "1.2",
                             "offline": os.environ.get("HF_HUB_OFFLINE")}),
                             run_one, protocol=7, buffering=1, check=check))
    """
)


def _serve(lines: list[str], *args: str) -> tuple[list[dict[str, Any]], str]:
    # The driver runs offline even when whoever started it did not say so.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *args],
        env=env,
        input="".join(lines),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def _scenario(run: int, n: int, protocol: int = 7) -> str:
    return json.dumps({"kind": "scenario", "protocol": protocol, "run": run, "n": n}) + "\n"


def test_the_driver_says_hello_then_answers_every_scenario_in_order() -> None:
    messages, stderr = _serve([_scenario(0, 2), "\n", _scenario(1, 0), _scenario(2, 4, 6)])
    hello = messages[0]
    assert list(hello) == ["kind", "protocol", "fake_version", "offline", "python", "import_s"]
    assert hello["protocol"] == 7 and hello["fake_version"] == "1.2"
    assert hello["offline"] == "1"
    assert hello["python"] == sys.version.split()[0] and hello["import_s"] >= 0
    assert messages[1:3] == [
        {"kind": "record", "run": 0, "inverse": 0.5},
        {"kind": "end", "run": 0, "backend": "fake"},
    ]
    # A run that raises is an error message with its traceback; the next one still runs, and
    # one of another protocol is refused before it runs.
    assert [m["kind"] for m in messages[3:]] == ["error", "error"]
    assert messages[3]["run"] == 1 and messages[3]["message"].startswith("ZeroDivisionError")
    assert "Traceback" in messages[3]["traceback"]
    assert messages[4]["run"] == 2
    assert "protocol 6 is not 7" in messages[4]["message"]
    assert "different versions of tracekit" in messages[4]["message"]
    # What the run printed went to standard error, not into the messages.
    assert stderr.count("chatter on stdout") == 2


def test_the_check_mode_says_hello_and_reads_no_scenario() -> None:
    messages, stderr = _serve([_scenario(0, 1)], "--check")
    assert [m["kind"] for m in messages] == ["hello"]
    assert "checked fake" in stderr


def _generator(messages: list[dict[str, Any]], closed: list[bool]) -> Iterator[dict[str, Any]]:
    try:
        yield from messages
    finally:
        closed.append(True)


def test_record_runs_reads_each_run_and_drains_and_closes_the_driver() -> None:
    stream = [
        {"kind": "hello", "protocol": 3},
        {"kind": "step", "run": 0},
        {"kind": "end", "run": 0},
        {"kind": "end", "run": 1},
        {"kind": "stats"},  # after the last run: drained, not read as a run's
    ]
    closed: list[bool] = []
    messages = _generator(stream, closed)
    seen: list[list[str]] = []

    def record_one(index: int, hello: dict[str, Any]) -> Path:
        assert hello["protocol"] == 3
        seen.append(
            [m["kind"] for m in run_messages(index, messages, "the X driver", EngineDriverError)]
        )
        return Path(f"run-{index}")

    bundles = record_runs(
        messages,  # type: ignore[arg-type]
        2,
        record_one,
        driver="the X driver",
        error=EngineDriverError,
        protocol=3,
    )
    assert bundles == [Path("run-0"), Path("run-1")]
    assert seen == [["step", "end"], ["end"]]
    assert closed == [True]


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        ([{"kind": "hello", "protocol": 2}], "the X driver did not start as expected"),
        ([{"kind": "step", "run": 0}], "the X driver did not start as expected"),
        (
            [{"kind": "hello", "protocol": 3}, {"kind": "step", "run": 1}],
            "the X driver answered out of order",
        ),
        (
            [
                {"kind": "hello", "protocol": 3},
                {"kind": "error", "run": 0, "message": "boom", "traceback": "tb"},
            ],
            "run 0 failed in the X driver: boom\ntb",
        ),
        ([{"kind": "hello", "protocol": 3}], "the X driver stopped before finishing run 0"),
    ],
)
def test_record_runs_refuses_a_driver_that_breaks_the_protocol(
    stream: list[dict[str, Any]], expected: str
) -> None:
    closed: list[bool] = []
    messages = _generator(stream, closed)

    def record_one(index: int, hello: dict[str, Any]) -> Path:
        list(run_messages(index, messages, "the X driver", EngineDriverError))
        return Path()

    with pytest.raises(EngineDriverError) as caught:
        record_runs(
            messages,  # type: ignore[arg-type]
            1,
            record_one,
            driver="the X driver",
            error=EngineDriverError,
            protocol=3,
        )
    assert str(caught.value).startswith(expected)
    assert closed == [True]


def test_each_engine_names_its_environment_in_the_option_help() -> None:
    assert VLLM.venv_help == (
        "The vLLM environment (default: $BIDKV_VLLM_VENV, then ~/.cache/bidkv/vllm-cpu-venv)."
    )
    assert SGLANG.venv_help == (
        "The SGLang environment (default: $BIDKV_SGLANG_VENV, then ~/.cache/bidkv/sglang-cpu-venv)."
    )
    assert VLLM.default_venv == Path.home() / ".cache" / "bidkv" / "vllm-cpu-venv"


@pytest.mark.parametrize(
    ("engine", "hint"),
    [
        (VLLM, "run scripts/install-vllm-cpu.sh or pass --vllm-venv / set BIDKV_VLLM_VENV"),
        (SGLANG, "run scripts/install-sglang-cpu.sh or set BIDKV_SGLANG_VENV"),
    ],
)
def test_a_missing_environment_is_a_bad_input_error_naming_the_fix(
    engine: RealEngine, hint: str, tmp_path: Path
) -> None:
    with pytest.raises(engine.unavailable) as caught:
        engine.python(tmp_path / "none")
    # A ConfigError: the command exits 2 with this one line.
    assert isinstance(caught.value, EngineUnavailableError)
    assert isinstance(caught.value, ConfigError)
    assert str(caught.value) == (
        f"{tmp_path / 'none'}: no {engine.name} environment "
        f"(no {tmp_path / 'none' / 'bin' / 'python'}); {hint}"
    )


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_base_knows_no_engine_but_in_the_fidelity_entry_point() -> None:
    # The engines build on the base; only tracekit fidelity's entry point picks one of them.
    for path in sorted(BASE.glob("*.py")):
        engine = {n for n in _imports(path) if n.startswith(("tracekit.vllm", "tracekit.sglang"))}
        if path.name == "fidelity.py":
            assert engine, "the fidelity entry point dispatches to both engines"
        else:
            assert engine == set(), path.name


def test_the_driver_side_imports_the_standard_library_only() -> None:
    # serve.py runs inside the engine's environment, beside the engine's own packages.
    for name in ("serve.py", "process.py"):
        outside = {
            n.split(".")[0]
            for n in _imports(BASE / name)
            if n.split(".")[0] not in sys.stdlib_module_names
        }
        assert outside == set(), name
