"""Loader for the workload JSON the original BidKV's vLLM experiment runner replayed.

``tracekit experiment traces`` writes it too (docs/experiments.md, "Traces"). One JSON document
(docs/workloads.md, "Original BidKV vLLM workload JSON (vllm-workload)"), written with
``indent=2``::

    {"workload_name": "mixed", "request_rate": 3.8, "seed": 42, "dataset_source": "...",
     "frozen_at": "", "num_requests": 1000,
     "requests": [{"request_id": "mixed-0000", "prompt": "...", "max_tokens": 128,
                   "arrival_time_ms": 263.1, "expected_output": "...",
                   "metadata": {"actual_prompt_tokens": "412", "dataset": "sharegpt",
                                "original_id": "..."}}]}

Rules:

* ``request_id`` is kept (it must be unique).
* ``arrival_s`` = ``arrival_time_ms / 1000``, kept relative to the run start (no re-basing).
* ``prompt_tokens`` = ``metadata.actual_prompt_tokens`` (a string holding the prompt's token
  count with the target model's tokenizer), or, when that is absent, the length of ``prompt``
  if ``prompt`` is a list of token ids. A text prompt without a recorded count is an error:
  tracekit has no tokenizer, and guessing from words would silently change the KV footprint.
* ``output_tokens`` = ``max_tokens`` = the request's ``max_tokens`` (>= 1). ``expected_output``
  is text with no token count, so, as for the frozen trace, the cap is the target length.
* ``priority`` = 0. The workload name is ``workload_name`` (else the file stem).
* ``options`` records the document's ``request_rate`` and ``seed`` as ``source_request_rate``
  and ``source_seed``, and where the prompt lengths came from (``prompt_tokens_from``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.workloads._columns import (
    integer_column,
    number_column,
)
from tracekit.workloads._errors import (
    describe_value,
    workload_error,
)
from tracekit.workloads._readers import (
    ROW,
    check_columns,
    check_readable,
    document_locator,
)
from tracekit.workloads.detect import WorkloadFormat
from tracekit.workloads.model import Workload, assemble_workload

__all__ = ["VLLM_REQUEST_COLUMNS", "read_vllm_workload"]

#: Required keys of each entry of ``requests``.
VLLM_REQUEST_COLUMNS = ("request_id", "max_tokens", "arrival_time_ms")

_WHAT = "a BidKV vLLM workload JSON document"
_COUNT_KEY = "actual_prompt_tokens"


def _read_document(path: Path) -> pl.DataFrame:
    check_readable(path)
    try:
        return pl.read_json(path, infer_schema_length=None)
    except (pl.exceptions.PolarsError, OSError) as error:
        # Polars does not say where the JSON breaks; the standard parser does.
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as parse_error:
            raise workload_error(
                path,
                where=f"line {parse_error.lineno}, column {parse_error.colno}",
                expected="a JSON document",
                found=f"invalid JSON ({parse_error.msg})",
                fix="repair the JSON (was the file cut short?)",
            ) from error
        except UnicodeDecodeError as decode_error:
            raise workload_error(
                path,
                expected="a UTF-8 JSON document",
                found=f"undecodable bytes ({decode_error.reason})",
                fix="re-save the file as UTF-8",
            ) from error
        raise workload_error(
            path,
            expected=f"{_WHAT} with consistent value types",
            found=f"a JSON read error ({str(error).strip().splitlines()[0]})",
            fix="give every request's fields the same JSON types",
        ) from error


def _requests(document: pl.DataFrame, path: Path) -> pl.DataFrame:
    column = document.schema.get("requests")
    # An empty array has no element type: polars reads it as List(Null).
    if document.height != 1 or not (
        isinstance(column, pl.List) and isinstance(column.inner, pl.Struct | pl.Null)
    ):
        found = (
            f"a requests field of type {column}"
            if column is not None and document.height == 1
            else "no top-level requests array"
        )
        raise workload_error(
            path,
            field="requests",
            expected=f"{_WHAT}: one object with a 'requests' array of objects",
            found=found,
            fix="point at a workload JSON written by bidkv's freeze_traces",
        )
    requests = document.get_column("requests")[0]
    if requests is None or requests.len() == 0 or requests.dtype == pl.Null:
        raise workload_error(
            path,
            field="requests",
            expected="at least one request",
            found="an empty requests array",
            fix="point at a workload that contains requests",
        )
    return requests.struct.unnest().with_row_index(ROW)


def _prompt_tokens(requests: pl.DataFrame, path: Path) -> tuple[pl.Series, str]:
    locate = document_locator("requests")
    counted = pl.repeat(None, requests.height, dtype=pl.Int64, eager=True)
    metadata = requests.schema.get("metadata")
    if isinstance(metadata, pl.Struct) and _COUNT_KEY in {f.name for f in metadata.fields}:
        # Named by its full path so that errors point at metadata.actual_prompt_tokens.
        name = f"metadata.{_COUNT_KEY}"
        counts = requests.select(ROW, pl.col("metadata").struct.field(_COUNT_KEY).alias(name))
        counted = integer_column(counts, name, path, locate, minimum=1, nullable=True)
    listed = pl.repeat(None, requests.height, dtype=pl.Int64, eager=True)
    prompt = requests.schema.get("prompt")
    if isinstance(prompt, pl.List) and prompt.inner.is_integer():
        listed = requests.get_column("prompt").list.len().cast(pl.Int64)
    tokens = counted.fill_null(listed)
    bad = tokens.is_null() | (tokens < 1)
    if bad.any():
        position = bad.arg_true()[0]
        raise workload_error(
            path,
            where=locate(int(requests.get_column(ROW)[position])),
            field=f"metadata.{_COUNT_KEY}",
            expected="the prompt's token count (or a token-id list in 'prompt')",
            found=describe_value(tokens[position]) if tokens[position] is not None else "neither",
            fix="re-freeze the workload so each request records metadata.actual_prompt_tokens",
        )
    source = (
        f"metadata.{_COUNT_KEY}"
        if counted.null_count() == 0
        else "prompt"
        if counted.null_count() == counted.len()
        else f"metadata.{_COUNT_KEY}, else prompt"
    )
    return tokens.rename("prompt_tokens"), source


def _scalar(document: pl.DataFrame, name: str) -> Any:
    return document.get_column(name)[0] if name in document.columns else None


def read_vllm_workload(path: str | Path) -> Workload:
    """Read an original BidKV vLLM workload JSON document into a checked workload.

    Parameters
    ----------
    path
        The workload JSON (e.g. ``mixed_rate3.8.json``).

    Returns
    -------
    Workload
        Format ``"vllm-workload"``, named after ``workload_name``.

    Raises
    ------
    tracekit.errors.WorkloadError
        For an empty or invalid JSON file, a missing or empty ``requests`` array, a missing key,
        a request without a usable prompt length, ``max_tokens`` < 1, a negative or
        non-numeric ``arrival_time_ms``, or duplicate request ids.
    """
    path = Path(path)
    document = _read_document(path)
    requests = _requests(document, path)
    check_columns(requests, path, VLLM_REQUEST_COLUMNS, what=f"{_WHAT} request")
    locate = document_locator("requests")
    prompt_tokens, prompt_source = _prompt_tokens(requests, path)
    ids = requests.get_column("request_id").cast(pl.String)
    if ids.null_count():
        position = ids.is_null().arg_true()[0]
        raise workload_error(
            path,
            where=locate(position),
            field="request_id",
            expected="a request id",
            found=describe_value(None),
            fix="give that request an id",
        )
    max_tokens = integer_column(requests, "max_tokens", path, locate, minimum=1)
    frame = pl.DataFrame(
        [
            ids,
            number_column(requests, "arrival_time_ms", path, locate, minimum=0),
            prompt_tokens,
            max_tokens,
        ]
    ).select(
        "request_id",
        (pl.col("arrival_time_ms") / 1000.0).alias("arrival_s"),
        "prompt_tokens",
        pl.col("max_tokens").alias("output_tokens"),
        "max_tokens",
        pl.lit(0, dtype=pl.Int64).alias("priority"),
    )
    name = _scalar(document, "workload_name")
    options = {
        "source_request_rate": _scalar(document, "request_rate"),
        "source_seed": _scalar(document, "seed"),
        "prompt_tokens_from": prompt_source,
    }
    return assemble_workload(
        path,
        format=WorkloadFormat.VLLM_WORKLOAD.value,
        frame=frame,
        options=options,
        name=str(name) if name else None,
    )
