"""Atomic writes: a kill between truncate and write never leaves a run's `latest` marker (or a state file) empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from eppo_train.core.files import write_json_atomic, write_text_atomic
from eppo_train.trainer import latest_checkpoint


def test_an_interrupted_write_leaves_the_old_content(tmp_path: Path, monkeypatch):
    marker = tmp_path / "latest"
    write_text_atomic(marker, "step_000001")
    real = Path.write_text

    def truncate_then_interrupt(self: Path, text: str, *args, **kwargs):
        real(self, "")  # what open("w") has done when a Ctrl-C lands before the write
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", truncate_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(marker, "step_000002")
    monkeypatch.undo()
    assert marker.read_text() == "step_000001"
    write_json_atomic(tmp_path / "sub" / "state.json", {"done": {}})
    assert (tmp_path / "sub" / "state.json").read_text() == '{\n "done": {}\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "latest.tmp", "sub"]  # the torn temp only


def test_latest_checkpoint_names_only_a_complete_checkpoint(tmp_path: Path):
    ckpt = tmp_path / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    assert latest_checkpoint(tmp_path) is None  # no marker
    (tmp_path / "latest").write_text("")  # a marker torn by a kill (before atomic writes): not the checkpoints dir
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "latest").write_text("step_000001")
    assert latest_checkpoint(tmp_path) is None  # trainer.json, written before the marker, is missing
    (ckpt / "trainer.json").write_text('{"step": 1, "metrics_offset": 0}')
    assert latest_checkpoint(tmp_path) == ckpt
