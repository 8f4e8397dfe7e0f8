"""A model folder that is not a loadable model (a config.json that is not JSON, no weights, truncated weights, a
broken tokenizer) is one line naming the folder and exit 2 from eppo-eval and eppo-train, with or without Ray: not a
transformers/safetensors traceback, nor (with Ray) an actor's error naming a temporary copy, exit 1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eppo_train.policy.models import (
    ModelNotFoundError,
    check_model,
    load_model,
    load_tokenizer,
    tiny_model_dir,
)

ROOT = Path(__file__).resolve().parents[1]


def _break(folder: Path, how: str) -> Path:
    shutil.copytree(tiny_model_dir(), folder)
    if how == "config":
        (folder / "config.json").write_text("hi\n")
    elif how == "no-weights":
        (folder / "model.safetensors").unlink()
    elif how == "truncated-header":
        os.truncate(folder / "model.safetensors", 1000)
    elif how == "truncated-data":
        os.truncate(folder / "model.safetensors", (folder / "model.safetensors").stat().st_size // 2)
    elif how == "tokenizer":
        (folder / "tokenizer.json").write_text("{\n")
    return folder


BROKEN = ["config", "no-weights", "truncated-header", "truncated-data", "tokenizer"]


@pytest.mark.parametrize("how", BROKEN)
def test_check_model_names_the_folder(tmp_path: Path, how: str):
    folder = _break(tmp_path / "model", how)
    with pytest.raises(ModelNotFoundError, match=rf"^{folder}: cannot load it as a transformers model: \S"):
        check_model(folder)


@pytest.mark.parametrize("how", ["config", "no-weights", "truncated-header", "tokenizer"])
def test_load_model_and_tokenizer_name_the_folder(tmp_path: Path, how: str):
    folder = _break(tmp_path / "model", how)
    with pytest.raises(ModelNotFoundError, match=rf"^{folder}: cannot load it as a transformers model: [^\n]+$"):
        load_tokenizer(folder) if how == "tokenizer" else load_model(folder)


def test_a_sound_model_passes_the_check():
    assert check_model("tiny") == str(tiny_model_dir())


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_eppo_eval_on_a_broken_model_is_one_line(tmp_path: Path):
    folder = _break(tmp_path / "model", "truncated-header")
    proc = _run(["eppo_train.eval", "--policy", f"hf:{folder}", "--backend", "hf", "--tasks", "math",
                 "--episodes", "1", "--no-progress"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"eppo-eval: error: {folder}: cannot load it as a transformers model: Error while deserializing header: "
        "invalid header length"], proc.stderr[-2000:]


@pytest.mark.parametrize("ray", ["true", "false"])
def test_eppo_train_on_a_broken_model_is_one_line_naming_it(tmp_path: Path, ray: str):
    folder = _break(tmp_path / "model", "no-weights")
    proc = _run(["eppo_train.cli", "--config", "tiny", "--set", f"run.out_dir={tmp_path / 'runs'}", "--set",
                 "sft.steps=0", "--set", f"model.name={folder}", "--set", f"ray.enabled={ray}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "eppo-gen-model" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"eppo-train: error: {folder}: cannot load it as a transformers model: "), last
    assert "model.safetensors" in last, last
