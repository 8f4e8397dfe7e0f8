"""Entropy pacing (EPPO): a per-task clip range set from each task's token entropy relative to the others.

As implemented (docs/design.md, "Entropy pacing"), step by step:
  1. H_k: mean token entropy over task k's response tokens in this batch, from the learner's no-grad pass of the
     training model (the sampling policy's weights, before this step's updates).
  2. H^_k <- beta * H^_k + (1 - beta) * H_k (the first observation initialises H^_k, so no bias towards 0).
  3. z_k = log(H^_k / R_k), with the reference R_k (`reference`):
       mean     the arithmetic mean of the warm tasks' H^_j (the high-entropy tasks dominate it),
       geomean  their geometric mean, exp(mean_j log H^_j): z is centred in log space, so a task's z moves by
                the log of its own entropy's change, whichever task it is,
       self     the task's own slow baseline B_k <- self_beta * B_k + (1 - self_beta) * H^_k (lagging one batch;
                self_beta 1: the task's first entropy): z_k says whether task k's entropy is now below or above
                its own earlier level (collapsing, or pushed back up), whatever the other tasks do,
       pace     both: z_k = log(H^_k / B_k) - mean_j log(H^_j / B_j), a task's own change compared with the
                warm tasks' changes, so a task collapsing faster than the others is tightened and one falling
                slower is loosened, whatever each task's natural entropy level;
     c_k = 1 + lam * (2 * sigmoid(alpha * z_k) - 1), so c_k is in (1-lam, 1+lam) and 1 where z_k = 0.
  4. eps_low,k = clamp(c_k * eps_low), eps_high,k = clamp(c_k * eps_high); the base bounds for a task's first
     `warmup` batches. The warm-up counts each task's own batches, not the learner's steps: a task absent from the
     first steps (all its groups without reward variance, so filtered) would otherwise be paced from one batch.
     Until a task is warm its EMA does not enter the others' reference mean either.
A task whose entropy fell below the others (over-confident) gets a tighter range and learns more cautiously; one
still exploring gets a looser one. Variants scale both bounds, only the high one, only the low one, or pace towards
a per-task target entropy (z_k = log(H^_k / target_k)). Crossovers (sign changes of H^_i - H^_j) and spikes
(H_k(t) > (1 + tau) * H^_k(t-1)) are counted for the plots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

from eppo_train.core.registry import setting

PACING_VARIANTS = ("both", "high", "low", "target")  # pacing.variant
PACING_REFERENCES = ("mean", "geomean", "self", "pace")  # pacing.reference


@dataclass
class PacingConfig:
    variant: str = setting(
        "both", help="which bounds are paced: both | high | low; target: both, towards a target entropy per task "
        "(target_entropy) instead of the reference")
    reference: str = setting(
        "geomean", help="what a task's entropy is compared with: mean (the warm tasks' arithmetic mean), geomean "
        "(their geometric mean), self (the task's own slow baseline, self_beta), pace (the task's change from "
        "its baseline against the other tasks' changes)")
    beta: float = setting(0.5, help="EMA weight of the past in H^_k")
    self_beta: float = setting(
        0.9, help="references 'self' and 'pace': EMA weight of the past in a task's baseline (1: its first entropy)")
    warmup: int = setting(2, help="batches of a task at the base bounds (counted per task)")
    lam: float = setting(0.5, help="lambda: the largest relative change of a bound")
    alpha: float = setting(1.0, help="steepness of the sigmoid on the log-ratio z_k")
    eps_min: float = setting(0.05, help="every paced bound is clamped to [eps_min, eps_max]")
    eps_max: float = setting(0.5, help="upper clamp of every paced bound")
    tau: float = setting(0.5, help="spike threshold: H_k(t) > (1 + tau) * H^_k(t-1)")
    target_entropy: dict[str, float] = setting(factory=dict, help="variant 'target': task -> target nats")
    default_target: float = setting(
        0.5, help="variant 'target': the target entropy (nats) of a task not in target_entropy")


@dataclass
class PaceStep:
    bounds: dict[str, tuple[float, float]]  # task -> (eps_low, eps_high) for this step's loss
    ema: dict[str, float]  # H^_k after this step's update
    scale: dict[str, float]  # c_k (1.0 during warm-up)
    crossovers: list[tuple[str, str]] = field(default_factory=list)  # pairs whose EMA order flipped this step
    spikes: list[str] = field(default_factory=list)  # tasks whose entropy spiked this step


class EntropyPacer:
    def __init__(self, cfg: PacingConfig, eps_low: float, eps_high: float) -> None:
        self.cfg = cfg
        self.eps_low, self.eps_high = eps_low, eps_high
        self.step = 0  # updates done
        self.ema: dict[str, float] = {}
        self.baseline: dict[str, float] = {}  # reference "self": B_k, the slow EMA of H_k up to the last batch
        self.seen: dict[str, int] = {}  # task -> batches that carried it
        self.signs: dict[str, int] = {}  # "a|b" -> sign of H^_a - H^_b at the last step it was nonzero
        self.crossovers = 0
        self.spikes = 0

    # ------------------------------------------------------------------ the schedule
    def _target(self, task: str) -> float:
        return self.cfg.target_entropy.get(task, self.cfg.default_target)

    def warm(self, task: str) -> bool:
        """Whether `task` has been seen in more than `warmup` batches (its EMA is past its first values)."""
        return self.seen.get(task, 0) > self.cfg.warmup

    def scale(self, task: str) -> float:
        """c_k from the current EMA (1.0 for a task not seen yet)."""
        if task not in self.ema:
            return 1.0
        h = max(self.ema[task], 1e-8)
        warm = [max(v, 1e-8) for t, v in self.ema.items() if self.warm(t)] or [h]
        if self.cfg.variant == "target":
            z = math.log(h / max(self._target(task), 1e-8))
        elif self.cfg.reference == "self":
            z = self._own_change(task)
        elif self.cfg.reference == "pace":
            warm_tasks = [t for t in self.ema if self.warm(t)] or [task]
            z = self._own_change(task) - sum(self._own_change(t) for t in warm_tasks) / len(warm_tasks)
        elif self.cfg.reference == "geomean":
            z = math.log(h) - sum(math.log(v) for v in warm) / len(warm)
        else:
            z = math.log(h / (sum(warm) / len(warm)))
        # 2 sigmoid(x) - 1 written as tanh(x / 2): the same value, but exp(-x) overflows a float (OverflowError)
        # once alpha * |z| passes ~709, e.g. a steep alpha on a task whose entropy is near 0
        return 1.0 + self.cfg.lam * math.tanh(self.cfg.alpha * z / 2.0)

    def _own_change(self, task: str) -> float:
        """log(H^_k / B_k): how far the task's entropy has moved from its own baseline."""
        h = max(self.ema[task], 1e-8)
        return math.log(h / max(self.baseline.get(task, h), 1e-8))

    def bounds(self, task: str) -> tuple[float, float]:
        """(eps_low, eps_high) for `task` now: the base during its warm-up, then paced and clamped."""
        if not self.warm(task):
            return self.eps_low, self.eps_high
        c = self.scale(task)
        lo_c = 1.0 if self.cfg.variant == "high" else c
        hi_c = 1.0 if self.cfg.variant == "low" else c
        return self._clamp(lo_c * self.eps_low), self._clamp(hi_c * self.eps_high)

    def _clamp(self, eps: float) -> float:
        return min(max(eps, self.cfg.eps_min), self.cfg.eps_max)

    # ------------------------------------------------------------------ one update per learner step
    def update(self, entropies: dict[str, float]) -> PaceStep:
        """Fold this batch's per-task mean token entropy into the EMA; return the bounds for this step's loss."""
        spikes = [
            t for t, h in entropies.items() if t in self.ema and h > (1.0 + self.cfg.tau) * self.ema[t]
        ]
        b, sb = self.cfg.beta, self.cfg.self_beta
        for task, h in entropies.items():
            # the baseline lags the EMA by one batch, so a task's own change shows in z at once
            self.baseline[task] = self.ema.get(task, h) if task not in self.baseline else (
                sb * self.baseline[task] + (1.0 - sb) * self.ema[task])
            self.ema[task] = h if task not in self.ema else b * self.ema[task] + (1.0 - b) * h
            self.seen[task] = self.seen.get(task, 0) + 1
        self.step += 1
        crossed = self._count_crossovers()
        self.spikes += len(spikes)
        self.crossovers += len(crossed)
        tasks = sorted(self.ema)
        return PaceStep(
            bounds={t: self.bounds(t) for t in tasks},
            ema=dict(self.ema),
            scale={t: self.scale(t) if self.warm(t) else 1.0 for t in tasks},
            crossovers=crossed,
            spikes=spikes,
        )

    def _count_crossovers(self) -> list[tuple[str, str]]:
        crossed = []
        for a, b in combinations(sorted(self.ema), 2):
            diff = self.ema[a] - self.ema[b]
            sign = (diff > 0) - (diff < 0)
            key = f"{a}|{b}"
            if sign == 0:
                continue  # a tie is no crossing yet: remember the last strict order
            if key in self.signs and self.signs[key] != sign:
                crossed.append((a, b))
            self.signs[key] = sign
        return crossed

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "ema": dict(self.ema),
            "baseline": dict(self.baseline),
            "seen": dict(self.seen),
            "signs": dict(self.signs),
            "crossovers": self.crossovers,
            "spikes": self.spikes,
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
        self.ema = {k: float(v) for k, v in state["ema"].items()}
        self.baseline = {k: float(v) for k, v in state.get("baseline", self.ema).items()}
        # a checkpoint from before the per-task warm-up: every task it knows counts as seen at every step
        self.seen = {k: int(v) for k, v in state.get("seen", dict.fromkeys(self.ema, self.step)).items()}
        self.signs = {k: int(v) for k, v in state["signs"].items()}
        self.crossovers = int(state["crossovers"])
        self.spikes = int(state["spikes"])
