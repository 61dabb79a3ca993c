"""Rebuilding recorded decision contexts from a bundle, streamed in chunks of decisions.

A decision's context is its ``decisions`` row plus its ``candidates`` rows in ``position``
order (``docs/trace-format.md``, "Replaying a decision exactly"). Both tables are read with
pyarrow, batch by batch, and cut into chunks of ``chunk_rows`` decisions with exactly their
candidate rows, so memory is bounded by the chunk size whatever the length of the run.

Candidate rows are matched to decisions by walking both tables in order (the recorders write a
decision's candidates next to it); each chunk is checked so that a trace that breaks this order
fails loudly instead of replaying wrong contexts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.errors import TraceSchemaError
from tracekit.hosts.preemption_policy import (
    CANDIDATE_FIELDS,
    PreemptionCandidate,
    PreemptionContext,
)
from tracekit.trace.bundle import Bundle
from tracekit.trace.schema import trace_schema

__all__ = [
    "CANDIDATE_COLUMNS",
    "DECISION_COLUMNS",
    "Chunk",
    "build_contexts",
    "iter_run_chunks",
    "run_decision_count",
]

# What a context needs, plus what the replay compares against (the recorded victim).
DECISION_COLUMNS: tuple[str, ...] = (
    "seq",
    "time_s",
    "requesting_request_id",
    "kv_usage",
    "scheduling_policy",
    "num_candidates",
    "builtin_victim_id",
    "applied_victim_id",
)
# The typed contract's PreemptionCandidate fields, in its positional order after seq/position.
# The SGLang-only columns are not part of the typed contract, so no policy can read them.
CANDIDATE_COLUMNS: tuple[str, ...] = ("seq", "position", *CANDIDATE_FIELDS)
# Trace v2: the blocks only the candidate holds, which give the tokens preempting it actually
# frees. Never shown to a policy; read when the bundle has it (version 2), else null.
EXCLUSIVE_COLUMN = "num_blocks_exclusive"


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive decisions of one run with all their candidates.

    Attributes
    ----------
    run_id
        The run the decisions belong to.
    decisions
        One row per decision in ``seq`` order: :data:`DECISION_COLUMNS`, ``requester`` (the
        requesting id with null as ``""``), ``offset`` (row of its first candidate), and the
        candidate rows of the recorded victim (``recorded_row``), of the requester
        (``requester_row``) and of the recorded built-in victim (``builtin_row``), each the
        first candidate with that id, null when there is none.
    candidates
        The decisions' candidates in ``(seq, position)`` order: :data:`CANDIDATE_COLUMNS`,
        ``dec`` (the row of their decision in ``decisions``), ``row`` (their own row) and
        ``first_row`` (the row of the first candidate of the decision with the same id),
        ``id_row`` (the first row of the chunk with the same id) and ``freed_tokens_actual``
        (the KV capacity preempting it frees: its ``num_blocks_exclusive`` times the block
        size; null when the trace does not record it, as in version-1 bundles).
    """

    run_id: str
    decisions: pl.DataFrame
    candidates: pl.DataFrame

    @property
    def size(self) -> int:
        """Number of decisions."""
        return self.decisions.height


def run_decision_count(bundle: Bundle) -> int:
    """Decisions in ``bundle``, from the Parquet footers (nothing else is read)."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in bundle.table_files("decisions"))


def _batches(files: list, columns: tuple[str, ...], batch_rows: int) -> Iterator[pa.RecordBatch]:
    # Row group by row group: pyarrow's whole-file batch reader keeps memory it no longer
    # needs (about 0.4 MB per row group read), so a long trace would grow the process. A row
    # group far larger than a chunk is read in batches, with a reader of its own.
    for file in files:
        source = pq.ParquetFile(file)
        try:
            for group in range(source.num_row_groups):
                if source.metadata.row_group(group).num_rows <= 4 * batch_rows:
                    yield from source.read_row_group(group, columns=list(columns)).to_batches()
                else:
                    yield from source.iter_batches(
                        batch_size=batch_rows, row_groups=[group], columns=list(columns)
                    )
        finally:
            source.close()


class _CandidateStream:
    """The candidates table read in order, handing out the rows of one seq range at a time."""

    def __init__(self, files: list, batch_rows: int, columns: tuple[str, ...]) -> None:
        self._columns = columns
        self._batches = _batches(files, columns, batch_rows)
        self._pending: list[pa.RecordBatch] = []
        self._exhausted = False

    def take_through(self, last_seq: int) -> pa.Table:
        """Every buffered and upcoming row up to the first row with ``seq > last_seq``."""
        # Read on until a batch ends past last_seq: every row of the range is then buffered.
        while not self._exhausted and (
            not self._pending or self._pending[-1].column("seq")[-1].as_py() <= last_seq
        ):
            batch = next(self._batches, None)
            if batch is None:
                self._exhausted = True
            elif batch.num_rows:
                self._pending.append(batch)
        if not self._pending:
            return pa.Table.from_batches([], schema=_candidate_arrow_schema(self._columns))
        table = pa.Table.from_batches(self._pending)
        seqs = pl.from_arrow(table.column("seq"))
        assert isinstance(seqs, pl.Series)
        split = int(seqs.search_sorted(last_seq, side="right"))
        rest = table.slice(split)
        self._pending = rest.to_batches() if rest.num_rows else []
        return table.slice(0, split)


def _candidate_arrow_schema(columns: tuple[str, ...] = CANDIDATE_COLUMNS) -> pa.Schema:
    schema = trace_schema().table("candidates").arrow_schema
    return pa.schema([schema.field(c) for c in columns])


def iter_run_chunks(bundle: Bundle, chunk_rows: int, limit: int | None = None) -> Iterator[Chunk]:
    """Stream one run's decisions in chunks of ``chunk_rows`` (the last may be shorter).

    Parameters
    ----------
    bundle
        The run.
    chunk_rows
        Decisions per chunk; chunk boundaries depend only on this, never on the file layout,
        so outputs are the same however the trace was written.
    limit
        Stop after this many decisions.

    Yields
    ------
    Chunk
        Consecutive decisions with their candidates.

    Raises
    ------
    TraceSchemaError
        When the bundle lacks the candidates table, or decisions and candidates do not line up
        (decisions out of order, a decision without its candidates, ...).
    """
    decision_files = bundle.table_files("decisions")
    if not decision_files or limit == 0:
        return
    candidate_files = bundle.table_files("candidates")
    if not candidate_files:
        raise TraceSchemaError(
            f"{bundle.path}: the bundle has no candidates table; open-mode replay rebuilds "
            "every context from decisions and candidates, so re-record or re-import it"
        )
    columns = CANDIDATE_COLUMNS
    if EXCLUSIVE_COLUMN in trace_schema(bundle.schema_version).table("candidates").column_names:
        columns = (*CANDIDATE_COLUMNS, EXCLUSIVE_COLUMN)
    candidates = _CandidateStream(candidate_files, chunk_rows, columns)
    pending: list[pa.RecordBatch] = []
    rows = 0
    done = 0
    last_seq: int | None = None
    for batch in _batches(decision_files, DECISION_COLUMNS, chunk_rows):
        pending.append(batch)
        rows += batch.num_rows
        while rows >= chunk_rows or (limit is not None and done + rows >= limit):
            size = chunk_rows if limit is None else min(chunk_rows, limit - done)
            table = pa.Table.from_batches(pending)
            head, tail = table.slice(0, size), table.slice(size)
            pending, rows = (tail.to_batches() if tail.num_rows else []), tail.num_rows
            chunk = _make_chunk(bundle, head, candidates, last_seq)
            last_seq = chunk.decisions["seq"][-1]
            done += size
            yield chunk
            if limit is not None and done >= limit:
                return
    if rows:
        yield _make_chunk(bundle, pa.Table.from_batches(pending), candidates, last_seq)


def _make_chunk(
    bundle: Bundle, table: pa.Table, stream: _CandidateStream, previous_seq: int | None
) -> Chunk:
    schema = trace_schema()
    dec_types = schema.table("decisions").polars_schema
    cand_types = schema.table("candidates").polars_schema
    decisions = pl.from_arrow(table)
    assert isinstance(decisions, pl.DataFrame)
    decisions = decisions.cast({c: dec_types[c] for c in DECISION_COLUMNS})
    seq = decisions["seq"]
    file = bundle.table_files("decisions")[0]
    if (
        not seq.is_sorted()
        or seq.n_unique() != seq.len()
        or (previous_seq is not None and seq[0] <= previous_seq)
    ):
        raise TraceSchemaError(
            f"{file}: column 'seq' is not strictly increasing near seq {seq[0]}; decisions must "
            "be in order: run 'tracekit validate' and re-record the bundle"
        )
    cand_table = stream.take_through(int(seq[-1]))
    cands = pl.from_arrow(cand_table)
    assert isinstance(cands, pl.DataFrame)
    cands = cands.cast({c: cand_types[c] for c in cands.columns})
    if not cands["seq"].is_sorted():
        # validate refuses this too: sorting here would only work while the whole table fits
        # in one chunk, so a small trace replayed and a large one did not.
        raise TraceSchemaError(
            f"{bundle.table_files('candidates')[0]}: column 'seq' decreases near seq "
            f"{int(seq[0])}; a decision's candidates must be stored together, in decision order: "
            "run 'tracekit validate' and re-record the bundle"
        )
    cands = _in_host_order(cands)
    cands = cands.with_columns(_freed_tokens(bundle, cands))
    _check_candidates(bundle, decisions, cands)
    counts = decisions["num_candidates"]
    cands = (
        cands.with_columns(
            pl.col("seq").rle_id().cast(pl.Int64).alias("dec"),
            pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
        )
        .with_columns(
            # An integer standing for the id within the chunk (its first row): ids are hashed once.
            pl.col("row").min().over("request_id").alias("id_row")
        )
        .with_columns(
            # Should ids repeat within a decision, an id stands for its first candidate.
            pl.col("row").min().over("dec", "id_row").alias("first_row")
        )
    )
    decisions = decisions.with_columns(
        pl.col("requesting_request_id").fill_null("").alias("requester"),
        (counts.cum_sum() - counts).alias("offset"),
        _locate(cands, decisions["applied_victim_id"]).alias("recorded_row"),
        # The requester as the policy sees it: "" for null, which names no candidate unless
        # one has the empty id (then the policy treats it as the requester, and so do we).
        _locate(cands, decisions["requesting_request_id"].fill_null("")).alias("requester_row"),
        _locate(cands, decisions["builtin_victim_id"]).alias("builtin_row"),
    )
    return Chunk(bundle.run_id, decisions, cands)


def _freed_tokens(bundle: Bundle, cands: pl.DataFrame) -> pl.Expr:
    """Per candidate, the tokens preempting it frees (null when the trace does not say)."""
    config = bundle.manifest.get("engine_config")
    block_size = config.get("block_size") if isinstance(config, dict) else None
    if EXCLUSIVE_COLUMN not in cands.columns or not isinstance(block_size, int):
        return pl.lit(None, pl.Int64).alias("freed_tokens_actual")
    return (pl.col(EXCLUSIVE_COLUMN) * block_size).alias("freed_tokens_actual")


def _locate(cands: pl.DataFrame, ids: pl.Series) -> pl.Series:
    """Per decision, the first candidate row whose id is ``ids[decision]`` (null if none)."""
    # Comparing each row with its decision's id avoids hashing every candidate id.
    hits = (
        cands.select("dec", "row", (pl.col("request_id") == ids.gather(cands["dec"])).alias("hit"))
        .filter(pl.col("hit"))
        .unique(subset="dec", keep="first", maintain_order=True)
    )
    found = pl.Series([None] * ids.len(), dtype=pl.Int64)
    return found.scatter(hits["dec"], hits["row"]) if hits.height else found


def _in_host_order(cands: pl.DataFrame) -> pl.DataFrame:
    # Recorders write positions in order; sort only a decision's candidates rewritten out of
    # order (seq itself is already known not to decrease).
    out_of_order = cands.select(
        ((pl.col("seq").diff() == 0) & (pl.col("position").diff() <= 0)).any()
    ).item()
    return cands.sort("seq", "position", maintain_order=True) if out_of_order else cands


def _check_candidates(bundle: Bundle, decisions: pl.DataFrame, cands: pl.DataFrame) -> None:
    runs = cands.select(pl.col("seq").rle()).unnest("seq")
    file = bundle.table_files("candidates")[0]
    if (
        runs.height == decisions.height
        and runs["value"].equals(decisions["seq"], check_names=False)
        and (runs["len"].cast(pl.Int64).equals(decisions["num_candidates"], check_names=False))
    ):
        return
    counted = dict(zip(runs["value"].to_list(), runs["len"].to_list(), strict=True))
    for seq, expected in zip(
        decisions["seq"].to_list(), decisions["num_candidates"].to_list(), strict=True
    ):
        found = counted.get(seq, 0)
        if found != expected:
            raise TraceSchemaError(
                f"{file}: decision seq {seq} has {found} candidate row(s) where num_candidates "
                f"is {expected}; every decision needs its candidates, in seq order: run "
                "'tracekit validate' and re-record the bundle"
            )
    raise TraceSchemaError(
        f"{file}: candidate rows are not in decision order near seq {decisions['seq'][0]}; "
        "run 'tracekit validate' and re-record the bundle"
    )


def build_contexts(
    chunk: Chunk, start: int = 0, stop: int | None = None
) -> list[PreemptionContext]:
    """The typed contexts of decisions ``start:stop`` of ``chunk``, as the host built them.

    A null requester becomes ``""``: the typed context's ``requesting_request_id`` is a string,
    and ``""`` names no candidate (the recorders store ``""`` as null, so this is exact).

    Parameters
    ----------
    chunk
        The chunk.
    start, stop
        Decision rows to build (all by default); building a slice bounds the Python objects
        alive at once.

    Returns
    -------
    list of PreemptionContext
        One per decision, candidates in host order.
    """
    dec = chunk.decisions.slice(start, (stop if stop is not None else chunk.size) - start)
    if dec.height == 0:
        return []
    first = dec["offset"][0]
    total = int(dec["num_candidates"].sum())
    cands = chunk.candidates.slice(first, total)
    objects = list(
        map(
            PreemptionCandidate,
            *(cands[c].to_list() for c in CANDIDATE_COLUMNS[2:]),
        )
    )
    contexts = []
    offset = 0
    for n, policy, requester, kv, now, builtin in zip(
        dec["num_candidates"].to_list(),
        dec["scheduling_policy"].to_list(),
        dec["requester"].to_list(),
        dec["kv_usage"].to_list(),
        dec["time_s"].to_list(),
        dec["builtin_victim_id"].to_list(),
        strict=True,
    ):
        contexts.append(
            PreemptionContext(
                tuple(objects[offset : offset + n]), policy, requester, kv, now, builtin
            )
        )
        offset += n
    return contexts
