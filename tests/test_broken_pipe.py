"""Each CLI piped into a reader that has gone (`eppo-envs list | head -1`) stops quietly with 141 (128 + SIGPIPE),
as `seq 1 100000 | head -1` does: no BrokenPipeError traceback, no silent exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _into_a_closed_pipe(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write: every write to stdout fails with EPIPE
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [
    ["eppo_envs.cli", "list"],
    ["eppo_envs.cli", "show", "math"],
    ["eppo_train.cli", "plot", "run"],
    ["eppo_train.eval", "--policy", "expert", "--tasks", "math", "--episodes", "1", "--no-progress",
     "--json", "out.json"],
], ids=["envs-list", "envs-show", "train-plot", "eval"])
def test_a_closed_pipe_is_a_quiet_stop(args: list[str], tmp_path: Path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"step": 1, "tasks": {"a": {"success": 0.5}}}) + "\n")
    proc = _into_a_closed_pipe(args, tmp_path)
    assert proc.returncode == 141, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr[-2000:]
    if "--json" in args:  # the table could not be shown; the file asked for is still written
        assert json.loads((tmp_path / "out.json").read_text())["tasks"]["eppo/MathTool-v0"]["success"] == 1.0
