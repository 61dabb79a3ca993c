"""A run that can never progress stops with a one-line error instead of spinning for ever.

The case, worked out by hand: SGLang mode, page size 1, 698 KV blocks (697 usable), no radix
cache, one request of 471 prompt tokens sent with ``ignore_eos`` and ``max_tokens`` 300.
``init_req_max_new_tokens`` clips its output to ``min(696 - 471 - 1, 697 - 471 - 1 - 1) = 224``
tokens. ``add_one_req_ignore_eos`` then takes its 472-token extend (prompt and a page) from the
697 free, leaving 225, and wants more than one token (``IGNORE_EOS_RESERVE_TOKENS``) still free
once its 224 outputs are in: 225 - 224 = 1 is not more than 1. So it is refused with the whole
pool free; nothing else will ever run or arrive, and SGLang's loop would spin on it. The engine
used to as well, in its normal loop (and ended in a traceback in the overlap loop). With
``max_tokens`` 223 the same request leaves 2 and is admitted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, run_engine
from tracekit.errors import ConfigError
from tracekit.workloads.client import ClientModel


def _config(overlap: bool) -> EngineConfig:
    return EngineConfig(
        mode="sglang", block_size=1, num_blocks=698, radix_cache=False,
        overlap_schedule=overlap, clock="steps",
    )  # fmt: skip


STUCK = EngineRequest("r0", 0.0, 471, 300, max_tokens=300, ignore_eos=True)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_request_no_pool_state_admits_stops_the_run(overlap: bool) -> None:
    with pytest.raises(ConfigError) as error:
        run_engine([STUCK], _config(overlap), BuiltinHost())
    message = str(error.value)
    assert "\n" not in message
    assert "r0 (471 prompt tokens, at most 300 output tokens, ignore_eos) waits" in message
    assert "697 of 697 KV blocks free" in message and "--num-blocks" in message


@pytest.mark.parametrize("overlap", [False, True])
def test_one_output_token_less_is_admitted(overlap: bool) -> None:
    """The hand-worked bound: ``max_tokens`` 223 leaves the two tokens the drain check needs."""
    fits = EngineRequest("r0", 0.0, 471, 300, max_tokens=223, ignore_eos=True)
    result = run_engine([fits], _config(overlap), BuiltinHost())
    assert [r.num_output_tokens for r in result.requests] == [223]
    with pytest.raises(ConfigError):
        run_engine(
            [EngineRequest("r0", 0.0, 471, 300, max_tokens=224, ignore_eos=True)],
            _config(overlap),
            BuiltinHost(),
        )


@pytest.mark.parametrize("overlap", [False, True])
def test_a_client_cancel_ahead_still_ends_the_run(overlap: bool) -> None:
    """A TTFT timeout will abort the stuck request: the run waits for it and ends cleanly."""
    later = EngineRequest("r1", 0.5, 100, 10, max_tokens=20)
    result = run_engine(
        [STUCK, later], _config(overlap), BuiltinHost(), client=ClientModel(ttft_timeout_s=2.0)
    )
    assert result.num_aborted == 1
    assert {r.request_id: r.status for r in result.requests}["r1"] == "finished_stopped"


@pytest.mark.parametrize("loop", ["--overlap-schedule", "--disable-overlap-schedule"])
def test_record_sim_says_so_in_one_line_and_writes_nothing(tmp_path: Path, loop: str) -> None:
    workload = tmp_path / "stuck.csv"
    workload.write_text(
        "request_id,arrival_s,prompt_tokens,output_tokens\nr0,0.0,471,300\n", "utf-8"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli,
        [
            "record", "sim", "--workload", str(workload), "--engine-mode", "sglang",
            "--num-blocks", "698", "--no-radix-cache", "--ignore-eos", loop, "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: requests can never be scheduled: r0")
    assert list(tmp_path.iterdir()) == [workload]
