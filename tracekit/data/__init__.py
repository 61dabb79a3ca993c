"""Small data the defaults need, shipped in the wheel.

The files are symlinks to ``traces/`` in the checkout (one copy in git); setuptools copies their
targets into the wheel. ``sharegpt_8k_filtered_stats_llama2_tokenizer.csv`` is the default
length pool of ``tracekit experiment`` (its licence: ``LICENSE-sharegpt-lengths``).
"""
