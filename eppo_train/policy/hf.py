"""The default generation backend: transformers `generate` on CPU or GPU, batched with left padding.

It returns, per sampled token, the log-probability under the *sampling* distribution (temperature and top-p
applied), which is what PPO-style ratios need as "old" log-probs when the learner does not recompute them. To get
that without keeping a vocabulary-sized score tensor per step, the temperature/top-p warpers run as our own logits
processors (generate adds none of its own: we pass temperature=1, top_p=1, top_k=0), followed by a recorder that
turns the processed scores into log-probs and picks the sampled token's value one step later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams
from eppo_train.policy.models import load_model, load_tokenizer


class _LogprobRecorder(LogitsProcessor):
    """Keeps log-softmax of the processed scores; the next call (or `finish`) reads the sampled token's entry."""

    def __init__(self) -> None:
        self.prev: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []  # one (batch,) tensor per generated position

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.LongTensor) -> torch.Tensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, last_tokens[:, None]).squeeze(1))
            self.prev = None
        return torch.stack(self.steps, dim=1) if self.steps else torch.zeros(last_tokens.shape[0], 0)


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
        tokenizer=None,
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
        caps = [min(params.max_new_tokens, b) for b in budgets] if budgets is not None else [params.max_new_tokens] * len(prompts)
        if params.seed is not None:
            torch.manual_seed(params.seed)
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
        if not greedy and params.top_p < 1.0:
            processors.append(TopPLogitsWarper(params.top_p, min_tokens_to_keep=1))
        recorder = _LogprobRecorder()
        processors.append(recorder)
        finish = _Finish(width, caps, self.eos_ids, getattr(params, "stop", ()), self.tokenizer)
        max_new = max(1, max(caps))
        # Neutralise whatever sampling defaults the model's generation_config ships (e.g. top_k=20): our own
        # processors above are the whole sampling distribution.
        sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0} if not greedy else {}
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention.to(self.device),
            do_sample=not greedy,
            **sampling,
            max_new_tokens=max_new,
            min_new_tokens=0,
            logits_processor=LogitsProcessorList(processors),
            stopping_criteria=StoppingCriteriaList([finish]),
            eos_token_id=sorted(self.eos_ids) or None,
            pad_token_id=pad,
            repetition_penalty=None,
            return_dict_in_generate=False,
        )
        new_tokens = out[:, width:].cpu()
        logprobs = recorder.finish(out[:, -1]).cpu() if new_tokens.shape[1] else torch.zeros(len(prompts), 0)
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
