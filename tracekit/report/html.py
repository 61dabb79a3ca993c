"""``render_page``: one self-contained HTML file that works offline.

The page holds everything it needs: the Vega, Vega-Lite and Vega-Embed libraries (the bundle
that ``vl_convert`` ships, inlined in one ``<script>``), the style sheet, and each chart's
Vega-Lite spec with its data (a ``<script type="application/json">`` element, see
:func:`tracekit.report.markup.script_json`). Opening it makes no network request: no CDN, no
web font, no remote image. Charts render as SVG through ``vegaEmbed``.

The page is laid out from a finished :class:`~tracekit.report.inputs.ReportInputs`; reading the
results folder and computing the verdicts happen before, in :mod:`tracekit.qualify.reporting`.
Rendering is deterministic: the same inputs give a byte-identical page (nothing depends on the
clock or on dictionary order).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import altair as alt

from tracekit.report.inputs import ReportInputs
from tracekit.report.markup import esc, fmt_value, script_json
from tracekit.report.sections import Section, build_sections
from tracekit.report.verdict_section import headline_html, matrix_html
from tracekit.safe_output import write_files as write_files_safely

__all__ = [
    "REPORT_NAME",
    "javascript_bundle",
    "page_html",
    "prefetch_javascript_bundle",
    "render_page",
    "write_files",
]

# The page's file name in a results folder.
REPORT_NAME = "report.html"

_STYLE = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --ok: #1a7f37; --bad: #cf222e;
        --warn: #9a6700; --bg-soft: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff; line-height: 1.45;
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "Liberation Sans", "DejaVu Sans",
       sans-serif; }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line);
         background: var(--bg-soft); }
header h1 { margin: 0 0 6px; font-size: 22px; }
header dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0; }
header dt { color: var(--muted); }
header dd { margin: 0; overflow-wrap: anywhere; }
nav { position: sticky; top: 0; z-index: 5; background: #fff; border-bottom: 1px solid var(--line);
      padding: 6px 28px; font-size: 13px; display: flex; flex-wrap: wrap; gap: 2px 14px; }
nav a { color: #0969da; text-decoration: none; white-space: nowrap; }
main { padding: 0 28px 40px; max-width: 1280px; }
section { padding-top: 8px; border-bottom: 1px solid var(--line); padding-bottom: 18px; }
section h2 { font-size: 19px; margin: 18px 0 4px; }
section h3 { font-size: 15px; margin: 16px 0 6px; }
p.caption { color: var(--muted); margin: 2px 0 10px; max-width: 900px; }
p.note { color: var(--muted); font-style: italic; max-width: 900px; }
figure { margin: 8px 0 12px; }
.chart { min-height: 40px; }
.table-wrap { overflow-x: auto; margin: 6px 0 12px; }
table { border-collapse: collapse; font-size: 12.5px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid var(--line); padding: 3px 7px; vertical-align: top; text-align: left; }
th { background: var(--bg-soft); font-weight: 600; }
th { max-width: 120px; overflow-wrap: anywhere; }
table.candidates th { min-width: 4.5em; overflow-wrap: normal; }
/* Candidate values are short ids and numbers: keep each on one line; the wrap scrolls. */
table.candidates td { white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
td { overflow-wrap: anywhere; max-width: 520px; }
tr.fail td { color: var(--bad); }
tr.pass td:nth-child(2), tr.beneficial td:nth-child(3) { color: var(--ok); }
tr.cand td:nth-child(2) { font-weight: 600; }
tr.diff td, td.diff { background: #fff8c5; }
.badge { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px;
         font-weight: 600; border: 1px solid currentColor; vertical-align: middle; }
.badge.ok { color: var(--ok); } .badge.bad { color: var(--bad); }
.badge.warn { color: var(--warn); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(230px, 1fr)); gap: 10px; }
.card { border: 1px solid var(--line); border-left: 4px solid var(--ok); border-radius: 4px;
        padding: 8px 10px; }
.card.bad { border-left-color: var(--bad); }
.card-title { font-weight: 600; margin-bottom: 4px; }
.card-body { color: var(--muted); font-size: 12.5px; overflow-wrap: anywhere; }
ul.reasons { color: var(--bad); }
p.headline { font-size: 17px; margin: 0 0 10px; padding: 8px 12px; border-radius: 4px;
             border-left: 6px solid var(--bad); background: #ffebe9; max-width: 1100px; }
p.headline.ok { border-left-color: var(--ok); background: #dafbe1; }
p.headline.warn { border-left-color: var(--warn); background: #fff8c5; }
table.matrix td { white-space: nowrap; }
table.matrix th.cand { text-decoration: underline; }
td.lbl-beneficial { color: var(--ok); font-weight: 600; }
td.lbl-harmful { color: var(--bad); font-weight: 600; }
td.lbl-equivalent { color: #0969da; }
td.lbl-inconclusive, td.lbl-identical-to-built-in, td.lbl-overloaded { color: var(--muted); }
p.aa { padding: 4px 8px; border-left: 4px solid var(--ok); max-width: 1100px; }
p.aa.bad { border-left-color: var(--bad); color: var(--bad); font-weight: 600; }
tr.harmful td:nth-child(3) { color: var(--bad); }
.pair { display: flex; flex-wrap: wrap; gap: 16px; }
footer { color: var(--muted); font-size: 12px; padding: 12px 28px; }
"""

# Embeds every chart; counts finished and failed charts for tests and readers.
_INIT = """
(function () {
  var nodes = document.querySelectorAll("div.chart[data-spec]");
  var state = { total: nodes.length, done: 0, failed: 0 };
  window.__reportCharts = state;
  nodes.forEach(function (el) {
    var spec = JSON.parse(document.getElementById(el.getAttribute("data-spec")).textContent);
    vegaEmbed(el, spec, { renderer: "svg", actions: false })
      .then(function () { state.done += 1; })
      .catch(function (err) {
        state.failed += 1;
        el.textContent = "This chart could not be drawn: " + err.message;
        console.error(err);
      });
  });
})();
"""

_CONFIG = {
    "font": "Liberation Sans, DejaVu Sans, sans-serif",
    "axis": {"labelFontSize": 11, "titleFontSize": 12},
    "header": {"labelFontSize": 12, "titleFontSize": 12},
    "legend": {"labelFontSize": 11, "titleFontSize": 12, "labelLimit": 260},
    "view": {"stroke": "#d1d9e0"},
}


@functools.cache
def javascript_bundle() -> str:
    """Vega, Vega-Lite (the version Altair targets) and Vega-Embed as one script, offline.

    Returns
    -------
    str
        JavaScript that defines ``vegaEmbed``, ``vega`` and ``vegaLite`` on ``window``; safe
        to place inside a ``<script>`` element.
    """
    import vl_convert
    from altair.utils._importers import vl_version_for_vl_convert

    bundle: str = vl_convert.javascript_bundle(vl_version=vl_version_for_vl_convert())
    # A "</script" or "<!--" in the code would end or confuse the element: escape the slash.
    return bundle.replace("</script", "<\\/script").replace("<!--", "<\\!--")


_PREFETCH: list[threading.Thread] = []


def prefetch_javascript_bundle() -> None:
    """Start building :func:`javascript_bundle` in a background thread (once per process).

    The bundle takes seconds to build and is the same for every page; a job that renders a
    report at its end starts it first, so that it is ready (and cached) when the page is laid
    out. The page is the same either way.
    """
    if not _PREFETCH:
        thread = threading.Thread(target=javascript_bundle, name="vega-bundle", daemon=True)
        _PREFETCH.append(thread)
        thread.start()


def _spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    spec: dict[str, Any] = chart.to_dict()
    spec.pop("$schema", None)  # a URL; nothing fetches it, but the page holds no URL at all
    config = spec.setdefault("config", {})
    for key, value in _CONFIG.items():
        config.setdefault(key, value)
    return spec


def _settings_text(changed: dict[str, Any]) -> str:
    if not changed:
        return "defaults"
    shown = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in changed.items())
    return f"{shown} (others default)"


# The engine settings the header shows, in this order.
_ENGINE_KEYS = (
    "mode", "num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
    "max_model_len", "scheduling_policy", "clock",
)  # fmt: skip


def _engine_text(engine: dict[str, Any]) -> str:
    return ", ".join(f"{k}={engine[k]}" for k in _ENGINE_KEYS if k in engine)


# -- step times: which latency model produced the report's times (docs/latency.md) -------------
_LATENCY_NOTES = {
    "roofline": "roofline, modelled from datasheets, not measured",
    "aiconfigurator": "AIConfigurator's measured per-operator tables",
    "calibrated": "fitted to a live engine's measured steps",
}


def latency_text(engine: dict[str, Any]) -> str:
    """The ``--latency`` model an engine configuration's times came from, and what it is."""
    if engine.get("clock") == "steps":
        return f"steps:{engine.get('step_s', '?')} (every step lasts {engine.get('step_s', '?')} s)"
    spec = str(engine.get("latency") or "roofline").strip()
    if spec.lower() == "roofline":
        spec = f"roofline:{engine.get('cost_model', '?')}"
    note = _LATENCY_NOTES.get(spec.partition(":")[0].lower())
    return f"{spec} ({note})" if note else spec


#: The metrics the measured-error row names, with their labels.
_ERROR_LABELS = (
    ("ttft_p50", "TTFT P50"), ("tpot_p50", "TPOT P50"), ("e2e_p50", "E2E P50"),
    ("e2e_p99", "E2E P99"), ("output_throughput", "throughput"),
)  # fmt: skip


def measured_error_text(measured: dict[str, Any] | None) -> str | None:
    """The step-time model's error against measured runs, or None (docs/latency.md).

    ``measured`` is ``qualify.json``'s ``latency_measured_error``: the errors on the runs the
    model was fitted on and on each held-out measurement (``tracekit accuracy --record-error``).
    The runs behind the verdicts use the step model and its request overheads, not its TTFT
    spread, so the errors printed are those of that model where the file has them
    (``*_without_spread``); an older file's errors include the spread, and the text says so.
    """
    if not measured:
        return None

    def errors(values: dict[str, Any]) -> str:
        return ", ".join(
            f"{label} {values[key]:+.1%}"
            for key, label in _ERROR_LABELS
            if isinstance(values.get(key), int | float)
        )

    exact = "fitted_runs_without_spread" in measured
    fitted = measured.get("fitted_runs_without_spread" if exact else "fitted_runs") or {}
    parts = [f"on the {len(measured.get('fitted_on') or [])} runs it was fitted on: "
             f"{errors(fitted) or 'none recorded'}"]  # fmt: skip
    for label, entry in (measured.get("held_out") or {}).items():
        held = entry.get("errors_without_spread" if exact else "errors") or {}
        parts.append(f"held out, {label}: {errors(held) or '-'}")
    if len(parts) == 1:
        parts.append("no held-out measurement recorded (tracekit accuracy --record-error)")
    what = (
        "the step model with its request overheads, as these runs"
        if exact
        else "the step model with its request overheads and TTFT spread; these runs leave "
        "the spread out"
    )
    return f"simulated vs measured ({what}): " + "; ".join(parts)


def _windows_text(repeats: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"r{r.get('repeat')}: "
        + (
            f"window {r['window'][0]:g} to {r['window'][1]:g} s"
            if r.get("window")
            else "whole workload"
        )
        + f", seed {r.get('seed')}"
        for r in repeats
    )


def _repeats_text(view: ReportInputs, details: str) -> str:
    """``N by KIND (details)``, and why every label is inconclusive when N is too small."""
    inputs = view.inputs
    count = inputs.get("repeats", "?")
    text = f"{count} by {inputs.get('repeat_kind', '?')} ({details})"
    rule = view.qualification.get("effectiveness", {}).get("rule", {})
    minimum = rule.get("min_repeats")
    if isinstance(count, int) and isinstance(minimum, int) and count < minimum:
        text += (
            f"; fewer than the {minimum} repeats the effectiveness rule needs, so every "
            "effectiveness label is inconclusive"
        )
    return text


def _common_rows(view: ReportInputs) -> list[tuple[str, str]]:
    inputs = view.inputs
    slo = inputs.get("slo") or {}
    created = f"{inputs.get('created_at', '?')} with tracekit {inputs.get('tool_version', '?')}"
    return [
        ("SLO", f"TTFT <= {slo.get('ttft_s', '?')} s, TPOT <= {slo.get('tpot_s', '?')} s"),
        ("created", created),
    ]


def _is_sweep(view: ReportInputs) -> bool:
    return view.inputs.get("format") == "tracekit.sweep"


def _subject(view: ReportInputs) -> str:
    """What the report is about: the workload of a qualify folder, or the sweep."""
    if _is_sweep(view):
        name = (view.inputs.get("matrix") or {}).get("name")
        return f"sweep {name}" if name else "sweep"
    return str((view.inputs.get("workload") or {}).get("name", "?"))


def _rate_text(unit: Any, rates: list[Any]) -> str:
    shown = ", ".join(str(r) for r in rates)
    return f"rate scale {shown}" if unit == "scale" else f"rate {shown} {unit}"


def _sweep_rows(view: ReportInputs) -> list[tuple[str, str]]:
    """The header of a ``tracekit sweep`` folder, from its ``sweep.json`` (docs/sweep.md)."""
    inputs = view.inputs
    matrix = inputs.get("matrix") or {}
    plan = inputs.get("plan") or {}
    unit = matrix.get("rate_unit", "scale")
    planned = [w for w in plan.get("workloads") or [] if isinstance(w, dict)]
    # One line per workload (name and hash), with every rate it ran at.
    workloads: dict[tuple[str, str], dict[str, Any]] = {}
    for w in planned:
        key = (str(w.get("name")), str(w.get("sha256", "")))
        entry = workloads.setdefault(key, {"requests": w.get("num_requests"), "rates": []})
        entry["rates"].append(w.get("rate"))
    workload_text = "; ".join(
        f"{name} (sha256 {sha[:12]}..., {entry['requests']} requests) at "
        f"{_rate_text(unit, entry['rates'])}"
        for (name, sha), entry in workloads.items()
    )
    points = [p for p in matrix.get("policy_points") or [] if isinstance(p, dict)]
    settings = "; ".join(
        f"{p.get('label')}: "
        + (
            ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in p["settings"].items())
            if p.get("settings")
            else "defaults"
        )
        for p in points
    )
    engines = "; ".join(
        f"{e.get('label')}: {_engine_text(e.get('config') or {})}"
        for e in matrix.get("engines") or []
        if isinstance(e, dict)
    )
    windows = "; ".join(
        f"{w.get('name')} at {_rate_text(unit, [w.get('rate')])}: "
        f"{_windows_text(list(w.get('repeats') or []))}"
        for w in planned
    )
    cells = len(plan.get("cells") or []) or view.cells.get_column("cell").n_unique()
    runs = len(inputs.get("runs") or [])
    return [
        ("sweep", f"{matrix.get('name', '?')} ({matrix.get('path', '?')}): {cells} cells, "
                  f"{runs} runs"),
        ("workloads", workload_text or "?"),
        ("candidate", f"{view.candidate} vs baseline {view.baseline}"),
        ("strategies", ", ".join(view.strategies)),
        ("policy settings", f"{settings} (others default)" if settings else "defaults"),
        ("engines", engines or "defaults"),
        ("step times", "; ".join(
            f"{e.get('label')}: {latency_text(e.get('config') or {})}"
            for e in matrix.get("engines") or [] if isinstance(e, dict)
        ) or latency_text({})),
        ("repeats", _repeats_text(view, windows)),
        *_common_rows(view),
    ]  # fmt: skip


def _qualify_rows(view: ReportInputs) -> list[tuple[str, str]]:
    """The header of a ``tracekit qualify`` folder, from its ``qualify.json``."""
    inputs = view.inputs
    workload = inputs.get("workload") or {}
    engine = inputs.get("engine_config") or {}
    sha = str(workload.get("sha256", "?"))[:12]
    return [
        ("workload", f"{workload.get('name', '?')} (sha256 {sha}...)"),
        ("candidate", f"{view.candidate} vs baseline {view.baseline}"),
        ("strategies", ", ".join(view.strategies)),
        ("policy settings", _settings_text(view.changed_settings)),
        ("engine", _engine_text(engine) or fmt_value(engine)),
        ("step times", latency_text(engine)),
        *(
            [("measured error", text)]
            if (text := measured_error_text(inputs.get("latency_measured_error")))
            else []
        ),
        ("repeats", _repeats_text(view, _windows_text(inputs.get("repeat_details") or []))),
        *_common_rows(view),
    ]


def _header(view: ReportInputs) -> str:
    q = view.qualification
    rows = _sweep_rows(view) if _is_sweep(view) else _qualify_rows(view)
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    # Where people look: the go/no-go line first, then the load x strategy matrix and the one
    # line on the candidate's recomputation.
    note = q.get("recomputation")
    recomputation = f'<p class="note">{esc(note)}.</p>' if note else ""
    return (
        f"<header>{headline_html(q)}{matrix_html(q)}{recomputation}"
        f"<h1>Qualification report: {esc(q['candidate'])} on {esc(_subject(view))}</h1>"
        f"<dl>{items}</dl></header>"
    )


def page_html(view: ReportInputs, sections: list[Section]) -> str:
    """The whole page as text.

    Parameters
    ----------
    view
        The finished inputs of the page.
    sections
        :func:`tracekit.report.sections.build_sections`.

    Returns
    -------
    str
        One self-contained HTML document.
    """
    nav = "".join(f'<a href="#{s.anchor}">{esc(s.title)}</a>' for s in sections)
    body = "".join(
        f'<section id="{s.anchor}"><h2>{esc(s.title)}</h2>'
        f'<p class="caption">{esc(s.caption)}</p>{"".join(s.body)}</section>'
        for s in sections
    )
    specs = "".join(
        f'<script type="application/json" id="spec-{chart_id}">{script_json(_spec(chart))}'
        "</script>\n"
        for s in sections
        for chart_id, chart in s.charts.items()
    )
    title = f"Qualification report: {view.candidate} on {_subject(view)}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Nothing may load from elsewhere: the page's own inline scripts and styles only.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
        'img-src data:; font-src data:">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>"
        f"{_header(view)}<nav>{nav}</nav><main>{body}</main>"
        "<footer>Generated by tracekit report from the results folder; self-contained, works "
        "offline.</footer>\n"
        f"{specs}<script>{javascript_bundle()}</script>\n<script>{_INIT}</script>"
        "</body></html>\n"
    )


def render_page(view: ReportInputs, out_html: str | Path) -> Path:
    """Write the report page of finished inputs.

    Parameters
    ----------
    view
        The page's frames and qualification document
        (:func:`tracekit.qualify.reporting.report_inputs`).
    out_html
        The HTML file to write; its folder is created if needed.

    Returns
    -------
    Path
        ``out_html``.
    """
    out = Path(out_html)
    write_files({out: page_html(view, build_sections(view))})
    return out


def write_files(files: Mapping[Path, str]) -> None:
    """Write text files so that a failure leaves no partial file and replaces nothing.

    :func:`tracekit.safe_output.write_files`: each file is written in full beside its name,
    then all are renamed into place; a failure removes them and leaves existing files as they
    were.

    Parameters
    ----------
    files
        Each file's path and text (UTF-8); their folders are created if needed.
    """
    write_files_safely(files, cleanup=True)
