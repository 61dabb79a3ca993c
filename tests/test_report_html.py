"""The HTML report on a real (small) results folder: self-contained, escaped, deterministic."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from report_helpers import EVIL_ID, EVIL_WORKLOAD, copy_results, shared_results

from tracekit.qualify import QUALIFICATION_NAME, load_results, write_report
from tracekit.qualify.frames import kv_usage_frame, latency_ecdf_frame
from tracekit.report.html import javascript_bundle
from tracekit.report.markup import Column, esc, html_table, script_json

SPEC = re.compile(r'<script type="application/json" id="spec-([^"]+)">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_results(tmp_path_factory)


@pytest.fixture(scope="module")
def page(results: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = write_report(results, tmp_path_factory.mktemp("html") / "report.html")
    return out.read_text("utf-8")


def _without_bundle(page: str) -> str:
    bundle = javascript_bundle()
    assert page.count(bundle) == 1
    return page.replace(bundle, "")


def test_writes_html_and_qualification_beside_it(results: Path, tmp_path: Path) -> None:
    out = write_report(results, tmp_path / "sub" / "r.html")
    assert out == tmp_path / "sub" / "r.html"
    document = json.loads((out.parent / QUALIFICATION_NAME).read_text())
    assert document["candidate"] == "bidkv"
    assert document["functional_compatibility"]["status"] == "passed"
    assert {e["strategy"] for e in document["effectiveness"]["cells"]} == {
        "bidkv",
        "largest-first",
    }


def test_default_output_is_inside_the_results_folder(results: Path, tmp_path: Path) -> None:
    copy = copy_results(results, tmp_path / "results")
    assert write_report(copy) == copy / "report.html"
    assert (copy / QUALIFICATION_NAME).is_file()


def test_page_is_self_contained(page: str) -> None:
    rest = _without_bundle(page)
    # No external script, style sheet, font, image or frame; no URL at all outside the bundle.
    assert re.findall(r"https?://", rest) == []
    assert re.findall(r"<(?:link|img|iframe|object|embed)\b", rest, re.I) == []
    assert re.findall(r"<script[^>]*\bsrc\s*=", page, re.I) == []
    assert "@import" not in page and "@font-face" not in page
    assert re.findall(r"url\(\s*['\"]?(?:https?:)?//", page) == []
    hrefs = re.findall(r'\bhref="([^"]*)"', rest)
    assert hrefs and all(h.startswith("#") for h in hrefs)
    assert "default-src 'none'" in page  # the browser is told to load nothing else


def test_bundle_urls_are_inert_namespaces_and_links() -> None:
    # The bundled libraries mention a few URLs (XML namespaces, docs links); none is loaded.
    found = set(re.findall(r"https?://[^\s\"'`)]+", javascript_bundle()))
    assert all(
        u.startswith(("http://www.w3.org/", "https://vega.github.io/", "https://github.com/"))
        for u in found
    ), found


def test_every_chart_has_a_spec_with_inline_data(page: str) -> None:
    placeholders = re.findall(r'data-spec="spec-([^"]+)"', page)
    specs = dict(SPEC.findall(page))
    assert len(placeholders) >= 8
    assert sorted(placeholders) == sorted(specs)
    for text in specs.values():
        spec = json.loads(text)
        assert "$schema" not in spec
        assert "<" not in text  # escaped as \u003c
        assert "url" not in json.dumps(spec.get("data", {}))
        assert spec.get("datasets"), "data is inline"


def test_sections_and_captions(page: str) -> None:
    for anchor in (
        "verdicts",
        "deltas",
        "latency",
        "kv",
        "starvation",
        "recompute",
        # Prefix caching is on by default (as in vLLM), and resumed victims hit the cache.
        "prefix-cache",
        "agreement",
        "counters",
        "diff",
        "runs",
    ):
        assert f'<section id="{anchor}">' in page
        assert f'href="#{anchor}"' in page
    assert page.count('<p class="caption">') == 11
    assert "Functional compatibility gate" in page
    # Every label the rule can give is one of its four, or a load-level one.
    labels = set(re.findall(r'<tr class="([a-z -]+?)(?: cand)?"><td class="">', page))
    assert labels and labels <= {
        "beneficial", "harmful", "equivalent", "inconclusive", "overloaded",
        "identical to built-in", "pass", "fail", "diff",
    }  # fmt: skip


def test_trace_strings_are_escaped_everywhere(page: str) -> None:
    # Raw payloads never appear; tables show them escaped, chart data as \u003c escapes.
    assert "<img src=x" not in page
    assert "<svg onload" not in page
    assert esc(EVIL_ID) in page
    assert esc(EVIL_WORKLOAD) in page
    assert "\\u003cimg src=x onerror=" in page
    assert "</script" not in _without_bundle(page).replace("</script>", "")


def test_script_json_cannot_close_its_element() -> None:
    value = {"id": "</script><script>alert(1)</script><!-- & \u2028"}
    text = script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


def test_html_table_escapes_cells_headers_and_classes() -> None:
    frame = pl.DataFrame({"a": ["<b>x</b>"], "cls": ['"><script>']})
    out = html_table(frame, [Column("a", "<h>")], row_class="cls", caption="<c>")
    assert "<b>" not in out and "<h>" not in out and "<c>" not in out and "<script>" not in out
    assert "&lt;b&gt;x&lt;/b&gt;" in out
    assert 'class="script"' in out


def test_rendering_is_deterministic(results: Path, tmp_path: Path) -> None:
    first = write_report(results, tmp_path / "a" / "report.html")
    second = write_report(results, tmp_path / "b" / "report.html")
    assert first.read_bytes() == second.read_bytes()
    assert (first.parent / QUALIFICATION_NAME).read_bytes() == (
        second.parent / QUALIFICATION_NAME
    ).read_bytes()


def test_page_stays_small(page: str) -> None:
    assert len(page.encode()) < 3_000_000


def test_large_series_are_downsampled(results: Path) -> None:
    loaded = load_results(results)
    kv = kv_usage_frame(loaded, ["builtin", "bidkv"], max_points=200, max_marks=10)
    assert kv.filter(pl.col("kind") == "usage").height <= 200
    marks = kv.filter(pl.col("kind") == "preemption")
    assert 0 < marks.height <= 20
    ecdf = latency_ecdf_frame(loaded, points=50)
    assert ecdf.group_by("strategy", "metric").len()["len"].max() <= 51
    assert ecdf["share"].max() == 1.0


def test_missing_replay_and_diff_are_reported_not_fatal(results: Path, tmp_path: Path) -> None:
    copy = copy_results(results, tmp_path / "results")
    shutil.rmtree(copy / "replay")
    shutil.rmtree(copy / "diff")
    (copy / "conformance.json").unlink()
    page = write_report(copy).read_text()
    assert "replay/agreement.parquet is absent" in page
    assert "diff/diff.json is absent" in page
    document = json.loads((copy / QUALIFICATION_NAME).read_text())
    gate = document["functional_compatibility"]
    assert gate["status"] == "failed"
    assert [r.split(":")[0] for r in gate["reasons"]] == [
        "legacy_typed_equivalent",
        "conformance_passed",
    ]
