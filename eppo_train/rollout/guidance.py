"""Expert-guided groups (`algo.expert_guidance`): a group whose members all lost gets one more member, the task
expert's episode of the same problem, when the expert wins it.

Why: GRPO learns only from groups whose rewards differ, and a group that only loses has none; the policy is never
shown a win it does not sample itself. An expert win in that group gives it one (off-policy guidance, as in LUFFY,
Yan et al. 2025): with Dr. GRPO advantages the expert member gets `1 - 1/(G+1)` and each losing member
`-1/(G+1)`, so the update raises the expert's replies where the policy fails and lowers what it did instead.

The expert plays through the same rollout loop as the policy (`ExpertTokenAgent`, as SFT's demonstrations), so its
sample has the policy's chat format and token boundaries. An expert episode is kept only if it won and each of its
replies fits the task's reply budget (a reply the policy could not have finished is nothing to raise). Its
sampling log-probs are unknown (0); the learner recomputes every sample's old log-probs with the training model
(`learner.recompute_old_logprobs`, required), so the expert's ratios start at 1 like any sample's. Training
success and the rollout metrics count the policy's own episodes only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from eppo_train.core.records import Sample
from eppo_train.policy.agents import ExpertTokenAgent
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout

EXPERT_MEMBER = "expert"  # the guided member's suffix in its episode id: `<group id>#expert`


@dataclass
class Guidance:
    samples: list[Sample]  # the expert members' samples, to add to the iteration's batch
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)  # losing groups and guided groups per task


def losing_groups(samples: list[Sample]) -> list[Problem]:
    """The problems of the groups in which no member won, in the order first seen."""
    won: dict[str, bool] = {}
    problems: dict[str, Problem] = {}
    for s in samples:
        won[s.group_id] = won.get(s.group_id, False) or s.won
        problems.setdefault(s.group_id, Problem(s.meta["env_id"], s.meta["split"], s.meta["seed"]))
    return [problems[g] for g, w in won.items() if not w]


def expert_guidance(samples: list[Sample], pool: Any, tokenizer: Any, rc: RolloutConfig,
                    max_reply_tokens: int) -> Guidance:
    """Play the expert on every losing group's problem; return its winning episodes as extra group members."""
    losing = losing_groups(samples)
    per_task: dict[str, dict[str, float]] = defaultdict(lambda: {"losing_groups": 0.0, "guided_groups": 0.0})
    task_of = {s.group_id: s.task for s in samples}
    for p in losing:
        per_task[task_of[p.group_id]]["losing_groups"] += 1
    if not losing:
        return Guidance([], dict(per_task))
    # an episode with a reply over its task's budget is dropped below (the expert's replies are not cut)
    result = run_rollout(ExpertTokenAgent(tokenizer), pool, losing, rc.for_expert(max_reply_tokens))
    fits: dict[str, bool] = {}
    for s in result.samples:
        budget = rc.reply_budget(s.meta["env_id"])
        fits[s.group_id] = fits.get(s.group_id, True) and s.won and max(_reply_lengths(s)) <= budget
    for group_id in (g for g, ok in fits.items() if ok):
        per_task[task_of[group_id]]["guided_groups"] += 1
    guided = [replace(s, episode_id=f"{s.group_id}#{EXPERT_MEMBER}") for s in result.samples if fits[s.group_id]]
    return Guidance(guided, dict(per_task))


def _reply_lengths(sample: Sample) -> list[int]:
    """Tokens of each reply in a sample: every span of a whole-episode sample, or the one reply of a window."""
    spans = sample.meta.get("turn_spans")
    return [end - start for start, end in spans] if spans else [sum(sample.loss_mask)]
