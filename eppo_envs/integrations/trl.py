"""EPPO tasks in TRL's `GRPOTrainer` (TRL 1.16), local or served (`url=`), with the reward taken from the env.

Two of TRL's documented hooks:
- `rollout_func(...)`: plays whole multi-turn episodes with the trainer's own model for any chat model (our tasks
  take tagged text such as `<answer>42</answer>`, not JSON tool calls). It returns TRL's `prompt_ids`,
  `completion_ids`, `logprobs`, an `env_mask` (model tokens 1, observation tokens 0: only the model's tokens are
  trained) and, per episode, `env_reward` and `task`, which `env_reward_funcs` hand back as the reward.
- `environment_factory(...)`: for models whose chat template does tool calls; each instance exposes one tool,
  `act(reply)`, and `get_reward()` (the episode's total env reward).
Rows of `episode_dataset` name the episode (task id, split, seed), so every completion of a GRPO group plays the
same instance.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from eppo_envs.core.base import first_prompt
from eppo_envs.core.registry import make

if TYPE_CHECKING:
    from datasets import Dataset

EPISODE_KEY = "eppo_episode"  # extra key on the first prompt message: which episode this prompt starts


def open_env(env_id: str, url: str | None = None, **env_kwargs: Any) -> gym.Env:
    """The task in-process, or through the server at `url` (then `env_id` only labels it)."""
    if url:
        from eppo_envs.remote import connect

        return connect(url)
    return make(env_id, **env_kwargs)


def episode_dataset(env_id: str, seeds: Sequence[int], split: str = "train", url: str | None = None,
                    **env_kwargs: Any) -> Dataset:
    """A `datasets.Dataset` with one row per episode: `prompt` (the first user message), `env_id`, `split`, `seed`."""
    from datasets import Dataset

    env = open_env(env_id, url, **env_kwargs)
    rows = []
    try:
        for seed in seeds:
            obs, info = env.reset(seed=seed, options={"split": split})
            tag = json.dumps({"env_id": env_id, "split": split, "seed": int(seed), "url": url, "kwargs": env_kwargs})
            rows.append({"prompt": [{"role": "user", "content": first_prompt(obs, info), EPISODE_KEY: tag}],
                         "env_id": env_id, "task": info["task"], "split": split, "seed": int(seed)})
    finally:
        env.close()
    return Dataset.from_list(rows)


@dataclass
class EpisodeLog:
    """One played episode, kept so a caller can check (or replay) where each reward came from."""

    env_id: str
    split: str
    seed: int
    task: str
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    won: bool = False

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))


class EppoRollout:
    """`rollout_func` for `GRPOTrainer`: one episode per prompt, generated turn by turn with `trainer.model`."""

    def __init__(self, max_turns: int = 4, max_new_tokens: int = 32, max_completion_tokens: int = 512,
                 keep_logs: bool = True) -> None:
        self.max_turns, self.max_new_tokens, self.max_completion_tokens = max_turns, max_new_tokens, max_completion_tokens
        self.keep_logs = keep_logs
        self.logs: list[EpisodeLog] = []
        self._envs: dict[str, gym.Env] = {}

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
        import torch

        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        was_training = model.training
        model.eval()
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "task")}
        try:
            with torch.no_grad():
                for prompt in prompts:
                    episode = self._play(prompt, model, tokenizer, float(getattr(trainer, "temperature", 1.0) or 1.0))
                    for key, value in episode.items():
                        out[key].append(value)
        finally:
            model.train(was_training)
        return out

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()

    # -----------------------------------------------------------------
    def _env(self, tag: dict[str, Any]) -> gym.Env:
        key = json.dumps([tag["env_id"], tag.get("url"), tag.get("kwargs")], sort_keys=True)
        if key not in self._envs:
            self._envs[key] = open_env(tag["env_id"], tag.get("url"), **(tag.get("kwargs") or {}))
        return self._envs[key]

    def _play(self, prompt: list[dict], model: Any, tokenizer: Any, temperature: float) -> dict[str, Any]:
        import torch

        tag = json.loads(prompt[0][EPISODE_KEY])
        env = self._env(tag)
        obs, info = env.reset(seed=tag["seed"], options={"split": tag["split"]})
        messages = [{"role": "user", "content": first_prompt(obs, info)}]
        log = EpisodeLog(tag["env_id"], tag["split"], tag["seed"], info["task"])
        prompt_ids = self._render(tokenizer, messages, generation_prompt=True)
        sequence = list(prompt_ids)
        completion: list[int] = []
        logprobs: list[float] = []
        mask: list[int] = []
        eos = tokenizer.eos_token_id
        for _ in range(self.max_turns):
            budget = min(self.max_new_tokens, self.max_completion_tokens - len(completion))
            if budget <= 0:
                break
            generated = model.generate(
                torch.tensor([sequence]), attention_mask=torch.ones(1, len(sequence), dtype=torch.long),
                max_new_tokens=budget, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                output_scores=True, return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id or eos,
            )
            new = generated.sequences[0, len(sequence):].tolist()
            scores = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(generated.scores, new, strict=False)]
            completion += new
            logprobs += scores
            mask += [1] * len(new)
            sequence += new
            reply = tokenizer.decode(new, skip_special_tokens=True)
            obs, reward, terminated, truncated, info = env.step(reply)
            log.actions.append(reply)
            log.rewards.append(float(reward))
            log.won = log.won or bool(info.get("won"))
            if terminated or truncated:
                break
            # The observation and the next turn's scaffolding, as the chat template writes them: context, not trained.
            before = self._render(tokenizer, messages, generation_prompt=True, as_text=True) + reply
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
            after = self._render(tokenizer, messages, generation_prompt=True, as_text=True)
            suffix = after[len(before):] if after.startswith(before) else after
            env_ids = tokenizer(suffix, add_special_tokens=False)["input_ids"]
            if new and new[-1] == eos and env_ids[:1] == [eos]:
                env_ids = env_ids[1:]  # the model already closed its turn
            if len(completion) + len(env_ids) >= self.max_completion_tokens:
                break
            completion += env_ids
            logprobs += [0.0] * len(env_ids)
            mask += [0] * len(env_ids)
            sequence += env_ids
        if self.keep_logs:
            self.logs.append(log)
        return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": logprobs, "env_mask": mask,
                "env_reward": log.total_reward, "task": log.task}

    @staticmethod
    def _render(tokenizer: Any, messages: list[dict], generation_prompt: bool, as_text: bool = False):
        clean = [{"role": m["role"], "content": m["content"]} for m in messages]
        text = tokenizer.apply_chat_template(clean, tokenize=False, add_generation_prompt=generation_prompt)
        return text if as_text else tokenizer(text, add_special_tokens=False)["input_ids"]


def env_reward_funcs(tasks: Sequence[str]) -> list[Callable[..., list[float | None]]]:
    """One reward function per task: the env's episode reward for that task's rows, None for the others, so TRL
    logs `rewards/env_reward_<task>/mean` per task and sums them into one reward per completion."""
    funcs = []
    for task in tasks:
        def reward(prompts=None, completions=None, env_reward=None, task=None, _task=task, **kwargs):
            return [float(r) if t == _task else None for r, t in zip(env_reward, task, strict=True)]

        reward.__name__ = f"env_reward_{task}"
        funcs.append(reward)
    return funcs


class EppoToolEnv:
    """An `environment_factory` instance: TRL calls `reset(**row)`, exposes `act` as the model's tool, and scores
    the rollout with `get_reward()`. Needs a model whose chat template supports tool calling."""

    def __init__(self, env_id: str, url: str | None = None, **env_kwargs: Any) -> None:
        self._env = open_env(env_id, url, **env_kwargs)
        self._total = 0.0
        self._done = False

    def reset(self, seed: int | None = None, split: str | None = None, **row: Any) -> str:
        obs, info = self._env.reset(seed=seed, options={"split": split} if split else None)
        self._total, self._done = 0.0, False
        return first_prompt(obs, info)

    def act(self, reply: str) -> str:
        """Send your move to the environment and read its answer.

        Args:
            reply: Your move, written the way the task's instructions say (for example `<answer>42</answer>`).

        Returns:
            The environment's answer; it says when the episode is over.
        """
        if self._done:
            return "The episode is over."
        obs, reward, terminated, truncated, _ = self._env.step(reply)
        self._total += float(reward)
        self._done = bool(terminated or truncated)
        return obs + ("\n(The episode is over.)" if self._done else "")

    def get_reward(self) -> float:
        return self._total


def environment_factory(env_id: str, url: str | None = None, **env_kwargs: Any) -> Callable[[], EppoToolEnv]:
    """`GRPOTrainer(environment_factory=environment_factory("eppo/MathTool-v0"))`: one env per rollout."""
    return lambda: EppoToolEnv(env_id, url, **env_kwargs)
