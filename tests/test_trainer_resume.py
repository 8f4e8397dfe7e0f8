"""Stop a run and resume it: the step counter, pacer state and metrics continue as if it had never stopped."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from eppo_train.cli import main
from eppo_train.metrics import read_metrics

BASE = ["--config", "tiny", "--set", "ray.enabled=false", "--set", "pacing.warmup=0"]


def pacer_state(run_dir, step):
    return torch.load(run_dir / "checkpoints" / f"step_{step:06d}" / "learner.pt", weights_only=False)["pacer"]


def test_resume_continues_exactly(tmp_path):
    straight, stopped = tmp_path / "a", tmp_path / "b"
    assert main([*BASE, "--set", f"run.out_dir={straight}", "--set", "run.iterations=3"]) == 0
    assert main([*BASE, "--set", f"run.out_dir={stopped}", "--set", "run.iterations=2"]) == 0
    # a crashed third iteration left a half-written line: resume must drop it
    with open(stopped / "tiny" / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "partial": true}\n')
    assert main(["--resume", str(stopped / "tiny"), "--set", "run.iterations=3"]) == 0
    a, b = read_metrics(straight / "tiny"), read_metrics(stopped / "tiny")
    assert [r["step"] for r in b] == [1, 2, 3] and "partial" not in b[-1]
    sa, sb = pacer_state(straight / "tiny", 3), pacer_state(stopped / "tiny", 3)
    assert sb["step"] == 3 and sb["ema"] == pytest.approx(sa["ema"], rel=1e-4)
    for key in ("loss", "learner_tokens"):
        assert b[-1][key] == pytest.approx(a[-1][key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_kill_mid_run_and_resume(tmp_path):
    """A real SIGKILL after the first checkpoint, then `eppo-train --resume`."""
    cmd = [sys.executable, "-m", "eppo_train.cli", *BASE, "--set", f"run.out_dir={tmp_path}", "--set",
           "run.iterations=4"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp_path / "tiny"
    deadline = time.time() + 600
    while not (run / "latest").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = int((run / "latest").read_text().split("_")[1])
    assert done < 4
    assert main(["--resume", str(run)]) == 0
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4]
    assert pacer_state(run, 4)["step"] == 4
