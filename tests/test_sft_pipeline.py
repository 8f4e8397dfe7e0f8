"""SFT on expert demos (loss falls, only model tokens in the loss) and the pipeline end to end, on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from eppo_train.config import load_config
from eppo_train.policy.models import load_model, load_tokenizer
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.task_slots import prepare_tasks


@pytest.fixture(scope="module")
def demos():
    cfg = load_config("tiny")
    slots = prepare_tasks(cfg)
    tok = load_tokenizer("tiny")
    from eppo_train.sft import expert_samples

    with LocalEnvPool() as pool:
        samples, per_task = expert_samples(cfg, slots, tok, pool, 4)
    return cfg, tok, samples, per_task


def test_demos_mask_exactly_the_expert_replies(demos):
    cfg, tok, samples, per_task = demos
    assert {s.task for s in samples} == {"guess_small", "guess_large"}
    assert per_task["guess_small"]["expert_wins"] == 4
    for s in samples:
        spans = s.meta["turn_spans"]
        masked = [i for i, m in enumerate(s.loss_mask) if m]
        assert masked == [i for a, b in spans for i in range(a, b)]  # nothing outside the replies
        for a, b in spans:  # each reply: the expert's text, then the end-of-turn token
            assert s.input_ids[b - 1] == tok.eos_token_id
            assert "<answer>" in tok.decode(s.input_ids[a : b - 1])
        # the env's text (instructions, feedback) is never in the loss
        assert "guess" not in tok.decode([t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m]).lower()


def test_loss_counts_only_model_tokens(demos):
    from eppo_train.core.records import Sample
    from eppo_train.sft import mean_nll

    _, tok, samples, _ = demos
    model = load_model("tiny")
    s = samples[0]
    junk = tok("lots of unrelated environment text", add_special_tokens=False)["input_ids"]
    padded = Sample(s.task, s.group_id, s.episode_id, -1, s.input_ids + junk, s.loss_mask + [0] * len(junk),
                    s.old_logprobs + [0.0] * len(junk), s.reward)
    assert mean_nll(model, [padded]) == pytest.approx(mean_nll(model, [s]), rel=1e-5)
    shifted = Sample(s.task, s.group_id, s.episode_id, -1, s.input_ids, [0] * len(s.loss_mask), s.old_logprobs,
                     s.reward)
    shifted.loss_mask[-1] = 1  # only the final end-of-turn token
    assert mean_nll(model, [shifted]) != pytest.approx(mean_nll(model, [s]), rel=1e-3)


def test_sft_loss_falls(demos):
    from eppo_train.sft import mean_nll, train_sft

    _, _, samples, _ = demos
    model = load_model("tiny")
    before = mean_nll(model, samples)
    report = train_sft(model, samples, steps=20, lr=3e-3, batch_size=8, micro_batch_tokens=2048)
    after = mean_nll(model, samples)
    assert after < 0.5 * before
    assert report.losses[-1] < report.losses[0]


def test_sft_cli_writes_a_loadable_model(tmp_path: Path):
    from eppo_train.cli import main

    out = tmp_path / "m"
    assert main(["sft", "--config", "tiny", "--set", "sft.steps=3", "--out", str(out)]) == 0
    info = json.loads((out / "sft.json").read_text())
    assert len(info["losses"]) == 3 and info["model_tokens"] > 0
    load_model(str(out))
    assert main(["sft", "--config", "tiny", "--set", "sft.steps=0", "--out", str(out)]) == 2


def test_sft_cli_tells_an_interrupt_where_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # a Ctrl-C during `eppo-train sft` names the step, not "interrupted at start-up" at any step
    import eppo_train.sft
    from eppo_train.cli import main
    from eppo_train.runtime import interrupt

    seen = []

    def fake_run_sft(cfg, slots, out, on_step):  # noqa: ANN001, ANN202
        seen.append(interrupt.where())
        on_step(0, 0.5)  # the first step (0-based) is done
        seen.append(interrupt.where())
        return {"samples": 1, "model_tokens": 1, "loss_first_step": 1.0, "loss_last_steps": 0.5}

    monkeypatch.setattr(eppo_train.sft, "run_sft", fake_run_sft)
    assert main(["sft", "--config", "tiny", "--set", "sft.steps=3", "--out", str(tmp_path / "m")]) == 0
    assert seen == ["expert demos and SFT step 1/3", "SFT step 2/3"]


def test_pipeline_writes_summary_with_three_stages(tmp_path: Path, capsys):
    from eppo_train.cli import main

    run = tmp_path / "run"
    args = ["pipeline", "--config", "tiny", "--run-dir", str(run), "--set", "sft.steps=40",
            "--set", "run.iterations=1", "--set", "ray.enabled=false", "--set", "evaluation.episodes=4",
            "--set", "evaluation.max_turns=3", "--set", "run.plots=false"]
    assert main(args) == 0
    summary = (run / "summary.md").read_text()
    assert "| before SFT | after SFT | after RL | SFT − base | RL − SFT |" in summary
    # success, reward and clip tables
    assert summary.count("| guess_") == 6 and summary.count("**mean over tasks**") == 2
    outcomes = json.loads((run / "evals" / "sft.json").read_text())["tasks"]["guess_small"]["outcomes"]
    assert outcomes["seeds"] == [0, 1, 2, 3] and len(outcomes["won"]) == 4  # what the paired intervals pair
    state = json.loads((run / "pipeline.json").read_text())
    assert list(state["done"]) == ["eval_base", "sft", "eval_sft", "rl", "eval_rl"]
    assert (run / "rl" / "metrics.jsonl").read_text().count("\n") == 1
    assert all((run / "evals" / f"{k}.json").exists() for k in ("base", "sft", "rl"))
    # the memory account: each stage's peak RSS per process, in pipeline.json and summary.md (report/memory.py)
    assert all(stage["memory"]["driver"] > 0.1 and stage["memory"]["total"] >= stage["memory"]["driver"]
               for stage in state["done"].values())
    assert "## Memory" in summary and "| eval_base |" in summary and "| rl |" in summary
    # SFT teaches the answer format: the easy task is won after it (and the random model never writes it)
    assert state["done"]["eval_sft"]["tasks"]["guess_small"]["success"] > state["done"]["eval_base"]["tasks"][
        "guess_small"]["success"]
    err = capsys.readouterr().err
    assert "stage 2/5 sft: step" in err and "stage 4/5 rl: iteration 1/1" in err
    # progress inside every stage: evaluation episodes, expert demos and the RL rollout report done/total, tok/s
    assert "stage 1/5 eval_base: episodes 8/8 |" in err and "new tok/s" in err
    assert "stage 2/5 sft: expert demo episodes 12/12" in err and "stage 4/5 rl: rollout episodes 12/12" in err
    # a finished run resumes to the same summary without redoing anything; a fresh run into it is refused
    assert main(["pipeline", "--resume", str(run)]) == 0
    assert "already done" in capsys.readouterr().err
    assert main(["pipeline", "--config", "tiny", "--run-dir", str(run)]) == 2


def test_pipeline_resumes_after_the_last_finished_stage(tmp_path: Path):
    from eppo_train.pipeline import Pipeline

    cfg = load_config("tiny", ["sft.steps=5", "run.iterations=0", "evaluation.episodes=2",
                               "evaluation.max_turns=2", "ray.enabled=false"])
    run = tmp_path / "run"
    p = Pipeline(cfg, run)
    run.mkdir()
    p._finish("eval_base", {"model": "tiny", "tasks": {"guess_small": {"success": 0.25, "episodes": 4},
                                                       "guess_large": {"success": 0.0, "episodes": 4}}})
    Pipeline(cfg, run, resume=True).run()
    done = json.loads((run / "pipeline.json").read_text())["done"]
    assert done["eval_base"]["tasks"]["guess_small"]["success"] == 0.25  # kept, not recomputed
    assert done["rl"]["model"] == str(run / "sft")  # no RL iterations: the SFT model is the final one
    assert "0.25" in (run / "summary.md").read_text()


@pytest.mark.slow
def test_make_train_pipeline_end_to_end_on_vllm(tmp_path: Path):
    """The `make train` pipeline config, shrunk (1 problem per task, 4 evaluation episodes, 4 SFT steps, 2 RL
    iterations), on the embedded default model with the vLLM engine for evaluation and RL rollouts.
    On the loaded 2-core machine (load ~13) it takes ~35 min, most of it four engine starts."""
    from eppo_train.cli import main

    run = tmp_path / "run"
    sets = ["evaluation.episodes=4", "evaluation.max_turns=2", "sft.steps=4", "sft.episodes=2", "run.iterations=2",
            *[f"env.tasks.{i}.problems=1" for i in range(5)]]
    assert main(["pipeline", "--run-dir", str(run), *[a for s in sets for a in ("--set", s)]]) == 0
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["model"]["backend"] == "vllm"
    state = json.loads((run / "pipeline.json").read_text())
    assert list(state["done"]) == ["eval_base", "sft", "eval_sft", "rl", "eval_rl"]
    assert len(state["done"]["eval_rl"]["tasks"]) == 5
    records = [json.loads(line) for line in (run / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and all(r["rollout_tokens"] > 0 for r in records)
    assert "| RL − SFT |" in (run / "summary.md").read_text()


@pytest.mark.parametrize("budget, over", [(64, True), (160, False)])
def test_demos_count_the_expert_replies_a_reply_budget_would_cut(budget, over):
    """Code's expert programs are mostly over 64 tokens: the SFT report (and a warning) says so, and the
    pipeline's budget of 160 fits them all."""
    from eppo_train.config import from_dict
    from eppo_train.sft import expert_samples, over_budget_warnings

    cfg = from_dict({"env": {"tasks": [{"id": "eppo/Code-v0", "name": "code", "max_turns": 3, "max_new_tokens": budget,
                                        "kwargs": {"level": [2, 3]}}]}})
    slots = prepare_tasks(cfg)
    with LocalEnvPool() as pool:
        _, per_task = expert_samples(cfg, slots, load_tokenizer("smollm2"), pool, 8)
    code = per_task["code"]
    assert (code["episodes"], code["expert_wins"], code["reply_budget"]) == (8, 8, budget)
    assert (code["replies_over_budget"] > 0) == over
    warnings = over_budget_warnings(per_task)
    assert (len(warnings) == 1 and f"{budget}-token reply budget" in warnings[0]) == over


def test_sft_tells_a_wrong_model_before_the_tasks_are_set_up(tmp_path, capsys, monkeypatch):
    # `eppo-train sft --model runs/nothere` set up the tasks and played expert demos (~8 s) before the model's error
    import eppo_train.rollout.task_slots
    from eppo_train.cli import main

    def too_early(cfg):
        raise AssertionError("the tasks were set up before the model was checked")

    monkeypatch.setattr(eppo_train.rollout.task_slots, "prepare_tasks", too_early)
    assert main(["sft", "--model", str(tmp_path / "nothere"), "--out", str(tmp_path / "m")]) == 2
    assert capsys.readouterr().err.startswith(f"eppo-train: error: model '{tmp_path / 'nothere'}' not found")


def test_the_warm_start_key_ignores_rl_only_settings():
    """A cached SFT model is reused when only RL settings change (each task's G, sampling cut, loss weight,
    estimator, refill floor; min-p off), and rebuilt when the demonstrations or the training change."""
    from eppo_train.sft import sft_key

    def key(*overrides: str) -> str:
        cfg = load_config("tiny", list(overrides))
        return sft_key(cfg, prepare_tasks(cfg))

    base = key()
    assert base == key("env.tasks.0.group_size=3", "env.tasks.0.temperature=0.7", "env.tasks.0.top_p=0.9",
                       "env.tasks.0.min_p=0.05", "env.tasks.0.loss_weight=2.0", "env.tasks.0.min_signal_groups=1",
                       "rollout.min_p=0.0")
    assert base != key("sft.steps=7") and base != key("rollout.min_p=0.1")
