"""TRL's GRPOTrainer on EPPO tasks, CPU, a few minutes: the tiny model on GuessNumber and MathTool.

    python examples/trl_grpo.py                       # in-process envs
    python examples/trl_grpo.py --url-guess http://127.0.0.1:PORT   # GuessNumber through `eppo-envs serve`

A random tiny model never writes `<answer>N</answer>`, so every GRPO group would score 0 and nothing would be
learned; a short warm start on the env's own expert replies (a few seconds) fixes the format first. GuessNumber
on 1..3 then gives groups with different rewards; MathTool stays at 0 for a model this small (its rows are
trained on anyway, and logged under their own reward name). Writes OUT/summary.json: per-step env rewards, the
played episodes, and how far the weights moved.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from datasets import concatenate_datasets  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import eppo_envs  # noqa: E402
import eppo_envs.example.guess_number  # noqa: E402, F401
from eppo_envs.core.base import first_prompt  # noqa: E402
from eppo_envs.integrations.trl import EppoRollout, env_reward_funcs, episode_dataset, open_env  # noqa: E402
from eppo_train.policy.models import resolve_model  # noqa: E402

GUESS = ("example/GuessNumber-v0", {"low": 1, "high": 3})
MATH = ("eppo/MathTool-v0", {})


def warm_start(model, tokenizer, env_id: str, env_kwargs: dict, url: str | None, steps: int, lr: float) -> list[float]:
    """Teach the reply format: next-token loss on the expert's first reply (only the reply's tokens)."""
    env = open_env(env_id, url, **env_kwargs)
    pairs = []
    for seed in range(16):
        obs, info = env.reset(seed=seed, options={"split": "train"})
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": first_prompt(obs, info)}],
                                               tokenize=False, add_generation_prompt=True)
        reply = env.unwrapped.expert_action()
        pairs.append((tokenizer(prompt, add_special_tokens=False)["input_ids"],
                      tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]))
    env.close()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    model.train()
    for step in range(steps):
        prompt_ids, reply_ids = pairs[step % len(pairs)]
        ids = torch.tensor([prompt_ids + reply_ids])
        labels = torch.tensor([[-100] * len(prompt_ids) + reply_ids])
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="'tiny', 'default' (SmolLM2-135M-Instruct) or a folder")
    parser.add_argument("--steps", type=int, default=4, help="GRPO optimizer steps")
    parser.add_argument("--warm-start-steps", type=int, default=100)
    parser.add_argument("--url-guess", default=None, help="play GuessNumber through this `eppo-envs serve` URL")
    parser.add_argument("--url-math", default=None, help="play MathTool through this server URL")
    parser.add_argument("--out", default="runs/trl_grpo")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    t0 = time.perf_counter()
    warm = warm_start(model, tokenizer, GUESS[0], GUESS[1], args.url_guess, args.warm_start_steps, 3e-3)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    # Interleave the tasks so every step's batch has a GuessNumber and a MathTool episode (2 prompts x 4 samples).
    guess = episode_dataset(GUESS[0], range(args.steps * 2), url=args.url_guess, **GUESS[1])
    math = episode_dataset(MATH[0], range(args.steps * 2), url=args.url_math, **MATH[1])
    rows = [d[i] for i in range(len(guess)) for d in (guess, math)]
    dataset = concatenate_datasets([guess.select([]), math.select([])]).from_list(rows)

    rollout = EppoRollout(max_turns=3, max_new_tokens=12, max_completion_tokens=256)
    config = GRPOConfig(
        output_dir=str(out / "trainer"), max_steps=args.steps, per_device_train_batch_size=8, num_generations=4,
        gradient_accumulation_steps=1, learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, bf16=False, max_completion_length=256, shuffle_dataset=False, seed=args.seed,
        temperature=1.0, beta=0.0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=env_reward_funcs(["guess_number", "math"]), args=config,
                          train_dataset=dataset, processing_class=tokenizer, rollout_func=rollout)
    trainer.train()
    rollout.close()

    moved = max((p.detach() - before[name]).abs().max().item() for name, p in model.named_parameters())
    summary = {
        "model": path, "steps": args.steps, "seconds": time.perf_counter() - t0,
        "warm_start_loss": [warm[0], warm[-1]] if warm else [],
        "max_weight_change": moved,
        "log_history": trainer.state.log_history,
        "episodes": [vars(e) | {"total_reward": e.total_reward} for e in rollout.logs],
        "tasks": sorted({e.task for e in rollout.logs}),
        "env_ids": sorted(eppo_envs.tasks()),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    rewards = [h.get("reward") for h in trainer.state.log_history if "reward" in h]
    print(f"{args.steps} GRPO steps in {summary['seconds']:.0f}s; mean env reward per step {rewards}; "
          f"max weight change {moved:.3g}; summary in {out / 'summary.json'}")
    return summary


if __name__ == "__main__":
    main()
