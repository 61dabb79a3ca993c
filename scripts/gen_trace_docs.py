"""Regenerate the "Tables" section of docs/trace-format.md from schemas/trace-v3.json.

Columns an earlier version lacks are marked with the version that added them, "(v2)" or "(v3)":
a bundle of an earlier version reads them as null.

Usage: ``python scripts/gen_trace_docs.py [--check]``. ``--check`` exits 1 when the document is
out of date (the test suite runs it), instead of rewriting it.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Every version, oldest first; the last is documented.
VERSIONS = [ROOT / "schemas" / f"trace-v{v}.json" for v in (1, 2, 3)]
DOC = ROOT / "docs" / "trace-format.md"
HEADING = "## Tables\n\n"


def _added_in(schemas: list[dict]) -> dict[tuple[str, str], int]:
    """(table, column) -> the version that added it (absent: it was in version 1)."""
    added = {}
    for older, newer in itertools.pairwise(schemas):
        for name, table in newer["tables"].items():
            old = {c["name"] for c in older["tables"].get(name, {}).get("columns", ())}
            for c in table["columns"]:
                if c["name"] not in old and (name, c["name"]) not in added:
                    added[(name, c["name"])] = newer["version"]
    return added


def tables_section(schemas: list[dict]) -> str:
    """The markdown of every table of the last schema, and its manifest fields.

    Columns are marked with the version that added them.
    """
    schema = schemas[-1]
    added = _added_in(schemas)
    lines = []
    for name, table in schema["tables"].items():
        optional = " (optional)" if table.get("optional") else ""
        lines.append(f"### `{name}`{optional}\n")
        lines.append(f"{table['description']} Key: `{', '.join(table['key'])}`.\n")
        lines.append("| column | type | null | meaning |\n|---|---|---|---|")
        for c in table["columns"]:
            null = "yes" if c["nullable"] else "no"
            version = added.get((name, c["name"]))
            new = f"(v{version}) " if version else ""
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
    wanted = head + tables_section([json.loads(p.read_text("utf-8")) for p in VERSIONS])
    if "--check" in sys.argv[1:]:
        if wanted != text:
            print(f"{DOC} is out of date; run python scripts/gen_trace_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(wanted, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
