"""Dynamic sampling that refills (DAPO, Yu et al. 2025): a task short of groups with reward variance plays more.

GRPO learns only from groups whose members scored differently. DAPO's filter drops the others, and a hard task
(WebShop: a group with variance in 7-9 of 36 batches of probe 43) then gets almost no gradient. After the
iteration's rollout, `refill` counts each task's groups with variance (scored as the advantages will score them,
`env.tasks[].train_reward`) and, for each task below its floor (`env.tasks[].min_signal_groups`, default its
`problems`), plays one more round (`algo.refill`):

- `problems`: as many new problems of the task as it lacks groups, drawn from their own seed stream
  (`<iteration>/refill/<round>`, so a resumed run draws the same ones);
- `members`: G more members of that many of its groups without variance (the same problem again, members
  numbered on from the group's, sampled with another seed), so a group that only lost may find its first win.

Rounds repeat until every task reaches its floor or `algo.refill_rounds` rounds ran (the cap on the extra time).
The refill's episodes join the batch; the training success the trainer logs stays the first round's (refills are
not a random draw of the task's problems).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from eppo_train.algos.advantages import flat_groups
from eppo_train.config import Config
from eppo_train.core.records import Sample
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout
from eppo_train.rollout.task_slots import TaskSlot, train_problems

ROUND_SEED_STRIDE = 104_729  # round r samples with the iteration's seed + r x this (a prime: no overlap with turns)


@dataclass
class Refill:
    samples: list[Sample] = field(default_factory=list)  # the refill rounds' samples, to add to the batch
    episodes: list[Any] = field(default_factory=list)
    rounds: int = 0
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)  # refill_groups, signal_groups per task


def signal_groups(samples: list[Sample]) -> dict[str, int]:
    """task -> its groups with reward variance."""
    flat = flat_groups(samples)
    out: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        if s.group_id not in flat:
            out[s.task].add(s.group_id)
    return {t: len(g) for t, g in out.items()}


def floor(slot: TaskSlot) -> int:
    """The groups with variance a task should have in a batch (env.tasks[].min_signal_groups, else its problems)."""
    return slot.cfg.problems if slot.cfg.min_signal_groups is None else slot.cfg.min_signal_groups


def refill(cfg: Config, slots: list[TaskSlot], iteration: int, policy: Any, pool: Any, rc: RolloutConfig,
           samples: list[Sample], score: Callable[[list[Sample]], list[Sample]]) -> Refill:
    """Extra rollout rounds for the tasks short of signal (module docstring). `samples`: the iteration's batch so far;
    `score`: the training rewards (task_slots.training_rewards), so variance is judged as the advantages judge it."""
    out = Refill(per_task={s.label: {"refill_groups": 0.0} for s in slots})
    batch = list(samples)
    members = max([rc.group_size, *rc.group_sizes.values()])
    for r in range(cfg.algo.refill_rounds):
        have = signal_groups(score(batch))
        problems: list[Problem] = []
        for slot in slots:
            missing = floor(slot) - have.get(slot.label, 0)
            if missing <= 0:
                continue
            if cfg.algo.refill == "problems":
                new = train_problems(cfg, [slot], iteration, per_task=missing, stream=f"{iteration}/refill/{r}")
            else:
                flat = flat_groups(score([s for s in batch if s.task == slot.label]))
                seen = {s.group_id: Problem(s.meta["env_id"], s.meta["split"], s.meta["seed"]) for s in batch}
                new = [seen[g] for g in sorted(flat)[:missing]]
            problems += new
            out.per_task[slot.label]["refill_groups"] += float(len(new))
        if not problems:
            break
        round_rc = replace(rc, seed=None if rc.seed is None else (rc.seed + ROUND_SEED_STRIDE * (r + 1)) % 2**31,
                           first_member=members * (r + 1) if cfg.algo.refill == "members" else 0)
        result = run_rollout(policy, pool, problems, round_rc)
        out.samples += result.samples
        out.episodes += result.episodes
        batch += result.samples
        out.rounds = r + 1
    for label, n in signal_groups(score(batch)).items():
        out.per_task.setdefault(label, {"refill_groups": 0.0})["signal_groups"] = float(n)
    return out
