"""The AISimulate backend (``--latency aisimulate:``) and what it shares with AIConfigurator.

The grid itself is tested once, through the AIConfigurator backend with stand-in estimators
(``tests/test_latency_aiconfigurator.py``); both backends are the same ``TabulatedModel``. Here,
on AISimulate 0.13's real tables (where the ``aisimulate`` extra is installed), facts checked
independently of the backend:

- a step's GEMMs are the rows of AISimulate's own GEMM table, read directly with polars, times
  the layer count of the model's shipped configuration, and the step is the sum of the package's
  own per-operator breakdown;
- twice the work never takes less time (prefill tokens, prefixes, decoding sequences,
  contexts, each doubled from where kernels stop dominating);
- on a table version both packages ship, aiconfigurator-core 0.12 and AISimulate 0.13 give the
  same step times, in one process and in either order of first use; a version only AISimulate
  ships builds after an AIConfigurator model and times as it does in a fresh process;
- the listing names exactly what the installed package's folders hold.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import random
import subprocess
import sys
from importlib import resources
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.errors import ConfigError
from tracekit.latency.aisimulate import AISIMULATE, MISSING_MESSAGE, AISimulateModel
from tracekit.latency.interface import StepShape
from tracekit.latency.perf_tables import TabulatedModel
from tracekit.latency.spec import check_latency_spec, make_step_time_model

HAVE_AISIM = importlib.util.find_spec("aisimulate_core") is not None
HAVE_AIC = importlib.util.find_spec("aiconfigurator_core") is not None
needs_aisim = pytest.mark.skipif(
    not HAVE_AISIM,
    reason='AISimulate is not installed (pip install ".[aisimulate]", Python 3.11 to 3.13)',
)
needs_both = pytest.mark.skipif(
    not (HAVE_AISIM and HAVE_AIC),
    reason='needs AISimulate and aiconfigurator-core (pip install ".[aisimulate,aiconfigurator]")',
)
LLAMA = "meta-llama/Meta-Llama-3.1-8B"


def _shapes(seed: int, n: int) -> list[StepShape]:
    rng = random.Random(seed)
    shapes = []
    for _ in range(n):
        chunks = [(rng.randint(1, 3000), rng.choice([0, rng.randint(0, 6000)]))]
        decode = [rng.randint(1, 9000) for _ in range(rng.randint(0, 40))]
        shapes.append(StepShape.of(chunks * rng.randint(0, 2), decode or [100]))
    return shapes


def test_the_backend_is_the_shared_tabulated_model_under_its_own_name() -> None:
    model = AISimulateModel("sys", "org/m", version="1", estimator=lambda f: 2.0)
    assert isinstance(model, TabulatedModel)
    assert model.name == "aisimulate:sys/org/m@vllm"
    assert model.step_time_s(StepShape.of(decode=[5])) == pytest.approx(0.002)
    described = model.describe()
    assert described["kind"] == "aisimulate" and described["package"]["name"] == "aisimulate"
    assert "op_level" in described["estimator"] and "no correction" in described["estimator"]


def test_missing_package_is_a_one_line_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aisimulate_core", None)
    with pytest.raises(ConfigError) as info:
        AISIMULATE.load_estimator("h100_sxm", LLAMA)
    message = str(info.value)
    assert message == MISSING_MESSAGE and "\n" not in message
    assert 'pip install ".[aisimulate]"' in message and "Python 3.11 to 3.13" in message
    # Where a configuration is made (cheap: nothing is imported) and by the listing command.
    with pytest.raises(ConfigError, match=r"needs the aisimulate package"):
        check_latency_spec(f"aisimulate:h100_sxm/{LLAMA}")
    result = CliRunner().invoke(cli, ["latency", "tables", "aisimulate"])
    assert result.exit_code == 2 and "needs the aisimulate package" in result.output


@needs_aisim
def test_a_prefill_step_is_its_operators_and_its_gemms_are_the_table_rows() -> None:
    config = json.loads(
        (
            resources.files("aisimulate_core") / "model_configs" / f"{LLAMA.replace('/', '--')}"
            "_config.json"
        ).read_text()
    )
    layers, hidden = config["num_hidden_layers"], config["hidden_size"]
    head_dim = hidden // config["num_attention_heads"]
    qkv_n = (config["num_attention_heads"] + 2 * config["num_key_value_heads"]) * head_dim
    table = pl.read_parquet(
        str(
            resources.files("aisimulate_core")
            / "systems/data/h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
        )
    ).filter(pl.col("gemm_dtype") == "bfloat16")

    def row_ms(m: int, n: int, k: int) -> float:
        rows = table.filter((pl.col("m") == m) & (pl.col("n") == n) & (pl.col("k") == k))
        assert rows.height == 1, (m, n, k)
        return rows["latency"][0]

    native, version = AISIMULATE.load_native("h100_sxm", LLAMA, "vllm", "0.24.0")
    assert version == "0.24.0"
    model = AISimulateModel("h100_sxm", LLAMA, "vllm", "0.24.0")
    for tokens in (1024, 2048, 4096):  # measured GEMM rows (m = tokens)
        ops = {
            o["name"]: o["latency_ms"]
            for o in native.static_phase_diagnostics(
                batch_size=1, context_length=tokens, prefill=True
            )
        }
        step_ms = 1000 * model.step_time_s(StepShape.of([(tokens, 0)]))
        assert step_ms == pytest.approx(sum(ops.values()), rel=1e-12)
        assert ops["context_qkv_gemm"] == pytest.approx(
            layers * row_ms(tokens, qkv_n, hidden), rel=1e-9
        )
        assert ops["context_proj_gemm"] == pytest.approx(
            layers * row_ms(tokens, hidden, hidden), rel=1e-9
        )
        # The two GEMMs read from the table are a real share of the step, not a rounding.
        assert 0.1 < (ops["context_qkv_gemm"] + ops["context_proj_gemm"]) / step_ms < 0.5


@needs_aisim
@pytest.mark.parametrize("system", ["h100_sxm", "l40s", "a100_sxm", "b200_sxm"])
def test_twice_the_work_takes_longer(system: str) -> None:
    model = AISimulateModel(system, LLAMA, tabulate=False)

    def t(prefill: tuple[tuple[int, int], ...] = (), decode: tuple[int, ...] = ()) -> float:
        return model.step_time_s(StepShape.of(prefill, decode))

    # From 64 tokens, 16 sequences and 512 tokens of context on: below that fixed costs and
    # kernel choice make neighbouring sizes cross (a measured table is not monotone there).
    for n in (2**k for k in range(6, 14)):
        assert t(((2 * n, 0),)) > t(((n, 0),)), ("prefill tokens", n)
        assert t(((512, 2 * n),)) > t(((512, n),)), ("prefix", n)
        assert t(decode=(8 * 2 * n,) * 32) > t(decode=(8 * n,) * 32), ("context", n)
    for d in (16, 32, 64, 128, 256, 512, 1024):
        assert t(decode=(1000,) * 2 * d) > t(decode=(1000,) * d), ("sequences", d)


@needs_aisim
def test_an_8b_model_on_an_h100_takes_what_the_datasheet_allows() -> None:
    model = AISimulateModel("h100_sxm", LLAMA, tabulate=False)
    # One decoding sequence reads the 16 GB of bf16 weights: at 3.35 TB/s at least 4.8 ms;
    # a 2,048-token prefill is 2 x 8e9 x 2048 = 33 TFLOP: at 989 TFLOPS at least 33 ms.
    assert 0.0048 < model.step_time_s(StepShape.of(decode=[100])) < 0.02
    assert 0.033 < model.step_time_s(StepShape.of([(2048, 0)])) < 0.1


@needs_aisim
def test_unknown_names_and_versions_are_refused_with_the_closest_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"^--latency aisimulate: unknown system 'h100'.*h100_sxm"
    ):
        AISIMULATE.load_estimator("h100", LLAMA)
    with pytest.raises(ConfigError, match=r"unknown model.*did you mean.*Meta-Llama-3.1-8B"):
        AISIMULATE.load_estimator("h100_sxm", "meta-llama/Llama-3.1-8B")
    with pytest.raises(ConfigError, match=r"no vllm 9\.9 tables for h100_sxm"):
        AISIMULATE.load_estimator("h100_sxm", LLAMA, version="9.9")
    with pytest.raises(ConfigError, match=r"h100_sxm has no previous vllm tables"):
        AISIMULATE.load_estimator("h100_sxm", LLAMA, version="previous")
    # A model whose configuration ships but whose attention the h100 tables lack (a 2,048-token
    # sliding window): refused where the model is built, not at its first step.
    with pytest.raises(ConfigError, match=r"cannot be timed by aisimulate: .*attention data"):
        AISimulateModel("h100_sxm", "meta-models/Muse-Glimmer-30B")


@needs_aisim
def test_version_aliases_name_the_slots_the_listing_shows() -> None:
    slots = AISIMULATE.version_slots("h100_sxm", "vllm")
    assert set(slots) >= {"current", "next"} and slots["next"] != slots["current"]
    model = make_step_time_model(f"aisimulate:h100_sxm/{LLAMA}@vllm:next")
    assert model.describe()["backend_version"] == slots["next"]
    default = make_step_time_model(f"aisimulate:h100_sxm/{LLAMA}")
    assert default.describe()["backend_version"] == slots["current"]
    assert default.describe()["package"]["version"] == importlib.metadata.version("aisimulate")


# The same step through both packages: a script run in a fresh process, so that the order of
# first use (the packages share two environment variables, see perf_tables) is under test.
COMPARE = """
import json, sys
from tracekit.latency.aiconfigurator import AIConfiguratorModel
from tracekit.latency.aisimulate import AISimulateModel
from tracekit.latency.interface import StepShape
classes = {"aiconfigurator": AIConfiguratorModel, "aisimulate": AISimulateModel}
shapes = [StepShape.of(p, d) for p, d in json.loads(sys.argv[2])]
models = []
for item in sys.argv[1].split(","):
    kind, system, version = item.split(":")
    models.append((item, classes[kind](system, "meta-llama/Meta-Llama-3.1-8B", "vllm", version,
                                       tabulate=False)))
print(json.dumps({item: [m.step_time_s(s) for s in shapes] for item, m in models}))
"""


def _times(models: str, shapes: list[StepShape]) -> dict[str, list[float]]:
    payload = json.dumps(
        [([(c.num_tokens, c.num_computed_tokens) for c in s.prefill_chunks],
          list(s.decode_contexts)) for s in shapes]
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", COMPARE, models, payload],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@needs_both
@pytest.mark.slow
def test_both_packages_give_the_same_step_times_on_the_tables_both_ship() -> None:
    shapes = _shapes(3, 60)
    # AIConfigurator first, then AISimulate; then the reverse order.
    first = _times("aiconfigurator:h100_sxm:0.24.0,aisimulate:h100_sxm:0.24.0,"
                   "aiconfigurator:l40s:0.24.0,aisimulate:l40s:0.24.0", shapes)  # fmt: skip
    again = _times("aisimulate:h100_sxm:0.24.0,aiconfigurator:h100_sxm:0.24.0", shapes)
    for system in ("h100_sxm", "l40s"):
        assert first[f"aisimulate:{system}:0.24.0"] == pytest.approx(
            first[f"aiconfigurator:{system}:0.24.0"], rel=1e-12
        )
    assert again == {k: first[k] for k in again}


@needs_both
@pytest.mark.slow
def test_a_version_only_aisimulate_ships_is_its_own_after_aiconfigurator_was_used() -> None:
    # Both packages find their tables through two process-wide environment variables that each
    # sets on first use; without the backends pinning their own folders, AISimulate built after
    # an AIConfigurator model compiled against aiconfigurator-core's tables, which lack vllm
    # 0.31.0 (refused).
    shapes = _shapes(4, 40)
    # The first model of a fresh process, then (same process) the older tables' model.
    first = _times("aisimulate:h100_sxm:0.31.0,aisimulate:h100_sxm:0.24.0", shapes)
    alone = first["aisimulate:h100_sxm:0.31.0"]
    after = _times("aiconfigurator:h100_sxm:0.27.0,aisimulate:h100_sxm:0.31.0", shapes)
    assert after["aisimulate:h100_sxm:0.31.0"] == alone
    reverse = _times("aisimulate:h100_sxm:0.31.0,aiconfigurator:h100_sxm:0.27.0", shapes)
    assert reverse["aiconfigurator:h100_sxm:0.27.0"] == after["aiconfigurator:h100_sxm:0.27.0"]
    # And the newer tables are not the older ones under another name.
    assert alone != first["aisimulate:h100_sxm:0.24.0"]


@needs_aisim
def test_the_listing_names_what_the_package_folders_hold() -> None:
    result = CliRunner().invoke(cli, ["latency", "tables", "aisimulate", "--json"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.output)
    assert listing["package"] == {
        "name": "aisimulate",
        "version": importlib.metadata.version("aisimulate"),
    }
    root = Path(str(resources.files("aisimulate_core")))
    shipped = sorted(
        p.name.removesuffix("_config.json").replace("--", "/", 1)
        for p in (root / "model_configs").glob("*_config.json")
        if not p.name.endswith("_hf_quant_config.json")
    )
    assert listing["models"] == shipped and LLAMA in shipped
    # The systems are the data folders that hold tables (a30, l4, a100_pcie and h100_pcie
    # ship a description and an empty folder).
    with_tables = {p.name for p in (root / "systems/data").iterdir() if any(p.rglob("*.parquet"))}
    assert set(listing["systems"]) == with_tables and "l4" not in with_tables
    for system, entry in listing["systems"].items():
        for backend, tables in entry["backends"].items():
            current = tables["slots"]["current"]
            assert current in tables["versions"]
            # The default version has measured tables of its own; a "next" version may hold
            # only what was measured again (the rest is filled from older versions).
            assert list(root.glob(f"systems/data/{system}/*/{backend}/{current}/*.parquet"))
    assert listing["systems"]["h100_sxm"]["gpu"]["bandwidth_gb_s"] == pytest.approx(3350)
    text = CliRunner().invoke(cli, ["latency", "tables", "aisimulate"])
    assert text.exit_code == 0
    assert any(
        line.startswith("h100_sxm") and "(current)" in line for line in text.output.splitlines()
    )


@needs_aisim
def test_record_sim_with_aisimulate_names_the_model_in_the_manifest(tmp_path: Path) -> None:
    from sweep_helpers import SAMPLE

    spelling = f"aisimulate:l40s/{LLAMA}"
    out = tmp_path / "b"
    result = CliRunner().invoke(
        cli,
        ["record", "sim", "--workload", str(SAMPLE), "--limit", "30", "--num-blocks", "300",
         "--max-model-len", "4608", "--latency", spelling, "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    latency = json.loads((out / "manifest.json").read_text())["latency"]
    assert latency["spec"] == spelling and latency["kind"] == "aisimulate"
    assert latency["backend_version"] == AISIMULATE.version_slots("l40s", "vllm")["current"]
    assert latency["package"]["version"] == importlib.metadata.version("aisimulate")
