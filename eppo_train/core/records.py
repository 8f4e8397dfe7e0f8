"""The records that flow one way through the learner: rollout -> `Sample`s -> advantages -> loss.

The rollout creates them; later stages never change one: advantages.py returns copies with `advantage` set, and
the learner keeps its recomputed old log-probs in copies of its own (the same locally and through Ray).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sample:
    """One training sequence: a prompt followed by model and env tokens, as the learner will see it.

    In `full` context mode there is one Sample per episode (the whole chat transcript); in `window` mode one per
    turn (the system and first user message plus the last k exchanges as context, the current response as the only
    masked-in span).
    """

    task: str  # "alfworld", "webshop", ...: the key EPPO paces by
    group_id: str  # GRPO group: the same (env_id, split, seed) sampled G times
    episode_id: str  # unique per episode in the batch
    turn_index: int  # which turn this sample trains (-1: every turn, full mode)
    input_ids: list[int]
    loss_mask: list[int]  # 1 on tokens the model generated, 0 on prompt / env text / chat-template scaffolding
    old_logprobs: list[float]  # log-prob of each token under the sampling policy (0.0 where loss_mask is 0)
    reward: float  # the episode's return (shared by every turn of the episode)
    won: bool = False
    num_turns: int = 0
    advantage: float = 0.0  # set on the copies advantages.compute_advantages returns; broadcast over its tokens
    meta: dict = field(default_factory=dict)

    @property
    def num_response_tokens(self) -> int:
        return sum(self.loss_mask)
