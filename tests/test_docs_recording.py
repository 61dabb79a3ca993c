"""docs/recording.md documents every environment variable the live recording wrappers read."""

from __future__ import annotations

import re
from pathlib import Path

from tracekit.recording import live

ROOT = Path(__file__).resolve().parents[1]


def test_every_recording_variable_is_documented_and_the_readme_points_there() -> None:
    doc = (ROOT / "docs" / "recording.md").read_text("utf-8")
    source = Path(live.__file__).read_text("utf-8")
    variables = set(re.findall(r'"(TRACEKIT_RECORD_[A-Z_]+)"', source))
    assert variables == {
        "TRACEKIT_RECORD_DIR",
        "TRACEKIT_RECORD_POLICY",
        "TRACEKIT_RECORD_RUN_ID",
        "TRACEKIT_RECORD_FLUSH_ROWS",
        "TRACEKIT_RECORD_FLUSH_S",
    }
    for name in variables:
        assert f"`{name}`" in doc, name
    for qualname in ("RecordingPolicy", "RecordingVictimSelector"):
        assert hasattr(live, qualname)
        assert f"tracekit.recording.live.{qualname}" in doc
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "RecordingPolicy" in readme and "(docs/recording.md)" in readme
