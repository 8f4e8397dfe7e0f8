"""`eppo-train --config tiny` end to end (in-process): files, per-task metrics, changed weights, paced bounds."""

import json

import pytest
from safetensors.torch import load_file

from eppo_train.cli import main
from eppo_train.config import load_config
from eppo_train.report.metrics import read_metrics

TASK_KEYS = {"success", "reward", "response_length", "entropy", "entropy_ema", "eps_low", "eps_high",
             "clip_frac", "approx_kl", "adv_mean", "adv_std", "zero_var_frac"}
RUN_KEYS = {"rollout_tokens_per_s", "learner_tokens_per_s", "env_time_share", "loss", "grad_norm",
            "entropy_crossovers", "entropy_spikes", "mem_total_gb", "mem_total_peak_gb", "mem_driver_gb",
            "mem_driver_peak_gb"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    args = ["--config", "tiny", "--set", f"run.out_dir={out}", "--set", "ray.enabled=false",
            "--set", "run.iterations=2", "--set", "pacing.warmup=0"]
    assert main(args) == 0
    return out / "tiny"


def test_run_dir_holds_everything(tiny_run):
    for name in ("config.yaml", "metrics.jsonl", "latest", "plots/clipping.png", "plots/entropy.png",
                 "plots/success.png", "plots/clip_bounds.png", "plots/throughput.png"):
        assert (tiny_run / name).is_file(), name
    # the clip diagnostics of every task and iteration reach the metrics log (and TensorBoard, which logs every key)
    last = json.loads((tiny_run / "metrics.jsonl").read_text().splitlines()[-1])
    for values in last["tasks"].values():
        assert {"clip_low_frac", "clip_high_frac", "ratio_dev", "ratio_std", "ratio_max", "approx_kl"} <= set(values)
    assert {"clip_low_frac", "clip_high_frac", "optimizer_steps"} <= set(last)
    assert list((tiny_run / "tb").glob("events.out.tfevents.*"))
    ck = tiny_run / "checkpoints" / (tiny_run / "latest").read_text()
    assert (ck / "model" / "config.json").is_file() and (ck / "learner.pt").is_file()
    assert json.loads((ck / "trainer.json").read_text())["step"] == 2


def test_every_metric_is_logged_per_task(tiny_run):
    records = read_metrics(tiny_run)
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert RUN_KEYS <= set(r)
        assert set(r["tasks"]) == {"guess_small", "guess_large"}
        for values in r["tasks"].values():
            assert TASK_KEYS <= set(values), TASK_KEYS - set(values)


def test_weights_changed(tiny_run):
    start = load_config(str(tiny_run / "config.yaml")).model.name  # the warm-started model RL began from
    from pathlib import Path

    before = load_file(str(Path(start) / "model.safetensors"))
    ck = tiny_run / "checkpoints" / (tiny_run / "latest").read_text()
    after = load_file(str(ck / "model" / "model.safetensors"))
    assert any(not (before[k] == after[k]).all() for k in before)


def test_eppo_bounds_follow_task_entropy(tiny_run):
    tasks = read_metrics(tiny_run)[-1]["tasks"]
    lo, hi = sorted(tasks.values(), key=lambda t: t["entropy_ema"])
    assert lo["entropy_ema"] < hi["entropy_ema"]
    assert lo["eps_high"] < 0.28 < hi["eps_high"] and lo["eps_low"] < 0.2 < hi["eps_low"]


def test_existing_run_dir_is_a_one_line_error(tiny_run, capsys):
    assert main(["--config", "tiny", "--set", f"run.out_dir={tiny_run.parent}", "--set", "ray.enabled=false"]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_bad_override_exits_2(capsys):
    assert main(["--config", "tiny", "--set", "algo.name=nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown loss 'nope'" in err


def test_plot_subcommand(tiny_run, capsys):
    assert main(["plot", str(tiny_run)]) == 0
    assert "entropy.png" in capsys.readouterr().out
    assert main(["plot", str(tiny_run / "nothing")]) == 2


def test_an_engine_that_cannot_run_here_is_one_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA's vLLM kernels take the tiny model's head size")
    # one line, not a 40-line EngineProcessError traceback after vLLM's start
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "model.backend=vllm",
                 "--set", "sft.steps=0", "--set", "ray.enabled=false"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "head size 16" in err and "model.backend=hf" in err


def test_the_warm_start_and_every_iteration_are_progress_lines(tmp_path, monkeypatch, capsys):
    """`eppo-train` prints progress between Ray's start-up line and `run written to`, not minutes of silence while
    an SFT warm start is built, hours over a long run."""
    monkeypatch.setenv("EPPO_CACHE_DIR", str(tmp_path / "cache"))  # an SFT model not built before
    args = ["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "ray.enabled=false",
            "--set", "run.iterations=2", "--set", "sft.steps=3", "--set", "run.plots=false"]
    assert main(args) == 0
    err = capsys.readouterr().err
    for line in ("stage 1/2 sft: started", "stage 1/2 sft: expert demo episodes", "stage 1/2 sft: step 3/3 loss",
                 "stage 1/2 sft: done", "stage 2/2 rl: rollout episodes",
                 "stage 2/2 rl: iteration 1/2 | train success", "stage 2/2 rl: iteration 2/2 | train success"):
        assert line in err, line
