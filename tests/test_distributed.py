"""The sharded learner against the one-process reference, LoRA, several engines, `eppo-train plan`.

World size 2 runs as two spawned processes in a gloo group (tests/dist_helpers.py), FSDP2 `fully_shard` per decoder
block, on the tiny model: the same batch gives the same losses, diagnostics, pacer state and weights as world size 1
up to the order of float sums (measured: losses within 1e-6 relative, gradient norms within 3e-5, weights within
1.5e-6 after 3 AdamW steps of lr 1e-3; the test allows 1e-4 relative and 1e-5 absolute), and a checkpoint written
at world size 2 loads at world size 1 bit for bit.
"""

from __future__ import annotations

import math

import pytest
import torch

import eppo_envs.example.guess_number  # noqa: F401  (registers example/GuessNumber-v0)
from eppo_train.cli import main as cli_main
from eppo_train.config import ConfigError, load_config, to_dict
from eppo_train.learner.distributed import split_by_tokens
from eppo_train.learner.learner import pad_tokens, token_logprobs_entropy
from eppo_train.learner.lora import merged_state_dict, scaling
from eppo_train.learner.sizing import Shape, plan, read_shape
from eppo_train.learner.workers import LocalWorkers
from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams
from eppo_train.policy.engine import EngineGroup
from eppo_train.policy.hf import HFPolicy
from eppo_train.policy.models import load_model, tiny_model_dir
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout
from tests.dist_helpers import learner, run_ranks, run_steps
from tests.test_trainer_learner import make_batch

LOSS_RTOL, WEIGHT_ATOL = 1e-4, 1e-5
LORA = ["learner.lora.r=4", "learner.lora.alpha=8", "learner.lr=1e-2"]


def test_split_by_tokens_balances_and_keeps_every_row_once():
    lengths = [50, 10, 40, 30, 20, 5]
    shares = split_by_tokens(lengths, range(6), 2)
    assert sorted(i for s in shares for i in s) == list(range(6))
    loads = [sum(lengths[i] for i in s) for s in shares]
    assert abs(loads[0] - loads[1]) <= 5 and all(s == sorted(s) for s in shares)
    assert split_by_tokens(lengths, range(6), 1) == [list(range(6))]
    assert split_by_tokens(lengths, [0], 3) == [[0], [], []]  # a rank may get nothing (it then idles through)


def _close(a: dict, b: dict) -> None:
    for x, y in zip(a["reports"], b["reports"], strict=True):
        # abs_tol: LoRA's first loss is ~1e-8 (B starts at 0: ratio 1, advantages summing to 0), rounding noise
        assert math.isclose(x["metrics"]["loss"], y["metrics"]["loss"], rel_tol=LOSS_RTOL, abs_tol=1e-7)
        assert math.isclose(x["metrics"]["grad_norm"], y["metrics"]["grad_norm"], rel_tol=LOSS_RTOL)
        assert x["metrics"]["optimizer_steps"] == y["metrics"]["optimizer_steps"]
        assert x["per_task"].keys() == y["per_task"].keys()
        for task, values in x["per_task"].items():
            for key, value in values.items():
                assert math.isclose(value, y["per_task"][task][key], rel_tol=1e-4, abs_tol=1e-6), (task, key)
        assert x["pace"] == pytest.approx(y["pace"], rel=1e-5)
    assert a["weights"].keys() == b["weights"].keys()
    for name, w in a["weights"].items():
        assert torch.allclose(w, b["weights"][name], atol=WEIGHT_ATOL, rtol=0), name


@pytest.fixture(scope="module")
def world_two(tmp_path_factory):
    """One group of two ranks runs every world-size-2 job of this file (a spawn costs far more than a job)."""
    tmp = tmp_path_factory.mktemp("ws2")
    jobs = [
        {"overrides": ["algo.name=grpo", "learner.mini_batches=2"], "steps": 3},
        {"overrides": ["algo.name=eppo", "learner.epochs=2", "learner.activation_checkpointing=true"], "steps": 3,
         "save": str(tmp / "ckpt")},
        {"overrides": ["algo.name=grpo", *LORA], "steps": 2},
    ]
    return run_ranks(2, jobs, tmp / "out.pt"), tmp


@pytest.mark.timeout(2400)  # the spawned group's start (two processes importing torch) is most of it
@pytest.mark.parametrize("job,overrides", [
    (0, ["algo.name=grpo", "learner.mini_batches=2"]),
    (1, ["algo.name=eppo", "learner.epochs=2", "learner.activation_checkpointing=true"]),
])
def test_world_size_two_matches_one(world_two, job, overrides):
    results, _ = world_two
    one = run_steps(learner(overrides), 3)
    _close(one, results[job])
    if "algo.name=eppo" in overrides:  # the pacer saw the same global per-task entropies
        assert one["pacer"]["ema"] == pytest.approx(results[job]["pacer"]["ema"], rel=1e-6)
        assert results[job]["reports"][-1]["pace"] != {t: 1.0 for t in results[job]["reports"][-1]["pace"]}


def test_a_world_size_two_checkpoint_resumes_at_world_size_one_exactly(world_two):
    results, tmp = world_two
    ckpt = tmp / "ckpt"
    assert (ckpt / "dcp" / ".metadata").is_file() and (ckpt / "model" / "model.safetensors").is_file()
    overrides = ["algo.name=eppo", "learner.epochs=2", "learner.activation_checkpointing=true"]
    resumed = learner(overrides)
    resumed.load(ckpt)
    saved = results[1]
    assert resumed.step == 3
    for name, w in resumed.trainable_weights().items():
        assert torch.equal(w, saved["weights"][name]), name
    assert resumed.pacer.state_dict() == saved["pacer"]
    # AdamW's moments came back too: the next step equals one taken by a learner that never stopped
    straight = learner(overrides)
    for _ in range(3):
        straight.train_step(make_batch(n=12))
    a, b = resumed.train_step(make_batch(seed=5, n=12)), straight.train_step(make_batch(seed=5, n=12))
    assert math.isclose(a.metrics["loss"], b.metrics["loss"], rel_tol=1e-4)
    # the gathered export is an ordinary transformers folder holding those weights
    exported = load_model(str(ckpt / "model")).state_dict()
    assert all(torch.equal(exported[n], w) for n, w in saved["weights"].items() if n in exported)


def test_lora_under_fsdp_trains_only_adapters_as_in_one_process(world_two):
    results, _ = world_two
    one = run_steps(learner(["algo.name=grpo", *LORA]), 2)
    assert all(".lora_" in n for n in one["weights"])
    _close({**one, "reports": one["reports"]}, results[2])


# ---------------------------------------------------------------- LoRA in one process, to the engine and back


def test_lora_changes_only_adapters_and_the_engine_samples_the_update(tmp_path):
    cfg = load_config("tiny", ["ray.enabled=false", "model.backend=hf", "pacing.warmup=0", "algo.name=grpo", *LORA])
    workers = LocalWorkers(cfg)
    lrn = workers.learner_worker.learner
    before = {n: t.clone() for n, t in lrn.model.state_dict().items()}
    workers.sync_weights()
    first = workers.last_sync["weight_sync_bytes"]
    for seed in range(2):
        workers.train(make_batch(seed=seed, n=12))
    after = lrn.model.state_dict()
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all(".lora_A." in n or ".lora_B." in n for n in changed)
    workers.sync_weights()
    adapters = sum(t.numel() * t.element_size() for n, t in after.items() if ".lora_" in n)
    assert workers.last_sync["weight_sync_bytes"] == adapters < first  # the base projections went once

    # the engine holds base + (alpha / r) B A, and its next sample's log-probs are the learner's
    merged = merged_state_dict(after, scaling(cfg.learner.lora))
    engine_state = workers.policy.model.state_dict()
    for name, value in merged.items():
        assert torch.allclose(engine_state[name], value, atol=1e-6), name
    prompt = make_batch(n=1)[0].input_ids[:6]
    gen = workers.policy.generate([prompt], SamplingParams(max_new_tokens=5, temperature=1.0, seed=0))[0]
    ids = torch.tensor([prompt + gen.token_ids])
    mask = torch.zeros_like(ids, dtype=torch.float32)
    mask[0, len(prompt):] = 1
    with torch.no_grad():
        lp, _ = token_logprobs_entropy(lrn.model, ids, torch.ones_like(ids), mask)
    assert lp[0, len(prompt):].tolist() == pytest.approx(gen.logprobs, abs=1e-4)

    # the checkpoint holds the adapter and a merged transformers folder; a LoRA learner resumes from it
    workers.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "adapter" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "ckpt" / "adapter" / "adapter_config.json").is_file()
    plain = load_model(str(tmp_path / "ckpt" / "model"))
    ids, attn, mask = pad_tokens(make_batch(n=3))
    with torch.no_grad():
        want = token_logprobs_entropy(lrn.model, ids, attn, mask)[0]
        got = token_logprobs_entropy(plain, ids, attn, mask)[0]
    assert torch.allclose(got, want, atol=1e-5)
    again = LocalWorkers(cfg, engine=workers.policy)
    assert again.load(tmp_path / "ckpt") == 2
    mine = again.learner_worker.learner.trainable_weights()
    assert all(torch.equal(v, after[k]) for k, v in mine.items())


def test_lora_settings_are_checked():
    with pytest.raises(ConfigError, match="learner.lora.alpha"):
        load_config("tiny", ["learner.lora.r=4", "learner.lora.alpha=0"])
    with pytest.raises(ConfigError, match="choose one"):
        load_config("tiny", ["learner.lora.r=4", "learner.train_top_layers=1"])
    with pytest.raises(ConfigError, match="learner.world_size > 1 needs ray.enabled"):
        load_config("tiny", ["learner.world_size=2", "ray.enabled=false"])
    with pytest.raises(ConfigError, match="generator.engines"):
        load_config("tiny", ["generator.engines=0"])
    assert to_dict(load_config("tiny"))["learner"]["lora"]["r"] == 0


# ---------------------------------------------------------------- several engines


class Recording(PolicyBackend):
    """An engine that remembers the prompts it was given."""

    def __init__(self, engine: PolicyBackend) -> None:
        self.engine, self.tokenizer, self.prompts = engine, engine.tokenizer, []

    def generate(self, prompts, params, budgets=None) -> list[Generation]:  # noqa: ANN001
        self.prompts += [tuple(p) for p in prompts]
        return self.engine.generate(prompts, params, budgets=budgets)


def test_two_engines_return_every_episode_once_in_order():
    base = HFPolicy("tiny", device="cpu")
    engines = [Recording(base), Recording(HFPolicy("tiny", device="cpu"))]
    group = EngineGroup(engines)
    problems = [Problem("example/GuessNumber-v0", "train", seed) for seed in range(4)]
    rc = RolloutConfig(group_size=2, max_turns=3, max_new_tokens=8, max_total_tokens=512, seed=0, progress=False)
    with LocalEnvPool() as pool:
        two = run_rollout(group, pool, problems, rc)
        one = run_rollout(base, pool, problems, rc)
    assert [s.episode_id for s in two.samples] == [s.episode_id for s in one.samples]  # the batch's order
    assert [e.seed for e in two.episodes] == [e.seed for e in one.episodes]
    assert len({s.episode_id for s in two.samples}) == len(two.episodes) == 8  # each episode once
    assert all(e.prompts for e in engines)  # both engines sampled
    # the 4 groups were shared out 2 and 2, and each engine got exactly the turns of the episodes of its groups
    # (GuessNumber's first prompts are the same text for every seed, so prompts alone cannot say whose they are)
    assert sorted(group.load) == [2, 2] and len(group.assigned) == 4
    for e, engine in enumerate(engines):
        turns = sum(ep.num_steps for ep in two.episodes if group.assigned[(ep.task, ep.env_id, ep.seed)] == e)
        assert len(engine.prompts) == turns
    group.close()


# ---------------------------------------------------------------- eppo-train plan


def test_plan_counts_parameters_from_the_config_alone():
    shape, _ = read_shape("qwen2.5-7b")
    assert shape.params() == pytest.approx(7.62e9, rel=0.01)
    assert read_shape("qwen2.5-1.5b")[0].params() == pytest.approx(1.54e9, rel=0.01)
    tiny = Shape.from_config(load_model(str(tiny_model_dir())).config.to_dict())
    assert tiny.params() == sum(p.numel() for p in load_model(str(tiny_model_dir())).parameters())
    eight = plan(shape, 8, micro_batch_tokens=8192, checkpointing=True)
    one = plan(shape, 1, micro_batch_tokens=8192, checkpointing=True)
    assert eight.rows["optimizer"] * 8 == one.rows["optimizer"] == shape.params() * 8
    lora = plan(shape, 1, lora_r=16, lora_targets=["q_proj", "v_proj"])
    assert lora.trainable == 28 * 16 * ((3584 + 3584) + (3584 + 512))


def test_plan_command_prints_the_verdict(capsys):
    assert cli_main(["plan", "--model", "qwen2.5-7b", "--gpus", "8", "--set",
                     "learner.activation_checkpointing=true"]) == 0
    out = capsys.readouterr().out
    assert "fits on 80 GiB" in out and "optimizer" in out
    # the default config trains the top 6 blocks only (which fits); a full fine-tune of 7B on one GPU does not
    assert cli_main(["plan", "--model", "qwen2.5-7b", "--gpus", "1", "--set", "learner.train_top_layers=0"]) == 0
    assert "does NOT fit" in capsys.readouterr().out
    assert cli_main(["plan", "--model", "qwen2.5-7b", "--gpus", "1", "--lora"]) == 0
    assert "fits on 80 GiB" in capsys.readouterr().out
    assert cli_main(["plan", "--model", "/nonexistent/model"]) == 2


# ---------------------------------------------------------------- slow: the default model, measured memory


@pytest.mark.slow
@pytest.mark.parametrize("model,extra", [("tiny", []), ("default", []),
                                         ("default", ["learner.activation_checkpointing=true"])])
def test_plan_agrees_with_the_measured_peak(model, extra):
    """Peak RSS of one full fp32 step on 2,048 tokens (CPU) against `plan`'s total, within 25 %."""
    from eppo_train.learner.sizing import GIB
    from tests.dist_helpers import measured_peak

    peak = measured_peak(model, 2048, ["learner.train_top_layers=0", "learner.bf16_autocast_cpu=false", *extra])
    shape, _ = read_shape(model)
    p = plan(shape, 1, device="cpu", micro_batch_tokens=2048,
             checkpointing="learner.activation_checkpointing=true" in extra)
    print(f"{model} {extra}: measured {peak / GIB:.2f} GiB, plan {p.total / GIB:.2f} GiB")
    assert abs(p.total - peak) <= 0.25 * peak


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("extra", [["learner.world_size=2"], ["learner.lora.r=16", "learner.train_top_layers=0"]])
def test_make_train_rl_stage_on_the_default_model(tmp_path, extra):
    """`make train`'s RL stage (the pipeline config, no SFT) for 2 iterations with 2 learner ranks, and with LoRA."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sets = [f"run.out_dir={tmp_path}", "run.name=rl", "sft.steps=0", "run.iterations=2", "run.plots=false",
            "run.tensorboard=false", "ray.enabled=true", "env.num_workers=1", *extra]
    cmd = [sys.executable, "-m", "eppo_train.cli", "--config", "pipeline"]
    for item in sets:
        cmd += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(root), "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=3500)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["loss"]) for r in rows)
    assert all(r["weight_sync_bytes"] > 0 for r in rows)
    assert (tmp_path / "rl" / "checkpoints" / "step_000002" / "dcp" / ".metadata").is_file()
    assert load_model(str(tmp_path / "rl" / "checkpoints" / "step_000002" / "model")) is not None  # eppo-eval's input
