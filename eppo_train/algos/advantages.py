"""Advantage estimators, chosen by name (`algo.advantage`): grpo, task, gigpo.

- grpo: A = (R - mean_group R) / (std_group R + eps) (Shao et al. 2024); `scale_by_std=False` centres only
  (Dr. GRPO). A group is the G samples of one problem (`Sample.group_id`).
- task: group-centred as above, then normalised over all samples of the same task in the batch (AgentRL), so
  every task contributes gradients of the same scale whatever its reward range.
- gigpo: episode advantage (grpo) plus `weight` x a step advantage (options `algo.advantage_options`: weight,
  gamma): within a group, the turns that start from the same observation (the anchor state: `meta["state_key"]`,
  else the rollout's `meta["observation_hash"]` of a window sample, else the prompt tokens) are a step group,
  normalised on their discounted returns (Feng et al. 2025, GiGPO). Step groups need `context: window`; in `full`
  context an episode is one sample, every member starts from the same prompt, and gigpo is (1 + weight) x grpo.

Groups whose rewards are all equal carry no signal: they are counted (`zero_variance_groups`) and, with
`filter_zero_variance` (DAPO's dynamic sampling), dropped from the batch. `compute_advantages` returns new
`Sample`s; the rollout's records are never changed. An estimator is one function plus one `register_estimator`.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from eppo_train.core.records import Sample
from eppo_train.core.registry import ConfigError, Registry, check_entry, setting

EPS = 1e-6


@dataclass
class AdvantageResult:
    samples: list[Sample]  # the batch to train on (zero-variance groups dropped when filtering)
    stats: dict[str, float] = field(default_factory=dict)  # batch-level numbers for the metrics
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)  # task -> adv_mean/std/zero_var_frac


def _groups(samples: list[Sample]) -> dict[str, list[Sample]]:
    groups: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.group_id].append(s)
    return groups


def _episode_rewards(group: list[Sample]) -> dict[str, float]:
    """One reward per episode: in window mode an episode has several samples, it must count once."""
    return {s.episode_id: s.reward for s in group}


def _normalise(values: list[float], scale: bool) -> tuple[float, float]:
    mean = statistics.fmean(values)
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return mean, (std + EPS if scale else 1.0)


def grpo(samples: list[Sample], scale_by_std: bool = True, options: None = None) -> dict[int, float]:
    out: dict[int, float] = {}
    for group in _groups(samples).values():
        mean, div = _normalise(list(_episode_rewards(group).values()), scale_by_std)
        for s in group:
            out[id(s)] = (s.reward - mean) / div
    return out


def task_normalised(samples: list[Sample], scale_by_std: bool = True, options: None = None) -> dict[int, float]:
    centred = grpo(samples, scale_by_std=False)  # centre within the group first
    by_task: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_task[s.task].append(s)
    out: dict[int, float] = {}
    for group in by_task.values():
        per_episode = {s.episode_id: centred[id(s)] for s in group}  # window mode: an episode counts once here too
        mean, div = _normalise(list(per_episode.values()), True)
        for s in group:
            out[id(s)] = (centred[id(s)] - mean) / div
    return out


def state_key(s: Sample) -> str:
    """The anchor state of a sample: the observation it acts on (`meta["observation_hash"]` from the rollout,
    or `meta["state_key"]`), else its prompt tokens."""
    for key in ("state_key", "observation_hash"):
        if key in s.meta:
            return str(s.meta[key])
    first = s.loss_mask.index(1) if 1 in s.loss_mask else len(s.input_ids)
    return hashlib.sha1(str(s.input_ids[:first]).encode()).hexdigest()


def _step_returns(samples: list[Sample], gamma: float) -> dict[int, float]:
    """Window mode: each turn's sample carries its own `step_reward`; the discounted return from turn t is
    sum_{t' >= t} gamma^(t'-t) r_t' over the episode's samples."""
    episodes: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        if "step_reward" in s.meta and s.turn_index >= 0:
            episodes[s.episode_id].append(s)
    out: dict[int, float] = {}
    for turns in episodes.values():
        ret = 0.0
        for s in sorted(turns, key=lambda x: x.turn_index, reverse=True):
            ret = float(s.meta["step_reward"]) + gamma * ret
            out[id(s)] = ret
    return out


def step_return(s: Sample, gamma: float) -> float:
    """Discounted return from this turn: `meta["step_return"]` if known, else the final reward discounted."""
    if "step_return" in s.meta:
        return float(s.meta["step_return"])
    if s.turn_index < 0 or s.num_turns <= 0:
        return s.reward
    return s.reward * gamma ** max(s.num_turns - 1 - s.turn_index, 0)


@dataclass
class GigpoOptions:
    weight: float = setting(1.0, help="step-advantage weight")
    gamma: float = setting(0.95, help="discount of the step returns")

    def __post_init__(self) -> None:
        if not 0 <= self.gamma <= 1:
            raise ConfigError(f"algo.advantage_options.gamma: a discount in [0, 1], got {self.gamma}")
        if self.weight < 0:
            raise ConfigError(f"algo.advantage_options.weight: must be >= 0, got {self.weight}")


def gigpo(samples: list[Sample], scale_by_std: bool = True, options: GigpoOptions | None = None) -> dict[int, float]:
    opt = options or GigpoOptions()
    out = grpo(samples, scale_by_std=scale_by_std)
    known = _step_returns(samples, opt.gamma)
    for group in _groups(samples).values():
        steps: dict[str, list[Sample]] = defaultdict(list)
        for s in group:
            steps[state_key(s)].append(s)
        for step_group in steps.values():
            if len(step_group) < 2:
                continue  # a state visited once has no step-level baseline
            returns = [known.get(id(s), step_return(s, opt.gamma)) for s in step_group]
            mean, div = _normalise(returns, scale_by_std)
            for s, r in zip(step_group, returns, strict=True):
                out[id(s)] += opt.weight * (r - mean) / div
    return out


@dataclass(frozen=True)
class EstimatorSpec:
    fn: Callable[..., dict[int, float]]  # (samples, scale_by_std, options) -> advantage by id(sample)
    options: type | None = None  # the dataclass of its `algo.advantage_options` (None: it takes none)


def _check_estimator(name: str, spec: EstimatorSpec) -> None:
    """An estimator that cannot be called the way compute_advantages calls it is one line when it registers."""
    check_entry(spec, EstimatorSpec, f"register_estimator({name!r}, ...)", "fn", 1, ("scale_by_std", "options"))


ESTIMATORS: Registry[EstimatorSpec] = Registry("estimator", "algo.advantage", "algo.advantage_options",
                                               check=_check_estimator)
register_estimator = ESTIMATORS.register  # (name, EstimatorSpec): selectable as algo.advantage=<name>
estimator_options = ESTIMATORS.options  # (name, algo.advantage_options) -> the estimator's options dataclass


register_estimator("grpo", EstimatorSpec(grpo))
register_estimator("task", EstimatorSpec(task_normalised))
register_estimator("gigpo", EstimatorSpec(gigpo, GigpoOptions))


def _checked_values(name: str, values: object, samples: list[Sample]) -> dict[int, float]:
    """An estimator's result is one line naming it when it is not a finite number for every sample it was given:
    unchecked, a missing sample is a KeyError in the learner, and a NaN advantage trains silently into the weights."""
    form = f"advantage estimator {name!r}"
    if not isinstance(values, dict):
        raise ConfigError(f"{form} returned {type(values).__name__}; return {{id(sample): advantage}} for every sample")
    out: dict[int, float] = {}
    for s in samples:
        value = values.get(id(s))
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            got = "nothing" if id(s) not in values else repr(value)
            raise ConfigError(f"{form} gave {got} for a {s.task} sample; it must give a finite number for every "
                              f"sample, keyed by id(sample)")
        out[id(s)] = float(value)
    return out


def compute_advantages(
    samples: list[Sample],
    estimator: str = "grpo",
    scale_by_std: bool = True,
    filter_zero_variance: bool = False,
    options: dict[str, Any] | None = None,
) -> AdvantageResult:
    """New samples with `advantage` set (the input is left as it is); report (and optionally drop) groups with
    no reward variance. `options`: the estimator's own (`algo.advantage_options`)."""
    spec = ESTIMATORS.get(estimator)
    opts = estimator_options(estimator, options or {})
    groups = _groups(samples)
    flat = {gid for gid, g in groups.items() if len(set(_episode_rewards(g).values())) <= 1}
    chosen = [s for s in samples if s.group_id not in flat] if filter_zero_variance else list(samples)
    values = _checked_values(estimator, spec.fn(chosen, scale_by_std=scale_by_std, options=opts), chosen)
    kept = [replace(s, advantage=values[id(s)]) for s in chosen]

    per_task: dict[str, dict[str, float]] = {}
    for task in sorted({s.task for s in samples}):
        task_groups = {s.group_id for s in samples if s.task == task}
        advs = [s.advantage for s in kept if s.task == task]
        per_task[task] = {
            "adv_mean": statistics.fmean(advs) if advs else 0.0,
            "adv_std": statistics.pstdev(advs) if len(advs) > 1 else 0.0,
            "adv_abs_mean": statistics.fmean(abs(a) for a in advs) if advs else 0.0,
            "zero_var_frac": len(task_groups & flat) / max(len(task_groups), 1),
        }
    advs = [s.advantage for s in kept]
    stats = {
        "groups": float(len(groups)),
        "zero_variance_groups": float(len(flat)),
        "zero_variance_frac": len(flat) / max(len(groups), 1),
        "samples_kept": float(len(kept)),
        "adv_mean": statistics.fmean(advs) if advs else 0.0,
        "adv_std": statistics.pstdev(advs) if len(advs) > 1 else 0.0,
    }
    return AdvantageResult(kept, stats, per_task)
