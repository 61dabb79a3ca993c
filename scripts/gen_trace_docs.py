"""Regenerate the "Tables" section of docs/trace-format.md from schemas/trace-v2.json.

Columns that version 1 (schemas/trace-v1.json) lacks are marked "(v2)": a version-1 bundle reads
them as null.

Usage: ``python scripts/gen_trace_docs.py [--check]``. ``--check`` exits 1 when the document is
out of date (the test suite runs it), instead of rewriting it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "trace-v2.json"
PREVIOUS = ROOT / "schemas" / "trace-v1.json"
DOC = ROOT / "docs" / "trace-format.md"
HEADING = "## Tables\n\n"


def tables_section(schema: dict, previous: dict | None = None) -> str:
    """The markdown of every table and the manifest fields (columns new since ``previous``)."""
    lines = []
    for name, table in schema["tables"].items():
        old = previous["tables"].get(name, {}) if previous else {}
        old_columns = {c["name"] for c in old.get("columns", ())} if previous else None
        optional = " (optional)" if table.get("optional") else ""
        lines.append(f"### `{name}`{optional}\n")
        lines.append(f"{table['description']} Key: `{', '.join(table['key'])}`.\n")
        lines.append("| column | type | null | meaning |\n|---|---|---|---|")
        for c in table["columns"]:
            null = "yes" if c["nullable"] else "no"
            new = "(v2) " if old_columns is not None and c["name"] not in old_columns else ""
            lines.append(f"| `{c['name']}` | {c['type']} | {null} | {new}{c['description']} |")
        lines.append("")
    lines.append("### `manifest.json`\n\n| field | meaning |\n|---|---|")
    lines += [f"| `{k}` | {v} |" for k, v in schema["manifest"]["required"].items()]
    lines += [f"| `{k}` (optional) | {v} |" for k, v in schema["manifest"]["optional"].items()]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    """Rewrite (or, with --check, compare) the document's Tables section."""
    text = DOC.read_text("utf-8")
    head = text[: text.index(HEADING) + len(HEADING)]
    wanted = head + tables_section(
        json.loads(SCHEMA.read_text("utf-8")), json.loads(PREVIOUS.read_text("utf-8"))
    )
    if "--check" in sys.argv[1:]:
        if wanted != text:
            print(f"{DOC} is out of date; run python scripts/gen_trace_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(wanted, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
