"""What the CLI tests share: a small recorded run's options."""

from __future__ import annotations

from sweep_helpers import SAMPLE

# 120 Azure requests (mean prompt 812 tokens, longest prompt + output 4,176) on 300 blocks of 16
# tokens (4,784 usable): about five average requests fit, so every run makes policy decisions.
SMALL = [
    "--workload",
    str(SAMPLE),
    "--limit",
    "120",
    "--num-blocks",
    "300",
    "--max-model-len",
    "4608",
]
