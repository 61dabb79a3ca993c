"""The one text-table renderer (polars) that every human-readable table goes through."""

from __future__ import annotations

from tracekit.trace.text import text_table


def test_text_table_pads_columns_two_spaces_apart() -> None:
    rows = [("strategy", "decisions"), ("builtin", "28"), ("largest-first", "1028")]
    assert text_table(rows) == [
        "strategy       decisions",
        "builtin        28       ",
        "largest-first  1028     ",
    ]
    assert text_table(rows, align="right")[1] == "      builtin         28"


def test_text_table_aligns_each_column_its_own_way() -> None:
    rows = [("name", "n", "share"), ("a", "1", "5.0%"), ("bbbb", "100", "12.5%")]
    assert text_table(rows, align=["left", "right", "right"]) == [
        "name    n  share",
        "a       1   5.0%",
        "bbbb  100  12.5%",
    ]


def test_text_table_prints_cells_verbatim() -> None:
    # No quotes, no truncation, no null markers: what the caller formatted is what prints.
    long = "x" * 300
    assert text_table([('"q"', "null", long)]) == [f'"q"  null  {long}']


def test_text_table_of_no_rows_is_no_lines() -> None:
    assert text_table([]) == []


def test_every_json_option_is_the_shared_one() -> None:
    import click

    from tracekit.cli import cli

    def commands(group: click.Group):
        for command in group.commands.values():
            if isinstance(command, click.Group):
                yield from commands(command)
            else:
                yield command

    with_json = {c.name: c for c in commands(cli) if any(p.name == "as_json" for p in c.params)}
    assert set(with_json) == {
        "validate", "inspect", "diff", "fidelity", "render", "import", "sim", "vllm", "sglang",
        "replay", "qualify", "sweep", "capacity", "outputs", "oracle", "tables",
    }  # fmt: skip
    for command in with_json.values():
        (option,) = [p for p in command.params if p.name == "as_json"]
        assert option.opts == ["--json"] and option.help.startswith("Print the ")
