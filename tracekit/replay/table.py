"""The ``replay_decisions`` table: one row per recorded decision and replayed strategy.

Both paths report the controller's result per strategy
(:data:`~tracekit.replay.plain.RESULT_COLUMNS`); :func:`assemble` interleaves them into rows
ordered by ``seq`` then strategy (in the order given), and derives the columns that compare with
the recording, so the two paths share that code.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.replay.contexts import Chunk

__all__ = [
    "DICTIONARY_COLUMNS",
    "OUTCOME",
    "RAW_TYPE",
    "REASON",
    "REPLAY_SCHEMA",
    "ReplayTableWriter",
    "assemble",
]

# The closed vocabularies of the result columns, as enums: moving them around per row costs a
# byte, and they are written as Parquet dictionaries without hashing a string per row.
OUTCOME = pl.Enum(["selected", "abstained", "invalid", "exception", "disabled", "builtin"])
RAW_TYPE = pl.Enum(["str", "none", "other", "not-called"])
#: Reasons the production policy gives; a user policy's other reasons stay plain strings.
REASON = pl.Enum(
    [
        "strategy",
        "gate_fallback",
        "liveness_abstain",
        "cascade_abstain",
        "liveness_fallback",
        "disabled",
    ]
)

#: Columns of ``replay_decisions.parquet``.
REPLAY_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("strategy", pa.string(), nullable=False),
        pa.field("raw_result", pa.string()),
        pa.field("raw_result_type", pa.string(), nullable=False),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("applied_victim_id", pa.string(), nullable=False),
        pa.field("decision_reason", pa.string()),
        pa.field("victim_tokens_freed", pa.int64()),
        pa.field("recorded_tokens_freed", pa.int64()),
        pa.field("agrees_with_recorded", pa.bool_(), nullable=False),
        pa.field("picked_requester", pa.bool_(), nullable=False),
        # Trace v2: the KV capacity, in tokens, the applied and the recorded victim's preemption
        # actually frees (exclusive blocks * block size); null when the trace does not record it.
        pa.field("victim_tokens_freed_actual", pa.int64()),
        pa.field("recorded_tokens_freed_actual", pa.int64()),
    ]
)
COMPRESSION = "zstd"
# Low-cardinality columns are handed to the Parquet writer as dictionary arrays. The file does
# not store this Arrow schema, so every reader sees plain strings (REPLAY_SCHEMA).
_DICTIONARY = pa.dictionary(pa.int32(), pa.string())
DICTIONARY_COLUMNS = ("run_id", "strategy", "raw_result_type", "outcome", "decision_reason")
_WRITE_SCHEMA = pa.schema(
    [f.with_type(_DICTIONARY) if f.name in DICTIONARY_COLUMNS else f for f in REPLAY_SCHEMA]
)


def assemble(chunk: Chunk, labels: Sequence[str], results: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """The table rows of one chunk from each strategy's results.

    Parameters
    ----------
    chunk
        The replayed decisions.
    labels
        Strategy names, in output order.
    results
        Per strategy, :data:`~tracekit.replay.plain.RESULT_COLUMNS` with one row per decision
        in ``seq`` order.

    Returns
    -------
    pl.DataFrame
        Rows ordered by ``seq`` then strategy: the columns of :data:`REPLAY_SCHEMA`, then, for
        the summary, ``applied_row`` (the applied victim's candidate row) and
        ``applied_id_row`` (an integer standing for its id in the chunk).
        ``victim_tokens_freed`` is the applied victim's ``num_computed_tokens`` (what the
        candidate's token counts suggest preempting it frees: the estimate);
        ``recorded_tokens_freed`` the recorded victim's; ``*_tokens_freed_actual`` what they
        actually free (their exclusive blocks times the block size, null when unrecorded);
        ``picked_requester`` says whether the
        applied victim is the requester. Should ids repeat, an id stands for its first
        candidate.
    """
    n, width = chunk.size, len(labels)
    # Row s*n + i of the stack (strategy s, decision i) becomes row i*width + s; every column
    # moved here is an integer or a short string view, so the shuffle is cheap.
    k = pl.int_range(n * width, dtype=pl.Int64, eager=True)
    index = k // width
    if any(r.schema["decision_reason"] == pl.String for r in results):
        results = [r.with_columns(pl.col("decision_reason").cast(pl.String)) for r in results]
    stacked = pl.concat(results, how="vertical").select(pl.all().gather((k % width) * n + index))
    cands, dec = chunk.candidates, chunk.decisions
    row = stacked["applied_row"]
    recorded = dec["recorded_row"].gather(index)
    tokens = cands["num_computed_tokens"]
    actual = cands["freed_tokens_actual"]
    applied = cands["request_id"].gather(row)
    return stacked.select(
        pl.lit(chunk.run_id, pl.Enum([chunk.run_id])).alias("run_id"),
        dec["seq"].gather(index).alias("seq"),
        pl.Series("strategy", list(labels), dtype=pl.Enum(list(labels))).gather(k % width),
        pl.when(pl.col("outcome") == "selected")
        .then(applied)
        .otherwise(pl.col("raw_other"))
        .alias("raw_result"),
        "raw_result_type",
        "outcome",
        applied.alias("applied_victim_id"),
        "decision_reason",
        tokens.gather(row).alias("victim_tokens_freed"),
        tokens.gather(recorded).alias("recorded_tokens_freed"),
        (row == recorded).fill_null(False).alias("agrees_with_recorded"),
        # A null requester names no request, even if a candidate has the empty id.
        (
            (row == dec["requester_row"].gather(index))
            & dec["requesting_request_id"].gather(index).is_not_null()
        )
        .fill_null(False)
        .alias("picked_requester"),
        actual.gather(row).alias("victim_tokens_freed_actual"),
        actual.gather(recorded).alias("recorded_tokens_freed_actual"),
        "applied_row",
        cands["id_row"].gather(row).alias("applied_id_row"),
    )


class ReplayTableWriter:
    """Appends assembled chunks to a Parquet file, one row group per chunk.

    Parameters
    ----------
    path
        The file to write.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        self._writer = pq.ParquetWriter(
            path,
            _WRITE_SCHEMA,
            compression=COMPRESSION,
            store_schema=False,
            # Statistics let readers skip row groups by run and seq; the rest would only cost.
            write_statistics=["run_id", "seq"],
            # Strings are dictionary-encoded; integers delta-encoded, which is cheaper to write
            # than trying a dictionary first, and as small.
            use_dictionary=[f.name for f in REPLAY_SCHEMA if f.type == pa.string()],
            column_encoding={
                f.name: "DELTA_BINARY_PACKED" for f in REPLAY_SCHEMA if f.type == pa.int64()
            },
        )

    def write(self, frame: pl.DataFrame) -> None:
        """Append one chunk's rows (the columns of :data:`REPLAY_SCHEMA`)."""
        self.write_arrow(_to_arrow(frame))

    def write_arrow(self, table: pa.Table) -> None:
        """Append an Arrow table (as :meth:`write` converts chunks) as one row group."""
        if table.num_rows:
            self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
            self.rows += table.num_rows

    def close(self) -> None:
        """Finish the file (an empty table is still a file with the schema)."""
        self._writer.close()

    def __enter__(self) -> ReplayTableWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _to_arrow(frame: pl.DataFrame) -> pa.Table:
    columns = []
    for field in _WRITE_SCHEMA:
        series = frame[field.name]
        if field.type != _DICTIONARY:
            columns.append(series.to_arrow().cast(field.type))
        elif isinstance(series.dtype, pl.Enum):
            codes = series.to_physical().cast(pl.Int32).to_arrow()
            values = pa.array(series.dtype.categories.to_list(), pa.string())
            columns.append(pa.DictionaryArray.from_arrays(codes, values))
        else:
            encoded = series.to_arrow().cast(pa.string()).dictionary_encode()
            columns.append(encoded.cast(_DICTIONARY))
    return pa.Table.from_arrays(columns, schema=_WRITE_SCHEMA)
