"""The engine/latency boundary: ``tracekit.latency`` imports the engine, never the reverse.

The engine (standard library only) sees a step-time model through the protocols it defines in
``tracekit.engine.step_time``; ``tracekit.latency`` implements them and installs its spelling
resolver when imported (docs/latency.md, "The step-time boundary"). Two independent checks, in
the manner of ``tests/test_import_isolation.py``: a static scan of every engine module for any
import of ``tracekit.latency`` (inside functions and through ``import_module`` too), and the
engine run in a subprocess whose import system refuses ``tracekit.latency`` and every
third-party module, with each way it gets a step-time model: its own roofline, a model handed
in, an installed source.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from import_helpers import imported_modules

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "tracekit" / "engine"
LATENCY = ["tracekit", "latency"]

GUARDED_SCRIPT = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    class RefuseLatencyAndThirdParty:
        def find_spec(self, name, path=None, target=None):
            if name == "tracekit.latency" or name.startswith("tracekit.latency."):
                raise ImportError(f"the engine imported {name}")
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ("tracekit", "bidkv") or top[0] == "_":
                return None
            raise ImportError(f"the engine imported a non-stdlib module: {name}")

    sys.meta_path.insert(0, RefuseLatencyAndThirdParty())
    sys.path.insert(0, sys.argv[1])
    import tracekit.engine

    names = [m.name for m in pkgutil.walk_packages(tracekit.engine.__path__, "tracekit.engine.")]
    for name in names:
        importlib.import_module(name)

    from tracekit.engine import BuiltinHost, EngineConfig, EngineRequest, run_engine
    from tracekit.engine import engine as engine_module
    from tracekit.engine.clock import StepModelClock, make_clock
    from tracekit.engine.step_time import StepShape, install_step_time_source
    from tracekit.errors import ConfigError

    requests = [EngineRequest(f"r{i}", 0.01 * i, 40 + 9 * i, 3 + i, 6) for i in range(6)]
    settings = dict(num_blocks=64, block_size=16, max_num_batched_tokens=64, max_model_len=1000)

    # The engine's own roofline, named or not, needs no source.
    for latency in (None, "roofline", "roofline:a100-llama2-7b"):
        run_engine(requests, EngineConfig(latency=latency, **settings), BuiltinHost())

    class Fixed:
        name = "fixed"
        def __init__(self):
            self.shapes = []
        def step_time_s(self, shape):
            assert isinstance(shape, StepShape)
            self.shapes.append(shape)
            return 0.01
        def describe(self):
            return {"kind": "fixed", "name": self.name}

    def timed(run):
        # Steps the model timed (a step with nothing scheduled lasts the idle overhead).
        return sum(s.duration_s == 0.01 for s in run.steps)

    # Without a source, another spelling is refused in one line that names the fix.
    try:
        EngineConfig(latency="calibrated:model.json", **settings)
    except ValueError as exc:
        assert "import tracekit.latency" in str(exc) and "\\n" not in str(exc), exc
    else:
        raise AssertionError("a spelling no source resolves was accepted")

    # A model handed in.
    handed = Fixed()
    assert isinstance(make_clock(EngineConfig(**settings), model=handed), StepModelClock)
    original = engine_module.make_clock
    engine_module.make_clock = lambda cfg, states: original(cfg, states, model=handed)
    run = run_engine(requests, EngineConfig(**settings), BuiltinHost())
    engine_module.make_clock = original
    assert handed.shapes and timed(run) == len(handed.shapes)

    # An installed source: the spelling is checked where the configuration is made and built
    # once the run starts.
    class Source:
        def __init__(self):
            self.checked, self.built = [], []
            self.fixed = Fixed()
        def check(self, spelling):
            self.checked.append(spelling)
            if spelling != "fixed:1":
                raise ConfigError(f"--latency {spelling!r}: unknown")
        def model(self, spelling):
            self.built.append(spelling)
            return self.fixed

    source = Source()
    install_step_time_source(source)
    config = EngineConfig(latency="fixed:1", **settings)
    run = run_engine(requests, config, BuiltinHost())
    assert source.checked == ["fixed:1"] and source.built == ["fixed:1"], vars(source)
    assert source.fixed.shapes and timed(run) == len(source.fixed.shapes)
    try:
        EngineConfig(latency="fixed:2", **settings)
    except ValueError as exc:
        assert "latency: 'fixed:2': unknown" in str(exc), exc
    else:
        raise AssertionError("the source's refusal did not reach the configuration")
    assert not [m for m in sys.modules if m.startswith("tracekit.latency")]
    print(len(names))
    """
)


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_engine_module_imports_tracekit_latency() -> None:
    offenders = {
        path.relative_to(ROOT).as_posix(): sorted(found)
        for path in sorted(ENGINE.rglob("*.py"))
        if (
            found := {
                m for m in imported_modules(path) if m.split(".")[:2] == ["tracekit", "latency"]
            }
        )
    }
    assert offenders == {}


def test_the_scan_sees_a_lazy_import_inside_a_function(tmp_path: Path) -> None:
    # The cycle this file guards against was a lazy import in make_clock; the scan must see one.
    source = tmp_path / "clock.py"
    source.write_text("def make_clock():\n    from tracekit.latency.spec import cached\n")
    assert "tracekit.latency.spec" in imported_modules(source)


def test_the_engine_runs_every_kind_of_step_time_model_without_tracekit_latency() -> None:
    result = _run(GUARDED_SCRIPT)
    assert result.returncode == 0, result.stderr
    # The walk must have found the engine's modules, or the check proves nothing.
    assert int(result.stdout.strip()) >= 15


def test_the_guard_refuses_tracekit_latency() -> None:
    # The same guard must fail on the import the engine may not make, or the test above cannot.
    script = GUARDED_SCRIPT.split("names = [")[0] + "import tracekit.latency.spec\n"
    result = _run(script)
    assert result.returncode != 0
    assert "the engine imported tracekit.latency" in result.stderr


def test_importing_tracekit_latency_installs_its_source() -> None:
    from tracekit.engine.step_time import installed_step_time_source
    from tracekit.latency.spec import SOURCE

    assert installed_step_time_source() is SOURCE
