"""The learner: log-probs and entropies of the sampled tokens, the chosen loss, AdamW, checkpoints.

One `train_step(samples)` per iteration (pass 1 is skipped when it could only repeat pass 2's first log-probs:
one optimizer step from the sampling weights with unpaced bounds, no KL reference, no frozen cache):
  1. a no-grad pass recomputes the old log-probs with the training model (bf16 sampling drifts from fp32, see
     docs/design.md) and the token entropies that give each task's H_k; the pacer turns them into per-task bounds.
     It runs the very micro-batches of the first epoch's optimizer passes (drawn first), so under bf16 autocast,
     where a row's log-probs depend on the batch it runs in, the first step's ratios are exactly 1;
  2. `epochs` x `mini_batches` optimizer steps; each mini-batch is split into micro-batches under a padded-token
     budget and its gradient accumulated with weights computed over the whole mini-batch (exact accumulation);
     grad-norm clipping, AdamW. Per task it counts the tokens the clip acts on at each bound (`clip_low_frac`:
     ratio < 1 - eps_low with a negative advantage; `clip_high_frac`: ratio > 1 + eps_high with a positive one)
     and the ratio's spread, whatever the loss.
With `staleness` = k > 0 the generator samples iteration t with the weights after step t - k (one-step-off and
asynchronous trainers sample with stale weights): the learner keeps its last k + 1 trainable weights, hands the
oldest to the generator (`sampling_weights`) and runs pass 1 with them, so the old log-probs are exactly the
sampling policy's and the ratio measures how far the learner has moved since.
The log-probs are those of the distribution each sample was drawn from: its recorded temperature, min-p and top-p
(algos/sampling.py). Pass 1 also compares them with the sampler's (the samples' `old_logprobs` as the rollout
recorded them): the mismatch metrics and, with `rollout_correction: tis`, each token's truncated importance weight,
which scales its advantage (algos/correction.py). Rows play a role (`meta["role"]`, algos/anchors.py): policy rows
take the loss, weighted per task (`meta["loss_weight"]`); anchor and demo rows add their own terms, outside the
policy rows' normaliser and the pacer's entropies. With `fp32_master`, a bf16 model's trained weights are stepped as
float32 copies (master.py); every step logs the share of trained weights whose bf16 value it changed.
Logits are only formed for the positions that predict a model token, a chunk of positions at a time (under
activation checkpointing when gradients are needed), so the vocabulary-sized tensor never exists for the batch.
With frozen bottom blocks (`train_top_layers`) and `cache_frozen`, pass 1 keeps each sample's hidden states at the
first trained block and pass 2 runs only the top blocks from them (frozen_cache.py).
"""

from __future__ import annotations

import copy
import random
import sys
import time
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from eppo_train.algos.anchors import anchor_terms
from eppo_train.algos.correction import truncated_weights
from eppo_train.algos.losses import (
    LOSSES,
    LossInputs,
    aggregate,
    checked_output,
    k3,
    loss_options,
    token_weights,
)
from eppo_train.algos.pacing import EntropyPacer, PaceStep
from eppo_train.algos.sampling import processed_logprobs
from eppo_train.config import Config
from eppo_train.core.records import ANCHOR, DEMO, POLICY, ROLES, Sample
from eppo_train.learner import checkpoint as ckpt
from eppo_train.learner import lora
from eppo_train.learner.distributed import Single, split_by_tokens
from eppo_train.learner.frozen_cache import (
    CHECK_ATOL,
    cache_start,
    capture_inputs,
    decoder_layers,
    pad_states,
    top_hidden,
    unpad,
)
from eppo_train.learner.fsdp import (
    checkpoint_blocks,
    copy_local,
    full,
    full_from_local,
    local,
    shard_model,
    shard_of,
)
from eppo_train.learner.master import MasterWeights, bf16_changed_share
from eppo_train.policy.models import load_model
from eppo_train.policy.precision import use_cpu_autocast


@dataclass
class StepReport:
    step: int
    metrics: dict[str, float] = field(default_factory=dict)  # batch-level: loss, grad_norm, tokens/s, ...
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)  # task -> entropy, ema, eps, clip_frac...
    pace: PaceStep | None = None


def freeze_below_top(model: torch.nn.Module, n: int) -> None:
    """Train only the top `n` blocks and the final norm: backward stops there (~2.3x faster on CPU)."""
    for p in model.parameters():
        p.requires_grad_(False)
    for block in decoder_layers(model)[-n:]:
        for p in block.parameters():
            p.requires_grad_(True)
    norm = getattr(model.base_model, "norm", None) or getattr(model.base_model, "ln_f", None)
    if norm is not None:
        for p in norm.parameters():
            p.requires_grad_(True)


def token_logprobs_entropy(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    chunk: int = 256,
    grad: bool = False,
    fp32_head: bool = False,
    top_p: float | torch.Tensor = 1.0,
    min_p: float | torch.Tensor = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob and entropy (fp32, nats) of every masked token, as [B, T] tensors (0 elsewhere).

    Token t is predicted from the hidden state at t-1; only masked positions reach the vocab projection.
    """
    # use_cache=False: a training forward never decodes further, so the KV cache HF builds by default is dead weight
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    return hidden_logprobs_entropy(model, hidden, input_ids, mask, temperature, chunk, grad, fp32_head, top_p, min_p)


def hidden_logprobs_entropy(
    model: torch.nn.Module,
    hidden: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    chunk: int = 256,
    grad: bool = False,
    fp32_head: bool = False,
    top_p: float | torch.Tensor = 1.0,
    min_p: float | torch.Tensor = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs_entropy` from the model's last hidden state [B, T, H] (after the final norm).

    `temperature`, `top_p`, `min_p`: the sampler's settings, one number or one per row ([B]); the log-probs are
    those of the tempered distribution cut by min-p and top-p and renormalised, as the sampler drew from it
    (algos/sampling.py); the entropy is the tempered distribution's, uncut.

    `fp32_head`: the vocab projection in float32 even under bf16 autocast. bf16 logits carry ~8 significant bits,
    an error of a few hundredths of a nat on a log-prob, as large as one RL step's change of it, so the PPO ratio
    would be mostly rounding noise (the LM head in fp32 is MiniMax-M1's fix of the same train/sample mismatch).
    """
    head = model.get_output_embeddings()
    where = mask[:, 1:] > 0
    states = hidden[:, :-1][where]  # [N, H]
    targets = input_ids[:, 1:][where]  # [N]

    def head_logits(h: torch.Tensor) -> torch.Tensor:
        if not fp32_head:
            return head(h).float()
        with torch.autocast(device_type=h.device.type, enabled=False):
            bias = None if head.bias is None else head.bias.float()
            return torch.nn.functional.linear(h.float(), head.weight.float(), bias)

    def per_token(value: float | torch.Tensor) -> torch.Tensor:
        """A setting per masked position (a row's value repeated over its tokens)."""
        if isinstance(value, torch.Tensor):
            rows = value.to(hidden.device, torch.float32)[:, None].expand(where.shape)
            return rows[where]
        return torch.full(targets.shape, float(value), device=hidden.device)

    temps, tops, mins = per_token(temperature), per_token(top_p), per_token(min_p)
    cut = bool((tops < 1).any() or (mins > 0).any())

    def project(h: torch.Tensor, t: torch.Tensor, temp: torch.Tensor, tp: torch.Tensor,
                mp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = head_logits(h) / temp[:, None]
        lse = torch.logsumexp(logits, dim=-1)
        lp = processed_logprobs(logits, t, tp, mp) if cut else logits.gather(1, t[:, None]).squeeze(1) - lse
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        return lp, ent

    lps, ents = [], []
    for s in range(0, states.shape[0], chunk):
        part = slice(s, s + chunk)
        h, t = states[part], targets[part]
        if grad and h.requires_grad:
            lp, ent = checkpoint(project, h, t, temps[part], tops[part], mins[part], use_reentrant=False)
        else:
            lp, ent = project(h, t, temps[part], tops[part], mins[part])
        lps.append(lp)
        ents.append(ent)
    logprobs = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    entropy = torch.zeros_like(logprobs)
    if lps:
        full = torch.zeros_like(logprobs[:, 1:])
        logprobs = torch.cat([logprobs[:, :1], full.masked_scatter(where, torch.cat(lps))], dim=1)
        entropy[:, 1:][where] = torch.cat(ents).detach()
    return logprobs, entropy


def autocast(device: str, bf16_cpu: bool = False) -> torch.autocast | nullcontext[None]:
    """bf16 autocast on a GPU always, on CPU when asked and the CPU has native bf16 (~1.6x faster there; emulated
    bf16 is ~100x slower, policy/precision.py); else full precision."""
    on_gpu = device.startswith("cuda")
    if on_gpu or use_cpu_autocast(bf16_cpu):
        return torch.autocast(device_type="cuda" if on_gpu else "cpu", dtype=torch.bfloat16)
    return nullcontext()


def pad_tokens(rows: list[Sample]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, attention mask, loss mask) as right-padded [B, T] tensors; position 0 never in the loss
    (nothing predicts the first token)."""
    width = max(len(s.input_ids) for s in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width)
    for r, s in enumerate(rows):
        n = len(s.input_ids)
        ids[r, :n] = torch.tensor(s.input_ids)
        attn[r, :n] = 1
        mask[r, :n] = torch.tensor(s.loss_mask, dtype=torch.float32)
    mask[:, 0] = 0.0
    return ids, attn, mask


def ratio_diagnostics(logprobs: torch.Tensor, b: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per row of a padded micro-batch: tokens the PPO clip acts on at the lower bound (ratio < 1 - eps_low with a
    negative advantage: pushing the ratio further down gains nothing) and at the upper bound (ratio > 1 + eps_high
    with a positive advantage), the sum of |ratio - 1|, of the ratio and of its square, and the largest ratio. The
    same numbers for every loss (for one without a clip, where the clip would have acted)."""
    mask = b["mask"] > 0
    ratio = torch.exp(logprobs - b["old"]).masked_fill(~mask, 1.0)
    low = (ratio < 1.0 - b["lo"]) & (b["adv"] < 0) & mask
    high = (ratio > 1.0 + b["hi"]) & (b["adv"] > 0) & mask
    m = b["mask"]
    return {"clip_low": low.sum(1).float(), "clip_high": high.sum(1).float(),
            "ratio_dev": ((ratio - 1.0).abs() * m).sum(1), "ratio_sum": (ratio * m).sum(1),
            "ratio_sq": (ratio.square() * m).sum(1), "ratio_max": ratio.masked_fill(~mask, 0.0).amax(1)}


def _std(total: float, squares: float, n: float) -> float:
    if n < 1:
        return 0.0
    mean = total / n
    return float(max(squares / n - mean * mean, 0.0) ** 0.5)


def micro_batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Indices grouped (length-sorted) so that rows x longest row <= budget tokens; at least one row each."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


class Scorer(torch.nn.Module):
    """`token_logprobs_entropy` as a module's forward: the root FSDP unit of a sharded model, so that a call gathers
    the embeddings and the head (the root's own parameters) and backward reduces their gradients."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor, temperature: float | torch.Tensor,
                chunk: int, grad: bool, fp32_head: bool, top_p: float | torch.Tensor = 1.0,
                min_p: float | torch.Tensor = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        return token_logprobs_entropy(self.model, ids, attn, mask, temperature, chunk, grad=grad, fp32_head=fp32_head,
                                      top_p=top_p, min_p=min_p)


class Learner:
    """The update of one rank. `group`: the learner's process group (`distributed.Group`, world size N: the model
    sharded with FSDP2, each rank the part of each mini-batch `split_by_tokens` gives it); None: one process."""

    def __init__(self, cfg: Config, model: torch.nn.Module | None = None, device: str | None = None,
                 group: Single | None = None) -> None:

        self.cfg = cfg
        self.group = group or Single()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch.manual_seed(cfg.run.seed)
        self.model = model if model is not None else load_model(cfg.model.name, cfg.model.dtype, self.device)
        self.model.to(self.device).train()
        if cfg.learner.train_top_layers > 0:
            freeze_below_top(self.model, cfg.learner.train_top_layers)
        # With LoRA, `model` stays the transformers model (peft injects the adapters into its projections) and
        # `adapted` is peft's wrapper, which saves them; the KL reference is the model with its adapters off.
        self.adapted = lora.attach(self.model, cfg.learner.lora) if cfg.learner.lora.r > 0 else None
        if cfg.learner.activation_checkpointing:
            checkpoint_blocks(self.model)
        # The first trained block when pass 2 may start there from states kept in pass 1 (frozen_cache.py); checked
        # against the full forward on the first micro-batch, None (the full forward every pass) otherwise. Off when
        # sharded: every rank must run the same FSDP units in the same order, whatever one rank's check finds.
        self.cache_from: int | None = None
        self._cache_checked = False
        if cfg.learner.cache_frozen and not self.group.sharded:
            self.cache_from, why = cache_start(self.model)
            if self.cache_from is None and cfg.learner.train_top_layers > 0:
                print(f"learner: frozen-layer cache off ({why}); every pass runs the full model", file=sys.stderr,
                      flush=True)
        self.ref = None
        # the start model's log-probs: the KL penalty, and the anchor that holds groups without signal
        self.uses_reference = cfg.algo.kl_coef > 0 or cfg.algo.anchor_kl > 0
        if self.uses_reference and self.adapted is None:
            self.ref = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.scorer = self.ref_scorer = None
        if self.group.sharded:
            bf16 = self.device.startswith("cuda") or use_cpu_autocast(cfg.learner.bf16_autocast_cpu)
            self.scorer = shard_model(Scorer(self.model), self.model, bf16)
            if self.ref is not None:
                self.ref_scorer = shard_model(Scorer(self.ref), self.ref, bf16)
        params = [p for p in self.model.parameters() if p.requires_grad]
        lc = cfg.learner
        # fp32 copies take the optimizer's steps where the trained weights are not float32 already (master.py)
        self.master = (MasterWeights(params) if lc.fp32_master and any(p.dtype != torch.float32 for p in params)
                       else None)
        self.optimizer = torch.optim.AdamW(self.master.master if self.master else params, lr=lc.lr, betas=lc.betas,
                                           weight_decay=lc.weight_decay)
        self.spec = LOSSES.get(cfg.algo.name)
        self.options = loss_options(cfg.algo.name, cfg.algo.options)  # the loss's own dataclass
        self.eps_low = cfg.algo.eps_low if cfg.algo.eps_low is not None else self.spec.eps_low
        self.eps_high = cfg.algo.eps_high if cfg.algo.eps_high is not None else self.spec.eps_high
        self.agg = cfg.algo.loss_agg or self.spec.agg
        # Every loss tracks H^_k, crossovers and spikes (to compare entropy dynamics); only paced ones use the bounds.
        self.pacer = EntropyPacer(cfg.pacing, self.eps_low, self.eps_high)
        self.rng = torch.Generator().manual_seed(cfg.run.seed)  # Clip-Cov's token choice, mini-batch shuffling
        # Sharded, every rank must draw the same plans from `rng`, and Clip-Cov draws as often as its micro-batches
        # (which differ by rank): its choice then comes from a generator of the rank's own
        self.loss_rng = self.rng if not self.group.sharded else \
            torch.Generator().manual_seed(cfg.run.seed + 7919 * (self.group.rank + 1))
        self.step = 0
        self._is_weights: dict[int, torch.Tensor] = {}  # sample position -> its importance weights (train_step)
        # the trainable weights after the last k + 1 steps, oldest first: [0] is what the generator samples with
        # (this rank's shards when sharded)
        self.history: deque[dict[str, torch.Tensor]] = deque([self._own_weights()], maxlen=cfg.learner.staleness + 1)

    # ------------------------------------------------------------------ helpers
    def _pad(self, samples: list[Sample], idx: list[int]) -> dict[str, torch.Tensor]:
        rows = [samples[i] for i in idx]
        ids, attn, mask = pad_tokens(rows)
        out = {k: torch.zeros(mask.shape) for k in ("old", "adv", "lo", "hi")}
        out["isw"] = torch.ones(mask.shape)  # truncated importance weights (rollout correction), 1 when off
        for r, s in enumerate(rows):
            n = len(s.input_ids)
            out["old"][r, :n] = torch.tensor(s.old_logprobs, dtype=torch.float32)
            out["adv"][r, :n] = s.advantage
            lo, hi = self._bounds.get(s.task, (self.eps_low, self.eps_high))
            out["lo"][r, :n], out["hi"][r, :n] = lo, hi
            if idx[r] in self._is_weights:
                out["isw"][r, :n] = self._is_weights[idx[r]]
        # per row: the sampler's settings (the rollout records them; older samples: the config's), role, task weight
        rc = self.cfg.rollout
        settings = [s.meta.get("sampling") or (rc.temperature, rc.top_p, rc.min_p) for s in rows]
        for k, key in enumerate(("temp", "top_p", "min_p")):
            out[key] = torch.tensor([float(x[k]) for x in settings])
        out["role"] = torch.tensor([ROLES.index(s.meta.get("role", POLICY)) for s in rows])
        out["w"] = torch.tensor([float(s.meta.get("loss_weight", 1.0)) for s in rows])
        out["ids"], out["attn"], out["mask"] = ids, attn, mask
        return {k: v.to(self.device) for k, v in out.items()}

    def _stats(self, model, b: dict[str, torch.Tensor], grad: bool,
               states: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies of a padded micro-batch: the full forward, or with `states` (each row's hidden
        states entering block `cache_from`) the top blocks only."""
        chunk, fp32_head = self.cfg.learner.logit_chunk, self.cfg.learner.fp32_head
        cut = {"top_p": b["top_p"], "min_p": b["min_p"]}  # the sampler's cut distribution (algos/sampling.py)
        with autocast(self.device, self.cfg.learner.bf16_autocast_cpu):
            if self.scorer is not None:  # sharded: through the root FSDP unit (no frozen cache then)
                scorer = self.ref_scorer if model is self.ref else self.scorer
                return scorer(b["ids"], b["attn"], b["mask"], b["temp"], chunk, grad, fp32_head, **cut)
            if states is None:
                return token_logprobs_entropy(model, b["ids"], b["attn"], b["mask"], b["temp"], chunk, grad=grad,
                                              fp32_head=fp32_head, **cut)
            assert self.cache_from is not None
            hidden = top_hidden(model, self.cache_from, pad_states(states, b["ids"].shape[1]), b["attn"])
            return hidden_logprobs_entropy(model, hidden, b["ids"], b["mask"], b["temp"], chunk, grad=grad,
                                           fp32_head=fp32_head, **cut)

    def _keep_states(self, seen: list[torch.Tensor], b: dict[str, torch.Tensor], lengths: list[int],
                     lp: torch.Tensor, ent: torch.Tensor) -> list[torch.Tensor] | None:
        """Pass 1: the rows' states entering the first trained block, unpadded; None when the cache is (now) off.

        Until one micro-batch has been compared, the cached path's log-probs and entropies are checked against the
        full forward's on this one; a model it does not reproduce keeps the full forward from then on."""
        try:
            if len(seen) != 1:
                raise RuntimeError(f"block {self.cache_from} ran {len(seen)} times in one forward")
            rows = unpad(seen[0], lengths)
            if not self._cache_checked:
                lp_c, ent_c = self._stats(self.model, b, grad=False, states=rows)
                where = b["mask"] > 0
                if where.any():
                    diff = float(torch.cat([(lp_c - lp)[where], (ent_c - ent)[where]]).abs().max())
                    if not diff <= CHECK_ATOL:  # NaN fails too
                        raise RuntimeError(f"its log-probs differ from the full forward's by {diff:.3g} nats "
                                           f"(tolerance {CHECK_ATOL:g})")
                    self._cache_checked = True
            return rows
        except Exception as exc:  # any failure of the cached path means: use the full forward
            print(f"learner: frozen-layer cache off, the full forward is used: {exc}", file=sys.stderr, flush=True)
            self.cache_from = None
            return None

    def _epoch_plan(self, samples: list[Sample]) -> list[tuple[list[int], list[list[int]]]]:
        """One epoch's mini-batches (a shuffle of the samples by the learner's seeded generator, in near-equal parts),
        each with this rank's micro-batches under the padded-token budget, as positions in the mini-batch.

        Every rank draws the same plan; sharded, each takes its token-balanced share of each mini-batch and pads its
        list of micro-batches with empty ones ([]: a forward and backward with no weight) to the longest rank's
        count, since each FSDP unit's gather and reduce are collectives every rank joins."""
        perm = torch.randperm(len(samples), generator=self.rng).tolist()
        parts = np.array_split(np.array(perm, dtype=int), min(self.cfg.learner.mini_batches, max(len(samples), 1)))
        budget, g = self.cfg.learner.micro_batch_tokens, self.group
        plan = []
        for part in parts:
            mb = [int(i) for i in part]
            if not mb:
                continue
            lengths = [len(samples[i].input_ids) for i in mb]
            shares = split_by_tokens(lengths, range(len(mb)), g.world)
            micro = [[[share[j] for j in idx] for idx in micro_batches([lengths[j] for j in share], budget)]
                     for share in shares]
            count = max(len(m) for m in micro)
            plan.append((mb, micro[g.rank] + [[] for _ in range(count - len(micro[g.rank]))]))
        return plan

    def _reference(self, b: dict[str, torch.Tensor], rows: list[torch.Tensor] | None) -> torch.Tensor | None:
        """Log-probs of the KL reference (the start model; with LoRA, this model with its adapters off)."""
        if not self.uses_reference:
            return None
        if self.adapted is not None:
            with self.adapted.disable_adapter():
                return self._stats(self.model, b, grad=False)[0]
        # The reference is a copy of the start model, and the blocks below `cache_from` are frozen: its states
        # entering that block are the training model's, so only its top blocks run (the KL penalty then costs the
        # trained blocks' forward, not a second full one).
        use = rows if rows is not None and self._cache_checked else None
        return self._stats(self.ref, b, grad=False, states=use)[0]

    def _idle_pass(self, samples: list[Sample], grad: bool) -> None:
        """A rank with no rows left in a mini-batch still joins every FSDP unit's collectives: one row through the
        model with no weight (pass 1: forward only; pass 2: a zero loss backward)."""
        row = min(range(len(samples)), key=lambda i: len(samples[i].input_ids))
        b = self._pad(samples, [row])
        if not grad:
            self._stats(self.model, b, grad=False)
            self._reference(b, None)
            return
        lp, _ = self._stats(self.model, b, grad=True)
        (lp * 0.0).sum().backward()

    # ------------------------------------------------------------------ the update
    def train_step(self, samples: list[Sample]) -> StepReport:
        """One iteration's update on a batch with advantages filled in. The samples are not changed: recomputed
        old log-probs live in copies local to this step. Sharded, every rank gets the whole batch and returns the
        same report (every sum reduced over ranks)."""
        t0 = time.perf_counter()
        samples = [s for s in samples if s.num_response_tokens > 0]
        lc, g = self.cfg.learner, self.group
        tasks = sorted({s.task for s in samples})
        # The first epoch's mini-batches and their micro-batches are drawn now, and the no-grad pass runs exactly
        # those: under bf16 autocast a row's log-probs depend on the batch it is computed in (padding width and
        # matmul shapes change the rounding; measured up to 0.2 nats on SmolLM2), so old log-probs from other
        # batches would make the first, on-policy step's ratios differ from 1 and the clip act on that noise.
        first = self._epoch_plan(samples)
        batches = [[mb[j] for j in idx] for mb, micro in first for idx in micro]
        self._bounds: dict[str, tuple[float, float]] = {}
        self._is_weights: dict[int, torch.Tensor] = {}
        roles = [s.meta.get("role", POLICY) for s in samples]
        mismatch: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        # One optimizer step on the batch from the weights that sampled it, bounds that do not depend on this batch's
        # entropies, no reference and no frozen-layer cache: the no-grad pass would recompute exactly the
        # log-probs the optimizer pass computes before its step (ratio 1), so the optimizer pass supplies the old
        # log-probs (detached) and the entropies itself, and pass 1 is skipped (as TRL does with one iteration).
        # The sampler/learner mismatch metrics need pass 1: with importance correction, anchors or replayed demos
        # it runs.
        one_pass = (lc.epochs == 1 and len(first) == 1 and not self.spec.paced and not self.uses_reference
                    and len(self.history) == 1 and self.cache_from is None and lc.recompute_old_logprobs
                    and lc.rollout_correction == "none" and all(r == POLICY for r in roles))
        if one_pass:
            batches = []

        # 1. no-grad pass: old log-probs under the training model, entropies (H_k), reference log-probs
        ent_sum: dict[str, float] = defaultdict(float)
        ref_kl_sum: dict[str, float] = defaultdict(float)  # KL(pi || ref) of the model before this step (k3)
        tok: dict[str, float] = defaultdict(float)
        ref_lp: dict[int, list[float]] = {}
        fresh_old: dict[int, list[float]] = {}
        cached: dict[int, torch.Tensor] = {}  # sample -> [n, H] states entering block cache_from
        capture = capture_inputs(self.model, self.cache_from) if self.cache_from is not None else nullcontext([])
        self.model.eval()
        with torch.no_grad(), self._sampling_policy(), capture as seen:
            for idx in batches:
                if not idx:
                    self._idle_pass(samples, grad=False)
                    continue
                b = self._pad(samples, idx)
                lp, ent = self._stats(self.model, b, grad=False)
                rows = None
                if self.cache_from is not None:
                    rows = self._keep_states(seen, b, [len(samples[i].input_ids) for i in idx], lp, ent)
                    if rows is not None:
                        cached.update(zip(idx, rows, strict=True))
                seen.clear()
                ref = self._reference(b, rows)
                for r, i in enumerate(idx):
                    s, n = samples[i], len(samples[i].input_ids)
                    m = b["mask"][r, :n]
                    if roles[i] == POLICY:  # H_k: the tokens the policy gradient trains (as before anchors)
                        ent_sum[s.task] += float((ent[r, :n] * m).sum())
                        tok[s.task] += float(m.sum())
                    if lc.recompute_old_logprobs:
                        fresh_old[i] = (lp[r, :n] * m).tolist()
                        if roles[i] != DEMO and s.meta.get("behaviour", "policy") == "policy":
                            # old = the sampler's log-probs here (not yet replaced): algos/correction.py
                            w, mm = truncated_weights(lp[r, :n], b["old"][r, :n], m, lc.tis_cap)
                            for key, value in vars(mm).items():
                                mismatch[s.task][key] += value
                            if lc.rollout_correction == "tis":
                                self._is_weights[i] = w
                    if ref is not None:
                        ref_lp[i] = ref[r, :n].tolist()
                        if roles[i] == POLICY:  # over the same tokens as H_k (anchor rows report anchor_kl)
                            ref_kl_sum[s.task] += float((k3(lp[r, :n], ref[r, :n]) * m).sum())
        self.model.train()
        if self.cache_from is None or not self._cache_checked:
            cached.clear()
        if g.sharded and not one_pass:
            # every rank's pacer steps on the global entropies; later epochs move rows between ranks, which then
            # need the old and reference log-probs another rank computed
            ent_sum, tok, ref_kl_sum = self._reduce_tasks(tasks, ent_sum, tok, ref_kl_sum)
            if lc.epochs > 1:
                fresh_old = {i: v for part in g.gather(fresh_old) for i, v in part.items()}
                ref_lp = {i: v for part in g.gather(ref_lp) for i, v in part.items()}
        if fresh_old:
            samples = [replace(s, old_logprobs=fresh_old.get(i, s.old_logprobs)) for i, s in enumerate(samples)]
        if not one_pass:
            entropy = {t: ent_sum[t] / max(tok[t], 1.0) for t in tok}
            pace = self.pacer.update(entropy)
            if self.spec.paced:
                self._bounds = dict(pace.bounds)

        # 2. optimizer steps
        acc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        aux: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # anchor and demo terms per task
        losses, norms = [], []
        for epoch in range(lc.epochs):
            plan = first if epoch == 0 else self._epoch_plan(samples)
            for mb, micro in plan:
                # the policy-gradient weights count policy rows only; anchor and demo rows have their own normalisers
                pg = [i for i in mb if roles[i] == POLICY]
                total_tokens = float(sum(samples[i].num_response_tokens for i in pg))
                aux_tokens = {role: float(sum(samples[i].num_response_tokens for i in mb if roles[i] == role))
                              for role in (ANCHOR, DEMO)}
                self.optimizer.zero_grad(set_to_none=True)
                loss_total = 0.0
                for idx in micro:
                    if not idx:
                        self._idle_pass(samples, grad=True)
                        continue
                    rows = [mb[j] for j in idx]
                    b = self._pad(samples, rows)
                    lp, ent = self._stats(self.model, b, grad=True, states=[cached[i] for i in rows] if cached else None)
                    if one_pass:
                        for r, i in enumerate(rows):
                            m = b["mask"][r]
                            ent_sum[samples[i].task] += float((ent[r] * m).sum())
                            tok[samples[i].task] += float(m.sum())
                            if samples[i].meta.get("behaviour", "policy") == "policy":  # as pass 1 logs it
                                _, mm = truncated_weights(lp[r].detach(), b["old"][r], m, lc.tis_cap)
                                for key, value in vars(mm).items():
                                    mismatch[samples[i].task][key] += value
                        b["old"] = lp.detach() * b["mask"]
                    ref = None
                    if self.uses_reference:
                        ref = torch.zeros_like(lp)
                        for r, i in enumerate(rows):
                            ref[r, : len(ref_lp[i])] = torch.tensor(ref_lp[i])
                    pg_mask = b["mask"] * (b["role"] == ROLES.index(POLICY))[:, None].float()
                    # the importance weight scales the advantage: the policy-gradient term, not the KL penalty
                    inp = LossInputs(lp, b["old"], b["adv"] * b["isw"], pg_mask, b["lo"], b["hi"], ref,
                                     self.cfg.algo.kl_coef, self.options, self.loss_rng)
                    out = checked_output(self.cfg.algo.name, self.spec.fn(inp), lp)
                    weights = token_weights(pg_mask, self.agg, total_tokens, float(len(pg))) * b["w"][:, None]
                    loss = aggregate(out, weights)
                    if any(aux_tokens.values()):
                        terms = anchor_terms(lp, ref, b["mask"], b["role"], self.cfg.algo.anchor_kl,
                                             self.cfg.algo.ptx_coef, aux_tokens[ANCHOR], aux_tokens[DEMO])
                        loss = loss + terms.loss
                        for r, i in enumerate(rows):
                            a = aux[samples[i].task]
                            if roles[i] != POLICY:
                                a[f"{roles[i]}_sum"] += float((terms.anchor_per_token if roles[i] == ANCHOR
                                                               else terms.demo_per_token)[r].sum())
                                a[f"{roles[i]}_tokens"] += float(b["mask"][r].sum())
                    loss.backward()
                    loss_total += float(loss.detach())
                    ratio = ratio_diagnostics(lp.detach(), {**b, "mask": pg_mask})
                    for r, i in enumerate(rows):
                        a = acc[samples[i].task]
                        a["clipped"] += float(out.clipped[r].sum())
                        a["kl"] += float(out.approx_kl[r].sum())
                        a["tokens"] += float(pg_mask[r].sum())
                        for key, values in ratio.items():
                            a[key] = max(a[key], float(values[r])) if key == "ratio_max" else a[key] + float(values[r])
                params = [p for p in self.model.parameters() if p.requires_grad]
                if self.master is not None:
                    self.master.grads_to_master()
                    params = self.master.master
                norms.append(float(full(torch.nn.utils.clip_grad_norm_(params, lc.max_grad_norm))))
                self.optimizer.step()
                if self.master is not None:
                    self.master.to_model()
                losses.append(loss_total)
        if g.sharded:
            losses = g.sum(torch.tensor(losses, dtype=torch.float64)).tolist()
            acc = self._reduce_acc(tasks, acc)
            mismatch = self._reduce_sums(tasks, mismatch, ("tokens", "abs_diff", "kl", "clipped"))
            aux = self._reduce_sums(tasks, aux, tuple(f"{role}_{k}" for role in (ANCHOR, DEMO) for k in ("sum", "tokens")))
        if one_pass:  # the entropies came from the optimizer pass; the pacer only tracks them (bounds unpaced)
            if g.sharded:
                ent_sum, tok = self._reduce_tasks(tasks, ent_sum, tok)
            entropy = {t: ent_sum[t] / max(tok[t], 1.0) for t in tok}
            pace = self.pacer.update(entropy)
        self.step += 1
        after = self._own_weights()
        changed = bf16_changed_share(self.history[-1], after)  # what a bf16 copy sees of this step (master.py)
        self.history.append(after)
        elapsed = time.perf_counter() - t0
        all_tokens = sum(len(s.input_ids) for s in samples)
        per_task = {}
        for t in sorted(entropy):
            lo, hi = self._bounds.get(t, (self.eps_low, self.eps_high))
            a = acc[t]
            per_task[t] = {
                "entropy": entropy[t],
                "entropy_ema": pace.ema[t],
                "pace_scale": pace.scale[t] if self.spec.paced else 1.0,
                "eps_low": lo,
                "eps_high": hi,
                "clip_frac": a["clipped"] / max(a["tokens"], 1.0),
                "clip_low_frac": a["clip_low"] / max(a["tokens"], 1.0),
                "clip_high_frac": a["clip_high"] / max(a["tokens"], 1.0),
                "ratio_dev": a["ratio_dev"] / max(a["tokens"], 1.0),
                "ratio_std": _std(a["ratio_sum"], a["ratio_sq"], a["tokens"]),
                "ratio_max": a["ratio_max"],
                "approx_kl": a["kl"] / max(a["tokens"], 1.0),
                "learner_tokens": tok[t],
            }
            if self.ref is not None:
                per_task[t]["ref_kl"] = ref_kl_sum[t] / max(tok[t], 1.0)
        for t, mm in mismatch.items():
            per_task.setdefault(t, {}).update(mismatch_abs=mm["abs_diff"] / max(mm["tokens"], 1.0),
                                              mismatch_kl=mm["kl"] / max(mm["tokens"], 1.0),
                                              is_clip_frac=mm["clipped"] / max(mm["tokens"], 1.0))
        for t, a in aux.items():
            for role, name in ((ANCHOR, "anchor_kl"), (DEMO, "ptx_nll")):
                if a[f"{role}_tokens"]:
                    per_task.setdefault(t, {})[name] = a[f"{role}_sum"] / a[f"{role}_tokens"]
                    per_task[t][f"{role}_tokens"] = a[f"{role}_tokens"] / lc.epochs
        every = {k: sum(a[k] for a in acc.values()) for k in ("clipped", "clip_low", "clip_high", "tokens")}
        metrics = {
            "loss": float(np.mean(losses)) if losses else 0.0,
            "clip_frac": every["clipped"] / max(every["tokens"], 1.0),
            "clip_low_frac": every["clip_low"] / max(every["tokens"], 1.0),
            "clip_high_frac": every["clip_high"] / max(every["tokens"], 1.0),
            "optimizer_steps": float(len(norms)),
            "grad_norm": float(np.mean(norms)) if norms else 0.0,
            "learner_time_s": elapsed,
            "learner_tokens": float(all_tokens),
            "learner_tokens_per_s": all_tokens * lc.epochs / max(elapsed, 1e-9),
            "entropy_crossovers": float(len(pace.crossovers)),
            "entropy_spikes": float(len(pace.spikes)),
            "entropy_crossovers_total": float(self.pacer.crossovers),
            "entropy_spikes_total": float(self.pacer.spikes),
            "bf16_changed_frac": changed,
        }
        seen = {k: sum(mm[k] for mm in mismatch.values()) for k in ("tokens", "abs_diff", "kl", "clipped")}
        if seen["tokens"]:
            metrics.update(mismatch_abs=seen["abs_diff"] / seen["tokens"], mismatch_kl=seen["kl"] / seen["tokens"],
                           is_clip_frac=seen["clipped"] / seen["tokens"])
        return StepReport(self.step, metrics, per_task, pace)

    # ------------------------------------------------------------------ reductions over ranks
    def _reduce_tasks(self, tasks: list[str], *sums: Mapping[str, float]) -> list[dict[str, float]]:
        """Per-task sums added over ranks (every task of the batch, in the same order on every rank)."""
        values = torch.tensor([[s.get(t, 0.0) for s in sums] for t in tasks], dtype=torch.float64)
        values = self.group.sum(values)
        return [{t: float(values[k, j]) for k, t in enumerate(tasks)} for j in range(len(sums))]

    def _reduce_acc(self, tasks: list[str], acc: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
        keys = ("clipped", "kl", "tokens", "clip_low", "clip_high", "ratio_dev", "ratio_sum", "ratio_sq")
        sums = self.group.sum(torch.tensor([[acc[t][k] if t in acc else 0.0 for k in keys] for t in tasks],
                                           dtype=torch.float64))
        top = self.group.max(torch.tensor([acc[t]["ratio_max"] if t in acc else 0.0 for t in tasks],
                                          dtype=torch.float64))
        out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for i, t in enumerate(tasks):
            out[t].update({k: float(sums[i, j]) for j, k in enumerate(keys)}, ratio_max=float(top[i]))
        return out

    def _reduce_sums(self, tasks: list[str], d: Mapping[str, Mapping[str, float]],
                     keys: tuple[str, ...]) -> dict[str, dict[str, float]]:
        """Per-task sums over the ranks; a task no rank has a value for stays out (as in one process)."""
        sums = self.group.sum(torch.tensor([[d[t][k] if t in d else 0.0 for k in keys] for t in tasks],
                                           dtype=torch.float64))
        seen = self.group.sum(torch.tensor([float(t in d) for t in tasks], dtype=torch.float64))
        return {t: defaultdict(float, {k: float(sums[i, j]) for j, k in enumerate(keys)})
                for i, t in enumerate(tasks) if seen[i] > 0}

    # ------------------------------------------------------------------ weights and checkpoints
    def _trainable(self) -> dict[str, torch.nn.Parameter]:
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def _own_weights(self) -> dict[str, torch.Tensor]:
        """The trainable weights as this rank holds them (its shards when sharded), on CPU."""
        return {n: local(p).detach().to("cpu", copy=True) for n, p in self._trainable().items()}

    def trainable_weights(self) -> dict[str, torch.Tensor]:
        """The parameters the optimizer changes, on CPU, as they are now (whole: a collective when sharded)."""
        if not self.group.sharded:
            return self._own_weights()
        return {n: full(p.detach()).to("cpu") for n, p in self._trainable().items()}

    def sampling_weights(self) -> dict[str, torch.Tensor]:
        """What the generator samples the next batch with: the trainable weights after step `step - staleness`
        (the start's while fewer steps were taken); the current ones when `staleness` is 0. Whole tensors (a
        collective when sharded); with LoRA, the adapters."""
        if not self.group.sharded:
            return self.history[0]
        params = self._trainable()
        return {n: full_from_local(params[n], shard).to("cpu") for n, shard in self.history[0].items()}

    def lora_base(self) -> dict[str, torch.Tensor]:
        """With LoRA: the adapted projections' frozen weights by their plain names (what the generator merges the
        adapters into; sent once). A collective when sharded."""
        named = {n: p for n, p in self.model.named_parameters() if n.endswith(lora.BASE)}
        return lora.base_weights({n: full(p.detach()).to("cpu") for n, p in named.items()})

    @contextmanager
    def _sampling_policy(self) -> Iterator[None]:
        """The model holds the sampling weights inside the block (pass 1 then sees the policy that sampled the
        batch), its own after; a no-op without staleness."""
        behaviour = self.history[0]
        if len(self.history) == 1:
            yield
            return
        params = self._trainable()
        current = {n: local(params[n]).detach().clone() for n in behaviour}
        with torch.no_grad():
            copy_local(params, behaviour)
        try:
            yield
        finally:
            with torch.no_grad():
                copy_local(params, current)

    def _state(self, history: list[dict[str, torch.Tensor]]) -> dict:
        return {
            "step": self.step,
            "pacer": self.pacer.state_dict(),
            "history": history,
            "master": self.master.state_dict() if self.master is not None else None,
            "rng": {
                "torch": torch.get_rng_state(),
                "learner": self.rng.get_state(),
                "python": random.getstate(),
                "numpy": np.random.get_state(),
            },
        }

    def save(self, path: Path) -> None:
        """The single-process format (model/ + learner.pt with the optimizer) for one process without LoRA; else
        checkpoint.py's (dcp/, model/, adapter/, learner.pt), which every rank joins and which loads at any world
        size."""
        path.mkdir(parents=True, exist_ok=True)
        if not self.group.sharded and self.adapted is None:
            self.model.save_pretrained(str(path / "model"), safe_serialization=True)
            torch.save({**self._state(list(self.history)), "optimizer": self.optimizer.state_dict()},
                       path / "learner.pt")
            return
        ckpt.save_state(self.model, self.optimizer, path)
        scale = lora.scaling(self.cfg.learner.lora) if self.adapted is not None else None
        ckpt.export_model(self.model, path, self.group.rank, scale, self.adapted)
        params = self._trainable()
        history = [{n: full_from_local(params[n], shard).to("cpu") for n, shard in h.items()} for h in self.history]
        if self.group.rank == 0:
            torch.save(self._state(history), path / "learner.pt")
        self.group.barrier()

    def load(self, path: Path) -> None:
        if ckpt.is_sharded_checkpoint(path):
            ckpt.load_state(self.model, self.optimizer, path)
            state = torch.load(path / "learner.pt", weights_only=False)  # our own file: RNG states are tuples
            params = self._trainable()
            history = [{n: shard_of(params[n], t) for n, t in h.items()} for h in state.get("history") or []]
        else:
            self._load_plain(path)
            state = torch.load(path / "learner.pt", weights_only=False)  # our own file: RNG states are tuples
            self.optimizer.load_state_dict(state["optimizer"])
            history = state.get("history") or []
            if self.master is not None:  # the float32 copies, else (an older checkpoint) the loaded weights as they are
                self.master.load_state_dict(state.get("master") or [p.detach() for p in self.master.params])
        self.step = int(state["step"])
        self.pacer.load_state_dict(state["pacer"])
        self.history.clear()  # a checkpoint from before `staleness` existed holds no history: sample with its weights
        self.history.extend(history or [self._own_weights()])
        torch.set_rng_state(state["rng"]["torch"])
        self.rng.set_state(state["rng"]["learner"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])

    def _load_plain(self, path: Path) -> None:
        from safetensors.torch import load_file

        weights: dict[str, torch.Tensor] = {}
        for f in sorted((path / "model").glob("*.safetensors")):
            weights.update(load_file(str(f)))
        missing, _ = self.model.load_state_dict(weights, strict=False)
        # save_pretrained omits tied copies (lm_head = embed_tokens): missing is fine when it shares storage.
        own = self.model.state_dict()
        loaded = {own[k].data_ptr() for k in weights if k in own}
        lacking = [k for k in missing if own[k].data_ptr() not in loaded]
        if lacking:
            raise ValueError(f"checkpoint {path} lacks weights: {lacking[:3]}")
