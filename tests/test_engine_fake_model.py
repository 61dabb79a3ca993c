"""The fake model's rules (``engine/fake_model.py``) and the engine package's import boundary."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from engine_helpers import make_engine, make_requests, run_checked

from tracekit.engine import BuiltinHost, EngineRequest, RequestStatus, run_engine
from tracekit.engine.fake_model import split_tokens, stop_rule

ROOT = Path(__file__).resolve().parents[1]
CAPPED = RequestStatus.FINISHED_LENGTH_CAPPED
STOPPED = RequestStatus.FINISHED_STOPPED


@pytest.mark.parametrize(
    ("prompt", "target", "max_tokens", "max_model_len", "expected"),
    [
        (10, 5, 8, 100, (5, STOPPED)),  # the target comes first: an end-of-sequence token
        (10, 8, 5, 100, (5, CAPPED)),  # max_tokens comes first
        (10, 5, 5, 100, (5, CAPPED)),  # a tie: vLLM's check_stop tests the length first
        # vLLM check_stop: num_tokens >= max_model_len caps; 95 + 5 outputs = 100 tokens.
        (95, 10, 20, 100, (5, CAPPED)),
        (94, 6, 20, 100, (6, CAPPED)),  # the target's last token also reaches max_model_len
        (93, 5, 20, 100, (5, STOPPED)),
        (99, 3, 3, 100, (1, CAPPED)),  # one token fits
    ],
)
def test_stop_rule(
    prompt: int, target: int, max_tokens: int, max_model_len: int, expected: tuple[int, str]
) -> None:
    assert stop_rule(prompt, target, max_tokens, max_model_len) == expected


@pytest.mark.parametrize(
    ("prompt", "target", "max_tokens", "max_model_len"),
    [(10, 5, 8, 160), (10, 8, 5, 160), (150, 20, 20, 160), (40, 3, 3, 160)],
)
def test_the_engine_stops_requests_where_the_rule_says(
    prompt: int, target: int, max_tokens: int, max_model_len: int
) -> None:
    config = make_engine(11, max_model_len=max_model_len)
    result = run_engine([EngineRequest("a", 0.0, prompt, target, max_tokens)], config, None)
    (record,) = result.requests
    assert (record.num_output_tokens, record.status) == stop_rule(
        prompt, target, max_tokens, max_model_len
    )


class _Request:
    def __init__(self, computed: int, prompt: int, output: int) -> None:
        self.num_computed_tokens = computed
        self.num_output_tokens = output
        self.num_prompt_tokens = prompt


def test_split_tokens_counts_one_decode_token_per_finished_input() -> None:
    requests = {
        "decode": _Request(computed=13, prompt=10, output=3),  # the one missing token
        "chunk": _Request(computed=6, prompt=10, output=0),  # a partial prefill of 6
        "first": _Request(computed=10, prompt=10, output=0),  # a whole prefill, no output yet
        # After a preemption: 1 token left to recompute, but 2 were missing before the step.
        "resume": _Request(computed=12, prompt=10, output=3),
    }
    scheduled = {"decode": 1, "chunk": 6, "first": 10, "resume": 1}
    assert split_tokens(scheduled, requests) == (6 + 10 + 1, 1, 13 + 6 + 10 + 12)


def test_steps_report_the_split_of_their_scheduled_tokens() -> None:
    # A: 48-token prompt, 3 outputs; the prefill step, then two decodes.
    result = run_checked(make_engine(), make_requests(("A", 0, 48, 3)), BuiltinHost())
    assert [(s.num_prefill_tokens, s.num_decode_tokens) for s in result.steps] == [
        (48, 0),
        (0, 1),
        (0, 1),
    ]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_engine_imports_no_policy_and_no_client() -> None:
    # Policies reach the engine through tracekit.hosts only; experiment/ and the recorders are
    # clients of the engine, never the other way round.
    forbidden = ("bidkv", "tracekit.experiment", "tracekit.strategies", "tracekit.recording")
    for path in sorted((ROOT / "tracekit" / "engine").glob("*.py")):
        bad = sorted(m for m in _imports(path) if m.startswith(forbidden))
        assert not bad, f"{path.name} imports {bad}"
