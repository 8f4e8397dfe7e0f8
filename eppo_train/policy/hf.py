"""The default generation backend: transformers `generate` on CPU or GPU, batched with left padding.

It returns, per sampled token, the log-probability under the *sampling* distribution (temperature, min-p and
top-p applied, in vLLM's order), which is what PPO-style ratios need as "old" log-probs when the learner does not recompute them. The
temperature/top-p warpers run as our own logits processors, then `_Sampler` draws the token and records its
log-prob; generate itself runs in greedy mode, so none of the model's own sampling defaults (top_k=50, ...) apply.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.logits_process import MinPLogitsWarper, TemperatureLogitsWarper, TopPLogitsWarper

from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams
from eppo_train.policy.models import load_model, load_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class _Sampler(LogitsProcessor):
    """Samples the next token itself and records its log-prob; returns scores that make generate's argmax pick it.

    Doing the draw here (inverse CDF over the processed distribution) keeps torch.multinomial out of the loop (about
    5x slower over a 49k vocabulary on CPU), gives a seeded generator of our own, and yields the sampled token's
    log-prob without storing a vocabulary-sized tensor per step.
    """

    def __init__(self, greedy: bool, generator: torch.Generator | None) -> None:
        self.greedy = greedy
        self.generator = generator
        self.steps: list[torch.Tensor] = []  # one (batch,) tensor per generated position

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        logp = torch.log_softmax(scores.float(), dim=-1)
        if self.greedy:
            token = logp.argmax(dim=-1, keepdim=True)
        else:
            # Inverse CDF: one uniform per row. A zero-probability token (cut by top-p) has an empty interval,
            # so it can never be drawn.
            cdf = logp.exp().cumsum(dim=-1)
            u = torch.rand((logp.shape[0], 1), generator=self.generator, device=logp.device) * cdf[:, -1:]
            token = torch.searchsorted(cdf, u, right=True).clamp_(max=logp.shape[1] - 1)
        self.steps.append(logp.gather(1, token).squeeze(1))
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, token, 0.0)

    def logprobs(self, batch: int) -> torch.Tensor:
        return torch.stack(self.steps, dim=1) if self.steps else torch.zeros(batch, 0)


class _Finish(StoppingCriteria):
    """Per-row end of generation: eos, a stop string, or the row's own token budget; remembers where each ended."""

    def __init__(self, prompt_len: int, budgets: list[int], eos_ids: set[int], stop: Sequence[str], tokenizer) -> None:
        self.prompt_len = prompt_len
        self.budgets = budgets
        self.eos_ids = eos_ids
        self.stop = [s for s in stop if s]
        self.tokenizer = tokenizer
        self.ended_at: list[int | None] = [None] * len(budgets)
        self.finished: list[bool] = [False] * len(budgets)
        # A stop string may straddle tokens: look back over as many tokens as the longest stop string has chars.
        self.lookback = max((len(s) for s in self.stop), default=0) + 1

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        n = input_ids.shape[1] - self.prompt_len
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            if self.ended_at[row] is not None:
                continue
            if token in self.eos_ids or (self.stop and self._hits_stop(input_ids[row])):
                self.ended_at[row], self.finished[row] = n, True
            elif n >= self.budgets[row]:
                self.ended_at[row] = n
        return torch.tensor([e is not None for e in self.ended_at], device=input_ids.device)

    def _hits_stop(self, row_ids: torch.Tensor) -> bool:
        n = row_ids.shape[0] - self.prompt_len
        tail = self.tokenizer.decode(row_ids[-min(n, self.lookback):].tolist())
        before = self.tokenizer.decode(row_ids[-min(n, self.lookback):-1].tolist()) if n > 1 else ""
        # Only the newest token may complete a stop string (earlier ones would have stopped the row already).
        return any(s in tail and s not in before for s in self.stop)


class HFPolicy(PolicyBackend):
    """transformers generation. `model` is a path/name (see `resolve_model`) or an already loaded model.

    dtype="bfloat16" keeps bf16 weights for sampling (about 2x faster on CPUs with bf16 support; the learner
    recomputes old log-probs with its fp32 model anyway). `max_batch` splits large batches into length-sorted
    chunks so short prompts do not pay for the longest one's padding.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | torch.nn.Module = "default",
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        device: str | None = None,
        dtype: str = "float32",
        max_batch: int | None = None,
    ) -> None:
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if isinstance(model, torch.nn.Module):
            if tokenizer is None:
                raise ValueError("pass the tokenizer along with an already loaded model")
            self.model = model.eval()
            self.name = getattr(model.config, "name_or_path", type(model).__name__)
        else:
            self.model = load_model(model, dtype=dtype, device=self.device)
            tokenizer = tokenizer or load_tokenizer(model)
            self.name = str(model)
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.eos_ids = self._eos_ids()

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list | tuple):
                ids.update(int(v) for v in value)
        return ids

    # ----------------------------------------------------------------- generation
    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[list[int]],
        params: SamplingParams,
        budgets: Sequence[int] | None = None,
    ) -> list[Generation]:
        """One continuation per prompt. `budgets` optionally caps new tokens per row (below params.max_new_tokens)."""
        if not prompts:
            return []
        caps = params.caps(len(prompts), budgets)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        chunk = self.max_batch or len(prompts)
        results: list[Generation | None] = [None] * len(prompts)
        for start in range(0, len(order), chunk):
            rows = order[start : start + chunk]
            gens = self._generate_batch([prompts[i] for i in rows], [caps[i] for i in rows], params)
            for i, gen in zip(rows, gens, strict=True):
                results[i] = gen
        return results  # type: ignore[return-value]

    def _generate_batch(self, prompts: list[list[int]], caps: list[int], params: SamplingParams) -> list[Generation]:
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            if ids:
                input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention[row, width - len(ids) :] = 1
        greedy = params.temperature <= 0
        processors: list[LogitsProcessor] = []
        if not greedy and params.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(params.temperature))
        if not greedy and params.min_p > 0.0:  # before top-p, as vLLM's sampler applies them
            processors.append(MinPLogitsWarper(params.min_p, min_tokens_to_keep=1))
        if not greedy and params.top_p < 1.0:
            processors.append(TopPLogitsWarper(params.top_p, min_tokens_to_keep=1))
        generator = None
        if params.seed is not None and not greedy:
            generator = torch.Generator(device=self.device).manual_seed(int(params.seed))
        sampler = _Sampler(greedy, generator)
        processors.append(sampler)
        finish = _Finish(width, caps, self.eos_ids, getattr(params, "stop", ()), self.tokenizer)
        max_new = max(1, max(caps))
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention.to(self.device),
            do_sample=False,  # the draw happens in _Sampler; generate's argmax then just reads it off
            max_new_tokens=max_new,
            logits_processor=LogitsProcessorList(processors),
            stopping_criteria=StoppingCriteriaList([finish]),
            eos_token_id=sorted(self.eos_ids) or None,
            pad_token_id=pad,
            repetition_penalty=None,
            return_dict_in_generate=False,
        )
        new_tokens = out[:, width:].cpu()
        logprobs = sampler.logprobs(len(prompts)).cpu()
        results = []
        for row in range(len(prompts)):
            end = finish.ended_at[row] or new_tokens.shape[1]
            end = min(end, caps[row], new_tokens.shape[1])
            ids = new_tokens[row, :end].tolist()
            results.append(
                Generation(
                    token_ids=ids,
                    logprobs=logprobs[row, :end].tolist(),
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    finished=finish.finished[row],
                )
            )
        return results

    # ----------------------------------------------------------------- weights
    @torch.no_grad()
    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy the learner's weights in place (cast to this model's dtype and device; tied weights are fine)."""
        own = self.model.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise KeyError(f"weights not in the sampling model: {unknown[:5]}")
        for name, value in state_dict.items():
            own[name].copy_(value.detach().to(device=own[name].device, dtype=own[name].dtype))

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
