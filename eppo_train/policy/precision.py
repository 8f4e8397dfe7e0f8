"""Which float type runs fast on this machine: bf16 only where the hardware multiplies bf16 natively.

A CPU without AVX512-BF16 or AMX (an AVX2-only AMD EPYC, say) emulates bf16: on such a 2-core machine a 1024^3
matmul runs at 0.9 GFLOP/s in bf16 against 102 in float32, and vLLM generates ~18 new tokens/s in bf16 against
~98 in float32 on the make-train rollout (docs/bench.md). So `dtype: auto` (the shipped configs' choice)
means bf16 on a GPU with bf16 and on a CPU with native bf16, float32 elsewhere, and the learner's CPU bf16 autocast
is a speed option that applies only where it is one.
"""

from __future__ import annotations

import functools
import sys


@functools.cache
def native_bf16(device: str = "cpu") -> bool:
    """True where bf16 matmuls run in hardware: a CUDA device with bf16, a CPU with AVX512-BF16 or AMX."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check() for check in checks if check is not None)


def resolve_dtype(dtype: str, device: str = "cpu") -> str:
    """`auto` -> "bfloat16" where it is native on `device`, else "float32"; any other name is returned as given.
    Says nothing: the caller tells the user (`tell_fallback`) once what it loaded has loaded, so that a command
    that fails to load says its error alone."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if native_bf16(device) else "float32"


def tell_fallback(dtype: str, device: str = "cpu") -> None:
    """Once per process: where `dtype` (as asked) was `auto` and fell back to float32, why."""
    if dtype == "auto" and not native_bf16(device):
        _notice_once(device)


def use_cpu_autocast(asked: bool) -> bool:
    """Whether the learner's bf16 autocast on CPU (`learner.bf16_autocast_cpu`) applies: asked, and bf16 native."""
    if asked and not native_bf16("cpu"):
        _notice_once("cpu")
        return False
    return asked


@functools.cache
def _notice_once(device: str) -> None:
    where = "GPU has no bf16" if device.startswith("cuda") else "CPU has no native bf16 (no AVX512-BF16/AMX)"
    print(f"precision: this {where}; emulated bf16 multiplies ~100x slower than float32: "
          "generating and training in float32", file=sys.stderr)
