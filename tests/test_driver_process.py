"""The one driver-process runner behind the real-vLLM and real-SGLang recorders."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tracekit.real_engine.process import run_driver_process

# A stand-in driver: answers each input line with a record and an ``end``; its PYTHONPATH holds
# only the links to bidkv and tracekit, so it can import them.
ECHO = textwrap.dedent(
    """
    import json, os, sys
    import bidkv, tracekit
    print(json.dumps({"kind": "hello", "path": os.environ["PYTHONPATH"]}), flush=True)
    for line in sys.stdin:
        scenario = json.loads(line)
        print(json.dumps({"kind": "record", "n": scenario["n"]}), flush=True)
        if scenario["n"] == 99:
            print("dying", file=sys.stderr)
            sys.exit(3)
        print(json.dumps({"kind": "end"}), flush=True)
    """
)


class DriverFailed(Exception):
    pass


def _lines(*numbers: int) -> list[str]:
    return [json.dumps({"n": n}) + "\n" for n in numbers]


def test_messages_arrive_in_order_and_the_links_are_removed() -> None:
    messages = list(
        run_driver_process(
            Path(sys.executable), ["-c", ECHO], _lines(1, 2), engine="Test", error=DriverFailed
        )
    )
    assert [m["kind"] for m in messages] == ["hello", "record", "end", "record", "end"]
    assert [m["n"] for m in messages if m["kind"] == "record"] == [1, 2]
    assert not Path(messages[0]["path"]).exists()


def test_a_driver_that_dies_raises_with_its_error_output() -> None:
    with pytest.raises(DriverFailed) as caught:
        list(
            run_driver_process(
                Path(sys.executable),
                ["-c", ECHO],
                _lines(1, 99, 2),
                engine="Test",
                error=DriverFailed,
            )
        )
    message = str(caught.value)
    assert "the Test driver" in message and "status 3 after 1 of 3 runs" in message
    assert "dying" in message


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_missing_engine_environment_names_its_folder_and_the_install_script(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.sglang.record import SglangUnavailableError, find_sglang_python
    from tracekit.vllm.record import VllmUnavailableError, find_vllm_python

    find, error, variable = {
        "vllm": (find_vllm_python, VllmUnavailableError, "BIDKV_VLLM_VENV"),
        "sglang": (find_sglang_python, SglangUnavailableError, "BIDKV_SGLANG_VENV"),
    }[engine]
    monkeypatch.setenv(variable, str(tmp_path / "from-env"))
    with pytest.raises(error) as caught:
        find()
    assert str(tmp_path / "from-env") in str(caught.value)
    assert f"install-{engine}-cpu.sh" in str(caught.value)
    # An explicit folder wins over the variable; a Python executable is taken as it is.
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    python = tmp_path / "venv" / "bin" / "python"
    python.write_text("")
    assert find(tmp_path / "venv") == python
    assert find(python) == python
