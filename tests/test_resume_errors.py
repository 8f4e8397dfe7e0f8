"""`eppo-train --resume` of a run whose checkpoint is damaged: one line that says which file and how to resume from an
earlier checkpoint, exit 2, before Ray or a model starts: not a 50-line traceback from inside the learner actor for a
truncated model.safetensors or learner.pt, nor "no checkpoint yet" for a `latest` naming a checkpoint that is gone."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from eppo_train.cli import main
from eppo_train.policy.models import tiny_model_dir


def _run(tmp_path: Path) -> Path:
    """A run folder shaped as the trainer writes it: config.yaml, two checkpoints, `latest` at the newer."""
    run = tmp_path / "runs" / "r"
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path / 'runs'}", "--set", "run.name=r", "--set",
                 "run.iterations=0", "--set", "sft.steps=0", "--set", "ray.enabled=false"]) == 0
    for step in (1, 2):
        ckpt = run / "checkpoints" / f"step_{step:06d}"
        (ckpt / "model").mkdir(parents=True)
        shutil.copy(tiny_model_dir() / "model.safetensors", ckpt / "model" / "model.safetensors")
        torch.save({"step": step}, ckpt / "learner.pt")
        (ckpt / "trainer.json").write_text(json.dumps({"step": step}))
    (run / "latest").write_text("step_000002\n")
    return run


@pytest.mark.parametrize("damage, says", [
    ("weights", "step_000002: model/model.safetensors is unreadable (Error while deserializing header"),
    ("learner", "step_000002: learner.pt is unreadable (File is not a zip file)"),
    ("latest", "latest names 'step_000009', which is not a whole checkpoint"),
])
def test_a_damaged_checkpoint_is_one_line_naming_an_earlier_one(tmp_path: Path, capsys, damage: str, says: str):
    run = _run(tmp_path)
    capsys.readouterr()
    ckpt = run / "checkpoints" / "step_000002"
    if damage == "weights":
        os.truncate(ckpt / "model" / "model.safetensors", 1000)
    elif damage == "learner":
        os.truncate(ckpt / "learner.pt", 100)
    else:
        (run / "latest").write_text("step_000009\n")
    assert main(["--resume", str(run), "--set", "run.iterations=3"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert says in lines[0], lines[0]
    assert lines[0].endswith(f"point {run / 'latest'} at an earlier checkpoint to resume from there "
                             f"({'step_000001' if damage != 'latest' else 'step_000001, step_000002'})"), lines[0]


def test_a_resume_with_no_iterations_left_starts_nothing(tmp_path: Path, capsys):
    # no Ray, no config.yaml rewritten with the smaller count, no "continuing at step 3 of 2"
    import ray

    run = _run(tmp_path)  # two iterations done
    saved = (run / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["--resume", str(run), "--set", "run.iterations=1", "--set", "ray.enabled=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("has done 2 iterations, more than run.iterations=1; --set run.iterations=N with N > 2 "
                        "continues it") and "\n" not in err, err
    assert main(["--resume", str(run), "--set", "run.iterations=2", "--set", "ray.enabled=true"]) == 0
    out = capsys.readouterr().out
    assert "has done all 2 of its iterations: nothing to train" in out, out
    assert not ray.is_initialized() and (run / "config.yaml").read_text() == saved
