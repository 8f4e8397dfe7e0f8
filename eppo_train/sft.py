"""`eppo-train sft`: the supervised warm start on expert trajectories (demos -> SFT -> EPPO, docs/design.md).

Demonstrations are generated on the fly: each task's expert plays through the *same* rollout loop as RL
(`rollout.run_rollout` with a token-level expert agent), so the samples carry exactly the chat format, the context
mode (full transcript or a window per turn) and the token boundaries the RL stage will see. The loss is the mean
negative log-likelihood of the model's own tokens (the sample's `loss_mask`: expert replies and their end-of-turn
token); prompts, observations and chat scaffolding never enter it.

A random or untuned model rarely writes a well-formed tool call, so every GRPO group would have zero reward
variance and RL would have nothing to learn from; this stage fixes the format first. `sft_model` caches the
result by its settings, so repeated runs (tests, `eppo-train train`, studies) pay for it once; `warm_start`
is the stage as the CLI's `train` runs it before the trainer (the pipeline runs `run_sft` into its own `sft/`
folder, uncached; a study starts every run from the cached `sft_model`, or from `--sft DIR`).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from eppo_envs.core.cache import cache_root, cached_dir
from eppo_train.config import Config, load_config, to_dict
from eppo_train.core.records import Sample
from eppo_train.learner.learner import (
    autocast,
    freeze_below_top,
    micro_batches,
    pad_tokens,
    token_logprobs_entropy,
)
from eppo_train.policy.agents import ExpertTokenAgent
from eppo_train.policy.models import load_model, load_tokenizer
from eppo_train.report.ticks import listen
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.loop import run_rollout
from eppo_train.rollout.task_slots import TaskSlot, prepare_tasks, rollout_config, train_problems

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from eppo_train.report.progress import Progress
    from eppo_train.rollout.env_pool import EnvPool


def expert_samples(cfg: Config, slots: list[TaskSlot], tokenizer: PreTrainedTokenizerBase, pool: EnvPool,
                   episodes: int) -> tuple[list[Sample], dict]:
    """`episodes` expert episodes per task (train split, seeded by the run seed), as RL-format samples. An
    episode the expert did not finish in the turn limit is kept: each of its replies is still the expert's move."""

    problems = train_problems(cfg, slots, 0, per_task=episodes, stream="sft")
    rl = rollout_config(cfg, slots, 0)
    result = run_rollout(ExpertTokenAgent(tokenizer), pool, problems, rl.for_expert(cfg.sft.max_reply_tokens))
    per_task: dict[str, dict[str, float]] = {
        s.label: {"samples": 0, "model_tokens": 0, "tokens": 0, "episodes": 0, "expert_wins": 0, "replies": 0,
                  "replies_over_budget": 0, "reply_budget": rl.reply_budget(s.env_id)} for s in slots}
    for smp in result.samples:
        t = per_task[smp.task]
        t["samples"] += 1
        t["model_tokens"] += sum(smp.loss_mask)
        t["tokens"] += len(smp.input_ids)
    for e in result.episodes:
        t = per_task[e.task]
        t["episodes"] += 1
        t["expert_wins"] += int(e.won)
        # a reply (its end-of-turn token included) longer than the task's reply budget is one the trained model
        # cannot finish when it generates: it learns to start answers that RL and evaluation cut off
        lengths = [turn.info.get("response_tokens", 0) for turn in e.turns]
        t["replies"] += len(lengths)
        t["replies_over_budget"] += sum(n > t["reply_budget"] for n in lengths)
    return result.samples, per_task


def over_budget_warnings(per_task: dict[str, dict]) -> list[str]:
    """One line per task whose expert replies do not fit its reply budget (`expert_samples`' counts)."""
    return [f"sft: warning: {task}: {t['replies_over_budget']} of {t['replies']} expert replies are longer than its "
            f"{t['reply_budget']}-token reply budget (env.tasks[].max_new_tokens, else rollout.max_new_tokens): "
            f"the SFT model learns answers that generation cuts off"
            for task, t in per_task.items() if t.get("replies_over_budget")]


# ---------------------------------------------------------------------------- the loss and the loop
def masked_nll_sum(model: torch.nn.Module, samples: list[Sample], micro_batch_tokens: int, device: str = "cpu",
                   bf16: bool = False, grad: bool = False, scale: float = 1.0) -> tuple[float, int]:
    """(sum of -log p over model tokens, number of model tokens). With `grad`, backpropagates `scale` x the sum
    micro-batch by micro-batch (exact gradient accumulation)."""
    total, count = 0.0, 0
    for idx in micro_batches([len(s.input_ids) for s in samples], micro_batch_tokens):
        ids, attn, mask = (t.to(device) for t in pad_tokens([samples[i] for i in idx]))
        with autocast(device, bf16), torch.set_grad_enabled(grad):
            lp, _ = token_logprobs_entropy(model, ids, attn, mask, 1.0, 256, grad=grad)
            nll = -(lp * mask).sum()
        if grad:
            (nll * scale).backward()
        total += float(nll.detach())
        count += int(mask.sum())
    return total, count


def mean_nll(model: torch.nn.Module, samples: list[Sample], micro_batch_tokens: int = 4096, device: str = "cpu",
             bf16: bool = False) -> float:
    """The SFT loss of `model` on `samples` (nats per model token), without gradients."""
    was = model.training
    model.eval()
    total, count = masked_nll_sum(model, samples, micro_batch_tokens, device, bf16)
    model.train(was)
    return total / max(count, 1)


@dataclass
class SftReport:
    losses: list[float] = field(default_factory=list)  # per step: mean NLL per model token of that step's batch
    samples: int = 0
    model_tokens: int = 0
    seconds: float = 0.0


def train_sft(model: torch.nn.Module, samples: list[Sample], steps: int, lr: float, batch_size: int,
              micro_batch_tokens: int, train_top_layers: int = 0, bf16: bool = False, seed: int = 0,
              device: str = "cpu", on_step: Callable[[int, float], None] | None = None) -> SftReport:
    """`steps` AdamW steps of token-mean NLL on model tokens; batches drawn by shuffled passes over `samples`."""
    samples = [s for s in samples if sum(s.loss_mask) > 0]
    if not samples:
        raise ValueError("no expert samples to train on (did every expert episode fail?)")
    t0 = time.perf_counter()
    model.to(device).train()
    if train_top_layers > 0:
        freeze_below_top(model, train_top_layers)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = random.Random(seed)
    order: list[int] = []
    report = SftReport(samples=len(samples), model_tokens=sum(sum(s.loss_mask) for s in samples))
    for step in range(steps):
        if len(order) < batch_size:
            fresh = list(range(len(samples)))
            rng.shuffle(fresh)
            order += fresh
        batch = [samples[i] for i in order[:batch_size]]
        del order[:batch_size]
        n_tokens = sum(sum(s.loss_mask[1:]) for s in batch)
        opt.zero_grad(set_to_none=True)
        total, count = masked_nll_sum(model, batch, micro_batch_tokens, device, bf16, grad=True,
                                      scale=1.0 / max(n_tokens, 1))
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss = total / max(count, 1)
        report.losses.append(loss)
        if on_step is not None:
            on_step(step, loss)
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    report.seconds = time.perf_counter() - t0
    return report


# ---------------------------------------------------------------------------- the stage
# task settings that never reach the SFT stage (it imitates the experts; the reward RL trains on is not used):
# left out of the cache key, so adding one does not move the cached model, nor the study's committed start model
_NOT_SFT_KEYS = frozenset({"train_reward"})


def sft_key(cfg: Config, slots: list[TaskSlot]) -> str:
    s = to_dict(cfg.sft)
    if not s.get("tasks_from"):
        s.pop("tasks_from", None)  # unset: the key of every setting cached before the field existed
    tasks = [{k: v for k, v in to_dict(x.cfg).items() if k not in _NOT_SFT_KEYS
              and (k != "max_new_tokens" or v is not None)} for x in slots]
    parts = [cfg.model.name, s, cfg.run.seed, to_dict(cfg.rollout), tasks]
    if cfg.env.action_format != "tags":  # demos in another format; the tags format keeps every cached key
        parts.append({"action_format": cfg.env.action_format})
    key = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def run_sft(cfg: Config, slots: list[TaskSlot], out: Path, pool: EnvPool | None = None,
            on_step: Callable[[int, float], None] | None = None) -> dict:
    """Generate the demonstrations, train, save the model (+ tokenizer) to `out`; return a JSON-able report."""

    torch.manual_seed(cfg.run.seed)
    tokenizer = load_tokenizer(cfg.model.name)
    own_pool = pool is None
    pool = pool or LocalEnvPool()
    try:
        t0 = time.perf_counter()
        samples, per_task = expert_samples(cfg, slots, tokenizer, pool, cfg.sft.episodes)
        demo_s = time.perf_counter() - t0
        for line in over_budget_warnings(per_task):
            print(line, file=sys.stderr, flush=True)
    finally:
        if own_pool:
            pool.close()
    model = load_model(cfg.model.name, "float32", "cpu")
    s = cfg.sft
    # the loss is reported per step (the first step's is the base model's); no extra full passes: on a small CPU
    # one pass over the demos costs as much as several steps
    report = train_sft(model, samples, s.steps, s.lr, s.batch_size, s.micro_batch_tokens, s.train_top_layers,
                       cfg.learner.bf16_autocast_cpu, cfg.run.seed, on_step=on_step)
    tail = report.losses[-max(len(report.losses) // 5, 1):]
    before, after = report.losses[0], sum(tail) / len(tail)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    info = {"base_model": cfg.model.name, "steps": s.steps, "loss_first_step": before,
            "loss_last_steps": after, "losses": report.losses, "samples": report.samples,
            "model_tokens": report.model_tokens, "per_task": per_task, "demo_seconds": demo_s,
            "train_seconds": report.seconds}
    (out / "sft.json").write_text(json.dumps(info, indent=1))
    return info


def sft_source(cfg: Config, slots: list[TaskSlot]) -> tuple[Config, list]:
    """The config and task slots the shared warm start is built from: `cfg` itself, or with `sft.tasks_from` that
    config's tasks and rollout settings (the pipeline's five tasks) under this config's model and `sft` section."""

    if not cfg.sft.tasks_from:
        return replace(cfg, run=replace(cfg.run, seed=0)), slots
    base = load_config(cfg.sft.tasks_from)
    src = replace(base, model=cfg.model, sft=replace(cfg.sft, tasks_from=""), run=replace(base.run, seed=0),
                  env=replace(base.env, action_format=cfg.env.action_format))
    return src, prepare_tasks(src)


def _sft_cache_name(cfg: Config, slots: list[TaskSlot]) -> tuple[str, Config, list[TaskSlot]]:
    """The SFT model's name in the cache, and the config and slots it is built from."""
    if cfg.sft.tasks_from:
        cfg, slots = sft_source(cfg, slots)
    return f"models/sft-{sft_key(cfg, slots)}", cfg, slots


def sft_model(cfg: Config, slots: list[TaskSlot], on_step: Callable[[int, float], None] | None = None) -> str:
    """The SFT model for this config (built once per setting in the cache); its folder."""

    name, cfg, slots = _sft_cache_name(cfg, slots)
    return str(cached_dir(name, lambda out: run_sft(cfg, slots, out, on_step=on_step)))


def sft_model_cached(cfg: Config, slots: list[TaskSlot]) -> bool:
    """Whether `sft_model` has this model already (it returns at once)."""

    return (cache_root() / _sft_cache_name(cfg, slots)[0]).exists()


def sft_model_in_stage(cfg: Config, slots: list[TaskSlot], progress: Progress) -> str:
    """`sft_model` as the stage "sft" of `progress`: the expert's demo episodes and the SFT steps are its lines."""

    progress.start("sft")
    # the expert plays them: the lines read "expert demo episodes k/n"
    with listen(progress.ticks("demo episodes")):
        model = sft_model(cfg, slots, on_step=lambda i, loss: progress.sft_step(i, cfg.sft.steps, loss))
    progress.finish("sft", None)
    return model


def warm_start(cfg: Config, progress: Progress | None = None) -> Config:
    """The config RL starts from: with `sft.steps > 0`, the (cached) SFT model as `model.name` and no SFT left to
    run, so the saved run config names the model the run really began with; else `cfg` itself. With `progress`,
    building the model (not finding it in the cache) is its stage "sft"."""
    if cfg.sft.steps <= 0:
        return cfg
    slots = prepare_tasks(cfg)
    if progress is None or sft_model_cached(cfg, slots):
        model = sft_model(cfg, slots)
    else:
        model = sft_model_in_stage(cfg, slots, progress)
    return replace(cfg, model=replace(cfg.model, name=model), sft=replace(cfg.sft, steps=0))
