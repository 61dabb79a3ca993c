"""Small data the defaults and the Quick start need, shipped in the wheel.

The files are symlinks to ``traces/`` in the checkout (one copy in git); setuptools copies their
targets into the wheel, so an install outside the checkout has them too:

- ``sharegpt_8k_filtered_stats_llama2_tokenizer.csv``: the default length pool of
  ``tracekit experiment`` (licence ``LICENSE-sharegpt-lengths``);
- ``azure_conv_sample.csv``: the README's sample workload, 1,000 requests of the Azure LLM
  inference 2023 conversation trace (licence ``LICENSE-azure-llm-2023``).

``traces/DATA_SOURCES.md`` in the checkout says where each file comes from.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SHIPPED", "path"]

#: The data files shipped with the package.
SHIPPED = ("azure_conv_sample.csv", "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")


def path(name: str) -> Path:
    """The installed path of a shipped data file (``python -m tracekit.data NAME`` prints it).

    Raises
    ------
    FileNotFoundError
        ``name`` is not one of :data:`SHIPPED`.
    """
    if name not in SHIPPED:
        shipped = ", ".join(SHIPPED)
        raise FileNotFoundError(f"{name!r} is not shipped with tracekit; one of {shipped}")
    return Path(__file__).resolve().parent / name
