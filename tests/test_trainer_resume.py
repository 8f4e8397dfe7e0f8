"""Stop a run and resume it: the step counter, pacer state and metrics continue as if it had never stopped."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from eppo_train.cli import main
from eppo_train.report.metrics import read_metrics

BASE = ["--config", "tiny", "--set", "ray.enabled=false", "--set", "pacing.warmup=0"]


def learner_state(run_dir, step):
    return torch.load(run_dir / "checkpoints" / f"step_{step:06d}" / "learner.pt", weights_only=False)


def pacer_state(run_dir, step):
    return learner_state(run_dir, step)["pacer"]


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
    # the resumed run ends on the same weights and optimizer state, bit for bit (CPU, one process: measured equal)
    wa, wb = (load_file(str(run / "tiny" / "checkpoints" / "step_000003" / "model" / "model.safetensors"))
              for run in (straight, stopped))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    oa, ob = (learner_state(run / "tiny", 3)["optimizer"]["state"] for run in (straight, stopped))
    assert oa.keys() == ob.keys()
    assert all(torch.equal(oa[i][k], ob[i][k]) for i in oa for k in oa[i])


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


def _saved_run(tmp_path, pipeline: bool = False):
    """A run directory as `eppo-train` leaves it after its first checkpoint, or as the pipeline leaves it before
    its first stage ends (no training needed to check what --resume says)."""
    from eppo_train.config import load_config, save_config

    run = tmp_path / "run"
    save_config(load_config("tiny", ["ray.enabled=false"]), run / "config.yaml")
    if pipeline:  # the pipeline's trainer writes under rl/
        return run
    step = run / "checkpoints" / "step_000001"
    step.mkdir(parents=True)
    (step / "trainer.json").write_text('{"step": 1, "metrics_offset": 0}')
    (run / "latest").write_text("step_000001")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return run


@pytest.mark.parametrize("command", [[], ["pipeline"]])
def test_a_config_cut_short_is_named_not_taken_for_defaults(tmp_path, capsys, command):
    # named, not filled in with the defaults (which would stop at "unknown task 'example/GuessNumber-v0'")
    run = _saved_run(tmp_path, pipeline=bool(command))
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text[: text.index("\nenv:")])
    assert main([*command, "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run / 'config.yaml'}: not a whole run config" in err


def test_an_unreadable_checkpoint_state_is_one_line(tmp_path, capsys):
    run = _saved_run(tmp_path)
    (run / "checkpoints" / "step_000001" / "trainer.json").write_text('{"step": 1, "metr')
    assert main(["--resume", str(run)]) == 2  # not a JSONDecodeError traceback
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trainer.json" in err and "Traceback" not in err


@pytest.mark.parametrize("text", ["", '{\n "done": {\n  "eval_base": {'])
def test_a_cut_short_pipeline_state_is_one_line(tmp_path, capsys, text):
    run = _saved_run(tmp_path, pipeline=True)
    (run / "pipeline.json").write_text(text)
    assert main(["pipeline", "--resume", str(run)]) == 2  # not a JSONDecodeError traceback
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run / 'pipeline.json'}: not valid JSON" in err


def test_resuming_one_commands_run_with_the_other_says_which_it_is(tmp_path, capsys):
    run = _saved_run(tmp_path)
    # refused: the pipeline would write its five stages into the trainer's run directory
    assert main(["pipeline", "--resume", str(run)]) == 2
    assert f"{run} is an eppo-train run, not a pipeline run; resume it with: eppo-train --resume {run}" in \
        capsys.readouterr().err


@pytest.mark.parametrize("stage", ["first", "later"])
def test_resuming_a_pipeline_run_with_eppo_train_names_the_pipeline_command(tmp_path, capsys, stage):
    # not "nothing to resume in ... (no checkpoint yet)": `make train` stopped in its first stage (only config.yaml,
    # in runs/<timestamp>), or later (pipeline.json; its trainer run is rl/)
    from eppo_train.config import load_config, save_config

    run = tmp_path / "runs" / "20261206-205000"
    save_config(load_config("tiny", ["ray.enabled=false", f"run.out_dir={run.parent}", "run.name=pipeline"]),
                run / "config.yaml")
    if stage == "later":
        (run / "pipeline.json").write_text('{"done": {"eval_base": {}}}')
    assert main(["--resume", str(run)]) == 2
    assert capsys.readouterr().err == (f"eppo-train: error: {run} is a pipeline run (make train); resume it with: "
                                       f'make train ARGS="--resume {run}" (or eppo-train pipeline --resume {run})\n')


def test_a_trainer_run_before_its_first_checkpoint_is_not_taken_for_a_pipeline_run(tmp_path, capsys):
    from eppo_train.config import load_config, save_config

    run = tmp_path / "runs" / "mine"
    save_config(load_config("tiny", ["ray.enabled=false", f"run.out_dir={run.parent}", "run.name=mine"]),
                run / "config.yaml")
    assert main(["--resume", str(run)]) == 2
    assert "(no checkpoint yet)" in capsys.readouterr().err
