"""Property tests of the policy on random contexts (hypothesis).

- Every strategy, on 1 to 512 candidates with zero and extreme fields, both scheduling policies,
  with and without a requester, never raises and returns ``None`` or a candidate id; through the
  host controller the victim is always a candidate and the policy is never disabled.
- Broken policies are disabled exactly as the host contract says
  (docs/contracts.md, "The controller and its counters").
- The one-pass decision equals a straightforward full sort of the ranking, ties included.
- The bounded per-request tables do not change any decision until the bound is reached.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bidkv.adapters.vllm_hust.config import KNOWN_STRATEGY_NAMES
from bidkv.adapters.vllm_hust.scoring import rank_candidates, scan_top
from bidkv.adapters.vllm_hust.selector import BidkvPreemptionPolicy, BidkvSelectorConfig
from tracekit.hosts.preemption_policy import (
    PreemptionCandidate,
    PreemptionContext,
    PreemptionPolicyController,
    builtin_victim_id,
)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EXTREME_INT = st.one_of(
    st.integers(min_value=0, max_value=8),
    st.integers(min_value=-(2**40), max_value=2**62),
    st.sampled_from([0, 1, -1, 2**31 - 1, 2**53, 2**53 + 1, 2**62]),
)
EXTREME_FLOAT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 1e308, -1e308]),
)
# What a host may pass (the typed contract's times are finite): extreme, never NaN or infinite.
FINITE_FLOAT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, 1e308, -1e308]),
)
IDS = st.one_of(st.sampled_from(["a", "b", "c", "d", "", "r1", "r10"]), st.text(max_size=4))


@st.composite
def candidates(
    draw: st.DrawFn, max_size: int = 512, finite: bool = False
) -> tuple[PreemptionCandidate, ...]:
    n = draw(st.integers(min_value=1, max_value=max_size))
    floats = FINITE_FLOAT if finite else EXTREME_FLOAT
    # Most candidates come from a cheap template so that large lists stay fast to draw.
    # A candidate's fields after its id: priority, arrival time, then five counts.
    fields = (EXTREME_INT, floats, *[EXTREME_INT] * 5)
    template = draw(st.tuples(*fields))
    varied = draw(st.lists(st.tuples(IDS, *fields), min_size=1, max_size=min(n, 24)))
    rows: list[PreemptionCandidate] = []
    for i in range(n):
        if i < len(varied):
            rows.append(PreemptionCandidate(*varied[i]))
        else:
            rows.append(PreemptionCandidate(f"t{i}", *template))
    return tuple(draw(st.permutations(rows))) if n <= 24 else tuple(rows)


@st.composite
def contexts(draw: st.DrawFn, max_size: int = 512, finite: bool = False) -> PreemptionContext:
    """Contexts with extreme values; ``finite`` keeps to what the typed contract allows."""
    cands = draw(candidates(max_size, finite))
    ids = [c.request_id for c in cands]
    requester = draw(st.one_of(st.sampled_from(ids), st.just(""), st.just("not-a-candidate")))
    return PreemptionContext(
        cands,
        draw(st.sampled_from(["fcfs", "priority"])),
        requester,
        draw(
            st.one_of(
                st.floats(min_value=0.0, max_value=1.0),
                st.sampled_from([0.0, 1.0]),
                *(() if finite else (st.none(),)),
            )
        ),
        draw(st.one_of(st.floats(min_value=-1e6, max_value=1e6), st.just(0.0))),
    )


@st.composite
def configs(draw: st.DrawFn) -> BidkvSelectorConfig:
    return BidkvSelectorConfig(
        enable_utility_victim_selection=draw(st.sampled_from([True, True, True, False])),
        utility_strategy=draw(st.sampled_from(KNOWN_STRATEGY_NAMES)),
        utility_kill_switch=draw(st.sampled_from([False, False, False, True])),
        utility_completion_weight=draw(st.sampled_from([0.0, 0.5, 3.0, 1e300])),
        utility_preempt_weight=draw(st.sampled_from([0.0, 0.3, 5.0, 1e300])),
        utility_kv_gate=draw(st.sampled_from([0.0, 0.0, 0.5, 1.0])),
        utility_cooldown_s=draw(st.sampled_from([0.0, 0.0, 1.0])),
        utility_min_running=draw(st.integers(min_value=1, max_value=4)),
        utility_liveness_preemptions=draw(st.integers(min_value=0, max_value=3)),
        utility_cascade_gain_ratio=draw(st.sampled_from([1.0, 1.25, 3.0])),
        utility_snapshot_enabled=draw(st.booleans()),
        utility_snapshot_top_k=draw(st.integers(min_value=1, max_value=5)),
        utility_epsilon=draw(st.sampled_from([1e-6, 1e-300, 1.0])),
        utility_default_max_tokens=draw(st.sampled_from([1, 1024, 2**62])),
        utility_seed=draw(st.integers(min_value=-5, max_value=5)),
        utility_liveness_mode=draw(st.sampled_from(["abstain", "barrier"])),
        utility_slo_s=draw(st.sampled_from([1e-9, 120.0, 1e300])),
    )


def host_config(config: BidkvSelectorConfig) -> SimpleNamespace:
    return SimpleNamespace(additional_config=config.to_additional_config())


# -- never raises, always a candidate -------------------------------------------------------


@SETTINGS
@given(config=configs(), steps=st.lists(contexts(), min_size=1, max_size=4))
def test_policy_returns_none_or_a_candidate(
    config: BidkvSelectorConfig, steps: list[PreemptionContext]
) -> None:
    policy = BidkvPreemptionPolicy(config)
    for ctx in steps:
        victim = policy.select_victim(ctx)
        if victim is None:
            # Only the bidkv guards abstain, and only in abstain mode.
            assert policy.strategy == "bidkv"
            assert config.utility_liveness_mode == "abstain"
        else:
            assert victim in {c.request_id for c in ctx.candidates}
    metrics = policy.export_metrics()
    assert metrics["total_preemptions"] == len(steps)
    assert metrics["policy_abstentions"] == (
        metrics["liveness_fallback_hits"] + metrics["cascade_guard_hits"]
        if config.utility_liveness_mode == "abstain"
        else 0
    )
    policy.get_recent_snapshots()


def breaks_the_contract(ctx: PreemptionContext) -> bool:
    """Written out from docs/contracts.md, "Malformed contexts", for what contexts() draws."""
    return ctx.kv_cache_usage is None or not all(
        math.isfinite(c.arrival_time) for c in ctx.candidates
    )


@SETTINGS
@given(config=configs(), steps=st.lists(contexts(max_size=64), min_size=1, max_size=6))
def test_controller_never_returns_a_non_candidate(
    config: BidkvSelectorConfig, steps: list[PreemptionContext]
) -> None:
    # The policy takes every well-formed context, extreme values included, without failing; a
    # context the contract forbids (a None KV usage, a NaN or infinite arrival) is a contract
    # failure that disables it, and still gets a candidate.
    controller = PreemptionPolicyController(BidkvPreemptionPolicy, host_config(config))
    first_bad = next((i for i, ctx in enumerate(steps) if breaks_the_contract(ctx)), None)
    for ctx in steps:
        assert controller.select_victim(ctx) in {c.request_id for c in ctx.candidates}
    stats = controller.export_stats()
    if first_bad is None:
        assert (stats["enabled"], stats["failures"], stats["invalid_selections"]) == (True, 0, 0)
        assert stats["calls"] == stats["selections"] + stats["abstentions"] == len(steps)
    else:
        assert (stats["enabled"], stats["failures"], stats["invalid_selections"]) == (False, 1, 0)
        assert stats["calls"] == first_bad + 1
        assert stats["selections"] + stats["abstentions"] == first_bad


def test_pick_victim_shim_returns_a_running_object_on_extreme_inputs() -> None:
    @SETTINGS
    @given(config=configs(), ctx=contexts(max_size=64))
    def check(config: BidkvSelectorConfig, ctx: PreemptionContext) -> None:
        policy = BidkvPreemptionPolicy(config)
        running = list(ctx.candidates)
        victim = policy.pick_victim(
            running, ctx.scheduling_policy.upper(), kv_utilization=ctx.kv_cache_usage, now_s=ctx.now
        )
        assert any(victim is c for c in running)

    check()


# -- broken policies (docs/contracts.md, "The controller and its counters") -----------------


class Broken:
    """BidKV for ``good_calls`` calls, then one kind of misbehaviour forever."""

    def __init__(self, mode: str, good_calls: int) -> None:
        self.inner = BidkvPreemptionPolicy(
            BidkvSelectorConfig(enable_utility_victim_selection=True)
        )
        self.mode = mode
        self.good_calls = good_calls
        self.calls = 0

    def select_victim(self, ctx: PreemptionContext) -> Any:
        self.calls += 1
        if self.calls <= self.good_calls:
            return self.inner.select_victim(ctx)
        if self.mode == "raise":
            raise RuntimeError("broken policy")
        if self.mode == "junk":
            return "junk-id-not-a-candidate"
        if self.mode == "object":
            return ctx.candidates[0]  # a candidate object instead of its id
        return 7  # a non-string


@SETTINGS
@given(
    mode=st.sampled_from(["raise", "junk", "object", "int"]),
    good_calls=st.integers(min_value=0, max_value=3),
    steps=st.lists(contexts(max_size=16, finite=True), min_size=5, max_size=8),
)
def test_broken_policies_are_disabled_for_the_process(
    mode: str, good_calls: int, steps: list[PreemptionContext]
) -> None:
    broken = Broken(mode, good_calls)
    controller = PreemptionPolicyController(broken)
    for i, ctx in enumerate(steps):
        victim = controller.select_victim(ctx)
        if i >= good_calls:
            # From the failing call on, the built-in victim is applied.
            assert victim == builtin_victim_id(ctx)
    stats = controller.export_stats()
    assert broken.calls == good_calls + 1  # never called again once disabled
    assert stats["calls"] == good_calls + 1
    assert stats["enabled"] is False
    assert stats["failures"] == 1
    assert stats["invalid_selections"] == (0 if mode == "raise" else 1)
    assert stats["selections"] + stats["abstentions"] == good_calls
    assert controller.policy is None


# -- one pass == full sort ----------------------------------------------------------------

SMALL_INT = st.integers(min_value=-1, max_value=4)


@st.composite
def tie_prone(draw: st.DrawFn) -> tuple[PreemptionCandidate, ...]:
    # Tiny value ranges and a three-letter id alphabet make equal utilities, equal arrivals and
    # duplicated ids common.
    rows = draw(
        st.lists(
            st.builds(
                PreemptionCandidate,
                st.sampled_from(["a", "b", "c"]),
                SMALL_INT,
                st.sampled_from([0.0, 1.0, 2.0]),
                SMALL_INT,
                SMALL_INT,
                SMALL_INT,
                st.integers(min_value=-1, max_value=3),
                st.sampled_from([-1, 0, 1, 2, 4]),
            ),
            min_size=1,
            max_size=12,
        )
    )
    return tuple(rows)


def reference_ranking(cands: Any, wc: float, wp: float, eps: float, dmax: int) -> list[tuple]:
    """Straightforward ranking: score every candidate, then one stable sort on (-U, arrival, id)."""
    rows = []
    for c in cands:
        r = max(int(getattr(c, "num_computed_tokens", 0) or 0), 0)
        out = int(getattr(c, "num_output_tokens", 0) or 0)
        m = getattr(c, "max_tokens", None)
        if not isinstance(m, (int, float)) or m <= 0:
            m = dmax
        comp = min(max(float(out) / float(m), 0.0), 1.0)
        p = max(int(getattr(c, "num_preemptions", 0) or 0), 0)
        u = float(r) / max(1.0 + wc * comp + wp * float(p) + eps, eps)
        rid = str(getattr(c, "request_id", ""))
        a = float(getattr(c, "arrival_time", 0.0) or 0.0)
        rows.append((rid, u, r, comp, p, a, c))
    return sorted(rows, key=lambda t: (-t[1], t[5], t[0]))


def check_scan(cands: Any, wc: float, wp: float, eps: float, dmax: int, requester: str) -> None:
    ranking = reference_ranking(cands, wc, wp, eps, dmax)
    top = ranking[0]
    last_same_id = [c for c in cands if str(getattr(c, "request_id", "")) == top[0]][-1]
    rq = next((t for t in ranking if t[0] == requester), None)
    got = scan_top(cands, wc, wp, eps, dmax, requester)
    assert got[0] is top[6]
    assert got[1] is last_same_id
    assert got[2:7] == top[:5]
    assert got[7] == (rq is not None)
    if rq is not None:
        assert got[8] == rq[2]
    assert [s.request_id for s in rank_candidates(cands, wc, wp, eps, dmax)] == [
        t[0] for t in ranking
    ]
    assert [s.utility for s in rank_candidates(cands, wc, wp, eps, dmax)] == [t[1] for t in ranking]


WEIGHTS = st.sampled_from([0.0, 0.5, 1.0, 0.3, 2.0])


@settings(max_examples=400, deadline=None)
@given(
    cands=tie_prone(),
    wc=WEIGHTS,
    wp=WEIGHTS,
    eps=st.sampled_from([1e-6, 1.0]),
    dmax=st.sampled_from([1, 2, 1024]),
    requester=st.sampled_from(["a", "b", "c", ""]),
)
def test_one_pass_equals_full_sort(
    cands: tuple[PreemptionCandidate, ...],
    wc: float,
    wp: float,
    eps: float,
    dmax: int,
    requester: str,
) -> None:
    check_scan(cands, wc, wp, eps, dmax, requester)


FIELD_VALUES = st.one_of(
    st.none(), st.booleans(), SMALL_INT, st.sampled_from([0.5, 1.7, 2.0, -0.5])
)


@st.composite
def duck_candidates(draw: st.DrawFn) -> list[SimpleNamespace]:
    # Objects with missing attributes, None, floats and bools exercise the getattr path.
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=10))):
        fields = {"request_id": draw(st.sampled_from(["a", "b", 3, None]))}
        for name in (
            "num_computed_tokens",
            "num_output_tokens",
            "max_tokens",
            "num_preemptions",
            "arrival_time",
        ):
            if draw(st.booleans()):
                fields[name] = draw(FIELD_VALUES)
        out.append(SimpleNamespace(**fields))
    return out


@settings(max_examples=300, deadline=None)
@given(cands=duck_candidates(), wc=WEIGHTS, requester=st.sampled_from(["a", "3", "None", ""]))
def test_one_pass_equals_full_sort_on_duck_typed_candidates(
    cands: list[SimpleNamespace], wc: float, requester: str
) -> None:
    check_scan(cands, wc, 0.3, 1e-6, 1024, requester)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(tie_prone(), min_size=1, max_size=10),
    requesters=st.lists(st.sampled_from(["a", "b", "c", ""]), min_size=10, max_size=10),
    mode=st.sampled_from(["abstain", "barrier"]),
)
def test_snapshots_do_not_change_decisions(
    steps: list[tuple[PreemptionCandidate, ...]], requesters: list[str], mode: str
) -> None:
    # Snapshot mode sorts full records; the decisions must be the same as without it, and the
    # snapshot's first record must be the decision's utility winner.
    plain = BidkvPreemptionPolicy(
        BidkvSelectorConfig(enable_utility_victim_selection=True, utility_liveness_mode=mode)
    )
    snap = BidkvPreemptionPolicy(
        BidkvSelectorConfig(
            enable_utility_victim_selection=True,
            utility_liveness_mode=mode,
            utility_snapshot_enabled=True,
            utility_snapshot_top_k=12,
        )
    )
    for cands, requester in zip(steps, requesters, strict=False):
        ctx = PreemptionContext(cands, "fcfs", requester, 1.0, 0.0)
        assert plain.select_victim(ctx) == snap.select_victim(ctx)
        top = reference_ranking(cands, 0.5, 0.3, 1e-6, 1024)
        assert snap.get_recent_snapshots(1)[0]["candidates"][0]["request_id"] == top[0][0]
    assert plain.export_metrics() == snap.export_metrics()


# -- bounded state --------------------------------------------------------------------------


class Bounded(BidkvPreemptionPolicy):
    state_table_limit = 4


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=11),  # id number
                st.integers(min_value=0, max_value=5),  # num_computed_tokens
                st.integers(min_value=0, max_value=4),
            ),  # num_preemptions
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=40,
    ),
    liveness=st.integers(min_value=1, max_value=2),
    mode=st.sampled_from(["abstain", "barrier"]),
)
def test_state_bound_holds_and_changes_nothing_below_it(
    steps: list[list[tuple[int, int, int]]], liveness: int, mode: str
) -> None:
    cfg = BidkvSelectorConfig(
        enable_utility_victim_selection=True,
        utility_liveness_preemptions=liveness,
        utility_liveness_mode=mode,
    )
    bounded = Bounded(cfg)
    unbounded = BidkvPreemptionPolicy(cfg)
    below_bound = True
    for rows in steps:
        cands = tuple(
            PreemptionCandidate(f"r{i}", 0, float(i), 0, 0, r, p, 1024) for i, r, p in rows
        )
        ctx = PreemptionContext(cands, "fcfs", cands[0].request_id, 1.0, 0.0)
        got, expected = bounded.select_victim(ctx), unbounded.select_victim(ctx)
        assert len(bounded.liveness_offsets) <= Bounded.state_table_limit
        assert len(bounded.preemptions_per_request) <= Bounded.state_table_limit
        if below_bound:  # nothing was forgotten before this call
            assert got == expected
        below_bound = below_bound and (
            len(unbounded.liveness_offsets) <= Bounded.state_table_limit
            and len(unbounded.preemptions_per_request) <= Bounded.state_table_limit
        )
        if below_bound:  # nor during it
            assert bounded.liveness_offsets == unbounded.liveness_offsets
            assert bounded.export_metrics() == unbounded.export_metrics()


def test_least_recently_touched_offset_is_forgotten() -> None:
    class Two(BidkvPreemptionPolicy):
        state_table_limit = 2

    cfg = BidkvSelectorConfig(enable_utility_victim_selection=True, utility_liveness_preemptions=1)
    small, large = Two(cfg), BidkvPreemptionPolicy(cfg)

    def step(top: str, p: int) -> tuple[str | None, str | None]:
        ctx = PreemptionContext(
            (
                PreemptionCandidate(top, 0, 0.0, 0, 0, 100, p, 1024),
                PreemptionCandidate("f", 0, 0.0, 0, 0, 1, 0, 1024),
            ),
            "fcfs",
            "",
            1.0,
            0.0,
        )
        return small.select_victim(ctx), large.select_victim(ctx)

    assert step("a", 1) == (None, None)  # offsets {a}
    assert step("b", 1) == (None, None)  # offsets {a, b}
    assert step("a", 1) == ("a", "a")  # reading a's offset touches it: b is now the oldest
    assert step("c", 1) == (None, None)  # bound reached: b is forgotten
    assert small.liveness_offsets == {"a": 1, "c": 1}
    # The forgotten offset counts from 0 again: only now do the two policies differ.
    assert step("b", 1) == (None, "b")
    assert len(small.preemptions_per_request) == 2
    assert math.isclose(small.export_metrics()["total_preemptions"], 5)
