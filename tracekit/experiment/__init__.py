"""Re-running the original BidKV experiments on the embedded engine, without a GPU.

- :mod:`~tracekit.experiment.traces`: the original ``freeze_traces`` generator and its verify
  mode, over any workload's lengths;
- :mod:`~tracekit.experiment.record`: one run of the legacy experiment path (the adapter's
  scheduler hooks, :mod:`tracekit.experiment.hooks`) recorded as a trace bundle;
- :mod:`~tracekit.experiment.matrix`: the published matrix, 5 strategies x 3 rates x 3 runs,
  recorded by the sweep's executor;
- :mod:`~tracekit.experiment.summary`: the original runner's summary figures with 95% CIs;
- :mod:`~tracekit.experiment.paper`: the paper's Table 1/2 beside ours and its claims checked.

See ``docs/experiments.md``.
"""

from tracekit.experiment.hooks import (
    LEGACY_STRATEGIES,
    ExperimentHooks,
    HookSettings,
)
from tracekit.experiment.matrix import (
    PAPER_RATES,
    MatrixCell,
    MatrixResult,
    MatrixSpec,
    matrix_cells,
    matrix_plan,
    run_matrix,
    summarize_matrix,
)
from tracekit.experiment.paper import (
    CAVEAT,
    CLAIMS,
    Claim,
    claims_frame,
    comparison_frame,
    paper_frame,
    render_html,
    render_markdown,
)
from tracekit.experiment.record import ExperimentRun, make_experiment_run_id, record_experiment
from tracekit.experiment.summary import (
    METRICS,
    SloSpec,
    aggregate_runs,
    ci95,
    original_percentile,
    run_metrics,
)
from tracekit.experiment.traces import (
    DEFAULT_POOL_MAX_PROMPT_TOKENS,
    DEFAULT_POOL_OPTIONS,
    DEFAULT_POOL_PATH,
    LengthPool,
    TraceSet,
    VerifyReport,
    freeze_traces,
    generate_trace,
    load_default_pool,
    load_length_pool,
    verify_traces,
)

__all__ = [
    "CAVEAT",
    "CLAIMS",
    "DEFAULT_POOL_MAX_PROMPT_TOKENS",
    "DEFAULT_POOL_OPTIONS",
    "DEFAULT_POOL_PATH",
    "LEGACY_STRATEGIES",
    "METRICS",
    "PAPER_RATES",
    "Claim",
    "ExperimentHooks",
    "ExperimentRun",
    "HookSettings",
    "LengthPool",
    "MatrixCell",
    "MatrixResult",
    "MatrixSpec",
    "SloSpec",
    "TraceSet",
    "VerifyReport",
    "aggregate_runs",
    "ci95",
    "claims_frame",
    "comparison_frame",
    "freeze_traces",
    "generate_trace",
    "load_default_pool",
    "load_length_pool",
    "make_experiment_run_id",
    "matrix_cells",
    "matrix_plan",
    "original_percentile",
    "paper_frame",
    "record_experiment",
    "render_html",
    "render_markdown",
    "run_matrix",
    "run_metrics",
    "summarize_matrix",
    "verify_traces",
]
