"""A short imitation warm start before RL: expert episodes, tokenized in the rollout's own chat format, trained
with the learner (advantage 1 on every expert token, old log-probs recomputed: the gradient is exactly that of
the mean negative log-likelihood).

A random or untuned model rarely writes a well-formed tool call, so every GRPO group has zero reward variance and
RL has nothing to learn from; a few imitation steps fix the format (DESIGN.md: expert demonstrations -> SFT warm
start -> EPPO). The result is cached by its settings, so repeated runs (tests) pay for it once.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace
from pathlib import Path

from eppo_train.config import Config, to_dict
from eppo_train.records import Sample


def expert_samples(slots, tokenizer, episodes: int, seed: int, system_prompt: str | None,
                   max_turns: int) -> list[Sample]:
    """Expert transcripts as training samples: env text masked out, expert replies (+ end of turn) masked in."""
    import eppo_envs
    from eppo_envs.core import first_prompt
    from eppo_train.policy.chat import ChatFormat

    fmt = ChatFormat(tokenizer, system_prompt)
    eos = tokenizer.eos_token_id
    out = []
    for slot in slots:
        env = eppo_envs.make(slot.env_id)
        rng = random.Random(f"{seed}/warm/{slot.label}")
        for k in range(episodes):
            obs, info = env.reset(seed=rng.randrange(2**31), options={"split": slot.cfg.split})
            ids = fmt.prompt_ids(fmt.start(first_prompt(obs, info)))
            mask = [0] * len(ids)
            for _ in range(slot.cfg.max_turns or max_turns):
                action = env.unwrapped.expert_action()
                reply = tokenizer(action, add_special_tokens=False)["input_ids"] + [eos]
                ids, mask = ids + reply, mask + [1] * len(reply)
                obs, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
                scaffold = fmt.turn_ids(obs, reply[-1])
                ids, mask = ids + scaffold, mask + [0] * len(scaffold)
            s = Sample(slot.label, f"warm/{slot.label}/{k}", f"warm/{slot.label}/{k}", -1, ids, mask,
                       [0.0] * len(ids), 1.0, won=True)
            s.advantage = 1.0
            out.append(s)
        env.close()
    return out


def warm_start(cfg: Config, slots) -> str:
    """Train `cfg.model.warm_start_steps` imitation steps from `cfg.model.name`; return the new model's folder."""
    from eppo_envs.core.cache import cached_dir
    from eppo_train.learner import Learner
    from eppo_train.policy.models import load_tokenizer

    m = cfg.model
    key = json.dumps([m.name, m.warm_start_steps, m.warm_start_lr, m.warm_start_episodes, cfg.run.seed,
                      cfg.rollout.system_prompt, cfg.rollout.max_turns, [to_dict(s.cfg) for s in slots]])
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]

    def build(out: Path) -> None:
        tokenizer = load_tokenizer(m.name)
        samples = expert_samples(slots, tokenizer, m.warm_start_episodes, cfg.run.seed, cfg.rollout.system_prompt,
                                 cfg.rollout.max_turns)
        sft = replace(cfg, algo=replace(cfg.algo, name="grpo", kl_coef=0.0),
                      learner=replace(cfg.learner, lr=m.warm_start_lr, epochs=1, mini_batches=1,
                                      train_top_layers=0, recompute_old_logprobs=True))
        learner = Learner(sft, device="cpu")
        for _ in range(m.warm_start_steps):
            learner.train_step(samples)
        learner.model.save_pretrained(str(out), safe_serialization=True)
        tokenizer.save_pretrained(str(out))

    return str(cached_dir(f"models/warm-{digest}", build))
