"""``python -m tracekit.data NAME``: print the installed path of a shipped data file."""

from __future__ import annotations

import sys

from tracekit.data import SHIPPED, path


def main(argv: list[str]) -> int:
    """Print the path of each named file; with no name, list the shipped files."""
    if not argv:
        print("\n".join(SHIPPED))
        return 0
    try:
        for name in argv:
            print(path(name))
    except FileNotFoundError as error:
        print(f"tracekit.data: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
