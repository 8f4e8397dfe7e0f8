"""eppo-train's argument handling as a new user meets it: a bare `eppo-train`, `--resume` with `--config`, a config
file that is not text, and a config that names a task without the module that registers it. Each is one line on
stderr and exit 2, or (the bare command) the shipped `default` config."""

from __future__ import annotations

from pathlib import Path

import pytest

from eppo_train.cli import main


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_bare_eppo_train_runs_the_default_config(tmp_path: Path, capsys):
    # it loaded the dataclasses' defaults, which name example/GuessNumber-v0 without its module: "unknown task"
    (tmp_path / "eppo-default").mkdir()
    (tmp_path / "eppo-default" / "metrics.jsonl").write_text("")
    light = ["run.iterations=0", "sft.steps=0", "model.name=tiny", "model.backend=hf", "ray.enabled=false"]
    # stops at the run dir, which `default`'s run.name names (the overrides keep a regression quick)
    assert main(["--set", f"run.out_dir={tmp_path}", *(a for o in light for a in ("--set", o))]) == 2
    assert _one_line(capsys).startswith(f"eppo-train: error: {tmp_path / 'eppo-default'} already holds a run")


def test_resume_with_a_config_is_refused_not_ignored(tmp_path: Path, capsys):
    # refused: the run would go on with its saved config and the named one be silently dropped
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("run: {}\n")
    assert main(["--resume", str(tmp_path / "run"), "--config", "tiny"]) == 2
    assert _one_line(capsys) == (f"eppo-train: error: --resume {tmp_path / 'run'} continues with the run's saved "
                                 "config; change keys with --set, not --config")


def test_a_config_file_that_is_not_text_is_one_line(tmp_path: Path, capsys):
    # UnicodeDecodeError's traceback
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\x00\xff\xfe run:")
    assert main(["--config", str(path)]) == 2
    assert _one_line(capsys).startswith(f"eppo-train: error: {path}: not a UTF-8 text file")


def test_an_example_task_without_its_import_names_the_module(tmp_path: Path):
    # a YAML without an env section gets the dataclasses' example/GuessNumber-v0; in a process of its own, as the
    # other tests here import the module that registers it
    import os
    import subprocess
    import sys

    path = tmp_path / "mine.yaml"
    path.write_text(f"run: {{out_dir: {tmp_path}, iterations: 1}}\nsft: {{steps: 0}}\n"
                    "model: {name: tiny, backend: hf}\nray: {enabled: false}\n")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "eppo_train.cli", "--config", str(path)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("eppo-train: error: env.tasks.0.id: unknown task 'example/GuessNumber-v0'"), line
    assert line.endswith("it is registered by eppo_envs.example.guess_number: add env.imports: "
                         "[eppo_envs.example.guess_number])"), line


def test_a_missing_model_is_one_line_before_ray_starts(tmp_path: Path, capsys, monkeypatch):
    # with sft.steps=0 too, checked before ray.init and the env workers: no Ray "Started a local Ray instance"
    # before the line, nor its "Failed to register actor" log after it
    import eppo_train.rollout.env_pool as envpool

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray started before the model was checked")

    monkeypatch.setattr(envpool, "init_ray", no_ray)
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "sft.steps=0",
                 "--set", "model.name=/nonexistent/model"]) == 2
    assert _one_line(capsys).startswith("eppo-train: error: model '/nonexistent/model' not found")


def test_a_group_of_one_is_refused_for_training(tmp_path: Path, capsys):
    # it trained with every advantage 0 (loss 0, grad_norm 0 each iteration) after minutes of SFT, without a word
    light = ["sft.steps=0", "ray.enabled=false", "run.iterations=1", "rollout.group_size=1"]
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", *(a for o in light for a in ("--set", o))]) == 2
    assert _one_line(capsys).startswith("eppo-train: error: rollout.group_size: training needs >= 2")
    # and the pipeline says so before its evaluation and SFT stages, not at its RL stage
    assert main(["pipeline", "--run-dir", str(tmp_path / "p"), "--set", "rollout.group_size=1"]) == 2
    assert _one_line(capsys).startswith("eppo-train: error: rollout.group_size: training needs >= 2")
    assert not (tmp_path / "p").exists()
