"""Loader for multi-turn conversation logs: turn k's prompt is the whole conversation so far.

Columns (CSV with a header, or Parquet; extra columns are ignored):

* ``session_id`` (any non-empty text): the conversation;
* ``turn`` (integer): the turn's place in its conversation; turns are taken in increasing
  ``turn`` order (gaps are allowed, repeats are an error);
* ``arrival_s`` (seconds from the log's start, >= 0): when the turn was sent; a turn may not
  arrive before the previous turn of its conversation;
* ``new_prompt_tokens`` (> 0): the tokens the user added in this turn;
* ``output_tokens`` (>= 1): the answer's length;
* ``max_tokens`` (optional, >= ``output_tokens``; default ``output_tokens``) and ``priority``
  (optional integer, default 0).

Turn k's prompt is turn k-1's prompt, plus turn k-1's output, plus turn k's new tokens:
``prompt_tokens = sum(new_prompt_tokens of turns <= k) + sum(output_tokens of turns < k)``.
Request ids are ``<session_id>-<turn>``.

**Content.** Every turn of a conversation reads one token stream: the conversation so far. The
stream is cut into 512-token content blocks (Mooncake's ``hash_ids`` granularity, so the
canonical ``prefix_hash_ids`` column carries it: :mod:`tracekit.engine.content`), numbered
``session_number * 2**24 + block`` with sessions numbered in order of first appearance. Two
turns of one conversation therefore share, token for token, the prompt of the earlier one, and
with prefix caching the later turn hits the earlier turn's cached prompt blocks. One limit of
the engine's content model: a request's *generated* tokens are unique to it, so the blocks that
turn k-1 filled while decoding its answer are not hit by turn k (whose prompt carries the same
positions as content); vLLM would hit those too. Hits here are a lower bound by at most the
previous answer's blocks; turn k+1 does hit the blocks turn k computed for that answer.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.workloads._columns import integer_column, number_column
from tracekit.workloads._errors import describe_value, workload_error
from tracekit.workloads._readers import (
    ROW,
    check_columns,
    check_not_empty,
    csv_locator,
    parquet_locator,
    read_csv_strings,
    read_parquet_rows,
)
from tracekit.workloads.model import PREFIX_HASH_IDS, Workload, assemble_workload

__all__ = ["SESSION_BLOCK_TOKENS", "SESSION_COLUMNS", "read_sessions"]

#: The required source columns.
SESSION_COLUMNS = ("session_id", "turn", "arrival_s", "new_prompt_tokens", "output_tokens")
#: Tokens per content id of a conversation's stream (the ``prefix_hash_ids`` granularity).
SESSION_BLOCK_TOKENS = 512
#: Content ids of session ``s`` start at ``s << _SESSION_SHIFT`` (16 million blocks each).
_SESSION_SHIFT = 24
_WHAT = "a conversation log"


def _read_raw(path: Path) -> tuple[pl.DataFrame, object]:
    if path.suffix.lower() in {".parquet", ".pq"}:
        frame = read_parquet_rows(path)
        # Parquet columns keep their types; the checks below read them as text like CSV cells.
        text = frame.with_columns(pl.col(c).cast(pl.String) for c in frame.columns if c != ROW)
        return text, parquet_locator
    return read_csv_strings(path, what=_WHAT), csv_locator


def read_sessions(path: str | Path) -> Workload:
    """Read a conversation log into a workload whose turns carry their conversation's prompt.

    Parameters
    ----------
    path
        A CSV or Parquet file with the columns of the module docstring.

    Returns
    -------
    Workload
        Format ``"sessions"``: one request per turn, ``prompt_tokens`` as the module docstring
        says, ``prefix_hash_ids`` the conversation's content blocks; options record
        ``num_sessions``.

    Raises
    ------
    tracekit.errors.WorkloadError
        One line naming the file, the row and the column: a missing column, a bad cell, a
        repeated turn, or a turn that arrives before the previous one of its conversation.
    """
    path = Path(path)
    raw, locate = _read_raw(path)
    check_columns(raw, path, SESSION_COLUMNS, what=_WHAT)
    check_not_empty(raw, path, what=_WHAT)
    session = raw.get_column("session_id").cast(pl.String)
    empty = session.is_null() | (session.str.strip_chars() == "")
    if empty.any():
        at = int(empty.arg_true()[0])
        raise workload_error(
            path,
            where=locate(int(raw.get_column(ROW)[at])),  # type: ignore[operator]
            field="session_id",
            expected="a non-empty session id",
            found=describe_value(session[at]),
            fix="give every turn the id of its conversation",
        )
    output = integer_column(raw, "output_tokens", path, locate, minimum=1)  # type: ignore[arg-type]
    columns = [
        raw.get_column(ROW),
        session.rename("session_id"),
        integer_column(raw, "turn", path, locate),  # type: ignore[arg-type]
        number_column(raw, "arrival_s", path, locate, minimum=0),  # type: ignore[arg-type]
        integer_column(raw, "new_prompt_tokens", path, locate, minimum=1),  # type: ignore[arg-type]
        output,
    ]
    if "max_tokens" in raw.columns:
        cap = integer_column(raw, "max_tokens", path, locate, minimum=1, nullable=True)  # type: ignore[arg-type]
        columns.append(cap.fill_null(output).rename("max_tokens"))
    else:
        columns.append(output.rename("max_tokens"))
    if "priority" in raw.columns:
        priority = integer_column(raw, "priority", path, locate, nullable=True)  # type: ignore[arg-type]
        columns.append(priority.fill_null(0).rename("priority"))
    else:
        columns.append(pl.zeros(raw.height, dtype=pl.Int64, eager=True).rename("priority"))
    turns = pl.DataFrame(columns)
    # Sessions are numbered in order of first appearance in the file.
    order = (
        turns.group_by("session_id", maintain_order=True)
        .agg(pl.col(ROW).min())
        .with_row_index("session_number")
        .select("session_id", pl.col("session_number").cast(pl.Int64))
    )
    turns = turns.join(order, on="session_id").sort("session_number", "turn")
    _check_order(turns, path, locate)
    by_session = "session_number"
    turns = turns.with_columns(
        (
            pl.col("new_prompt_tokens").cum_sum().over(by_session)
            + (pl.col("output_tokens").cum_sum() - pl.col("output_tokens")).over(by_session)
        ).alias("prompt_tokens"),
    )
    too_short = turns.filter(pl.col("max_tokens") < pl.col("output_tokens"))
    if too_short.height:
        row = too_short.row(0, named=True)
        raise workload_error(
            path,
            where=locate(int(row[ROW])),  # type: ignore[operator]
            field="max_tokens",
            expected=f"a cap >= output_tokens ({row['output_tokens']})",
            found=describe_value(row["max_tokens"]),
            fix="raise max_tokens or lower output_tokens on that turn",
        )
    blocks = (pl.col("prompt_tokens") + SESSION_BLOCK_TOKENS - 1) // SESSION_BLOCK_TOKENS
    frame = turns.select(
        (pl.col("session_id") + "-" + pl.col("turn").cast(pl.String)).alias("request_id"),
        "arrival_s",
        "prompt_tokens",
        "output_tokens",
        "max_tokens",
        "priority",
        (
            pl.int_ranges(0, blocks, dtype=pl.Int64) + (pl.col(by_session) * (1 << _SESSION_SHIFT))
        ).alias(PREFIX_HASH_IDS),
    )
    return assemble_workload(
        path,
        format="sessions",
        frame=frame,
        options={"num_sessions": order.height, "content_block_tokens": SESSION_BLOCK_TOKENS},
    )


def _check_order(turns: pl.DataFrame, path: Path, locate: object) -> None:
    """Refuse repeated turns and turns that arrive before the previous one of their session."""
    previous = pl.col("turn").shift(1).over("session_number")
    repeated = turns.filter(pl.col("turn") == previous)
    if repeated.height:
        row = repeated.row(0, named=True)
        raise workload_error(
            path,
            where=locate(int(row[ROW])),  # type: ignore[operator]
            field="turn",
            expected=f"each turn once per session (session {row['session_id']!r})",
            found=f"turn {row['turn']} twice",
            fix="number the turns of a conversation 1, 2, 3, ...",
        )
    early = turns.filter(pl.col("arrival_s") < pl.col("arrival_s").shift(1).over("session_number"))
    if early.height:
        row = early.row(0, named=True)
        raise workload_error(
            path,
            where=locate(int(row[ROW])),  # type: ignore[operator]
            field="arrival_s",
            expected=(f"a time no earlier than the previous turn of session {row['session_id']!r}"),
            found=describe_value(row["arrival_s"]),
            fix="check the turn numbers or the times of that conversation",
        )
