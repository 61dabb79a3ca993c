"""``tracekit capacity``: the saturation point of a workload on an engine configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tracekit.cli.common import CONTEXT_SETTINGS, library_errors, out_option, overwrite_option
from tracekit.cli.options import (
    capacity_search_options,
    engine_options,
    load_options,
    load_settings,
    oversize_option,
    run_inputs,
    slo_options,
    warn_rejections,
    workload_options,
)
from tracekit.cli.output import emit, output_options
from tracekit.cli.params import SEED

if TYPE_CHECKING:
    from tracekit.capacity.search import Probe


@click.command(context_settings=CONTEXT_SETTINGS)
@workload_options
@oversize_option
@load_options
@engine_options
@slo_options
@capacity_search_options(
    "",
    target_help="SLO attainment the built-in policy must reach.",
    tolerance_help="Stop when the meeting and missing rates are this close (relative).",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of generated arrivals.")
@out_option(
    folder=False,
    default=None,
    help="Also write the result (the --json document, with its format) to this JSON file.",
)
@overwrite_option("a file capacity wrote")
@output_options("knee, the rate above it and every probe")
def capacity(**options: Any) -> None:
    """Find the largest request rate at which the built-in policy meets the SLO target.

    Bisects on the request rate (recorded arrivals are rescaled, generated ones regenerated)
    and prints the knee and the throughput achieved there (docs/qualify.md, "Capacity").
    """
    from tracekit.analysis.serving import SloTargets
    from tracekit.capacity.result_file import check_capacity_file, write_capacity
    from tracekit.capacity.search import find_capacity
    from tracekit.workloads.load_spec import apply_load

    out, inputs = options["out"], [options["workload_path"]]
    with library_errors():
        if out is not None:  # refused before the search, which takes seconds to minutes
            check_capacity_file(out, overwrite=options["overwrite"], inputs=inputs)
        config, workload = run_inputs(options)
        spec = load_settings(options, searched=True)
        warn_rejections(apply_load(workload, spec, seed=options["seed"]), config)

        def show(probe: Probe) -> None:
            click.echo(
                f"capacity: {probe.rate:.4g} req/s -> SLO attainment {probe.slo_attainment:.1%}",
                err=True,
            )

        result = find_capacity(
            workload, config, spec=spec,
            slo=SloTargets(options["slo_ttft_s"], options["slo_tpot_s"]),
            target=options["target"], tolerance=options["tolerance"], seed=options["seed"],
            progress=show,
        )  # fmt: skip
        if out is not None:
            write_capacity(result, out, overwrite=options["overwrite"], inputs=inputs)
    emit(options["as_json"], result.to_dict, result.render)
