"""The ``tracekit`` console script without its extra prints one line and exits non-zero."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from click.testing import CliRunner

from tracekit.cli import cli

BLOCK_POLARS = textwrap.dedent(
    """
    import importlib.abc, sys

    class HidePolars(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "polars":
                raise ModuleNotFoundError(name)
            return None

    sys.meta_path.insert(0, HidePolars())
    import importlib.util
    _orig = importlib.util.find_spec
    importlib.util.find_spec = lambda n, *a: None if n == "polars" else _orig(n, *a)
    from tracekit.__main__ import main
    sys.exit(main(["--help"]))
    """
)


def test_missing_extra_prints_one_line_naming_the_extra() -> None:
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_POLARS], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "polars" in lines[0]
    # Never the package index's unrelated "bidkv": the extra of this checkout.
    assert '".[tracekit]"' in lines[0] and "bidkv[" not in lines[0]
    assert result.stdout == ""


def test_help_both_spellings() -> None:
    runner = CliRunner()
    for flag in ("-h", "--help"):
        result = runner.invoke(cli, [flag], catch_exceptions=False)
        assert result.exit_code == 0
        assert "Usage:" in result.output


def test_console_script_is_installed_and_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tracekit", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "tracekit" in result.stdout
