"""Console entry point: checks the ``tracekit`` extra before loading the command-line interface."""

from __future__ import annotations

import sys

# Third-party modules the toolkit needs; ``pip install ".[tracekit]"`` in the checkout brings them.
REQUIRED_MODULES = ("click", "polars", "pyarrow", "duckdb", "altair", "jsonschema", "vl_convert")


def missing_modules() -> list[str]:
    """Names of the toolkit's required modules that cannot be imported."""
    import importlib.util

    return [name for name in REQUIRED_MODULES if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    """Run the ``tracekit`` command line, or explain in one line which extra is missing."""
    missing = missing_modules()
    if missing:
        print(
            f"tracekit: missing {', '.join(missing)}; install the extra with "
            "'pip install \".[tracekit]\"' in the project checkout (or '<wheel file>[tracekit]')",
            file=sys.stderr,
        )
        return 2
    from tracekit.cli import cli

    return cli.main(args=argv, prog_name="tracekit", standalone_mode=True) or 0


if __name__ == "__main__":
    sys.exit(main())
