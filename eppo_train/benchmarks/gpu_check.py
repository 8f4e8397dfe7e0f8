"""The GPU check behind `scripts/gpu_check.sh`: learner and generation throughput on a random ~0.5B model, the
sharded learner (FSDP2) at the machine's GPU count, then a short `eppo-train` run, on a bare CUDA machine (torch +
transformers only, nothing to download).

    python -m eppo_train.benchmarks.gpu_check [--cpu]       # the check (--cpu: a dry run with tiny sizes, for the test suite)
    python -m eppo_train.benchmarks.gpu_check bundle DIR    # what the bare machine lacks for the eppo-train part (< 64 MiB)

The timed part imports only torch, transformers and this package's learner/HF-generation modules (no gymnasium,
Ray or vLLM: `main` checks that none got loaded). The model is a random Qwen2 with Qwen2-0.5B's shapes, and the
tokenizer a synthetic word-level one over the same vocabulary, so no weights or tokenizer files are needed.
The `eppo-train` part needs gymnasium, psutil and the tiny model: `bundle` copies them (Python packages, psutil's abi3
extension, and a 16 MB folder).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from eppo_train.config import Config, LearnerConfig, RunConfig
from eppo_train.core.records import Sample
from eppo_train.policy.base import SamplingParams
from eppo_train.policy.models import TINY_MODEL_NAME, tiny_model_dir
from eppo_train.policy.precision import use_cpu_autocast

if TYPE_CHECKING:
    from transformers import (
        PreTrainedModel,
        PreTrainedTokenizerBase,
        PreTrainedTokenizerFast,
        Qwen2ForCausalLM,
    )

# Dense bf16 tensor-core peak (FLOP/s, no sparsity) by device-name substring, from the vendors' data sheets.
PEAK_BF16 = {"H200": 989e12, "H100 SXM": 989e12, "H100 NVL": 835e12, "H100 PCIe": 756e12, "H100": 756e12,
             "GH200": 989e12, "B200": 2250e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "L4": 121e12,
             "A10": 125e12}
# pure Python, and psutil (the memory account; its extension is abi3): fine on any CPython 3.x on Linux
BUNDLE_PACKAGES = ("gymnasium", "cloudpickle", "farama_notifications", "psutil")


@dataclass(frozen=True)
class Sizes:
    """One shape of the check: the model, the learner batch and the generation batch."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    seqs: int  # learner: sequences per step
    seq_len: int
    micro_batch_tokens: int
    steps: int  # timed learner steps (after one warm-up step)
    gen_prompts: int
    gen_prompt_len: int
    gen_new_tokens: int
    matmul: int  # side of the square bf16 matmul that measures the achievable rate


GPU = Sizes(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936,  # Qwen2-0.5B's shapes
            seqs=32, seq_len=1024, micro_batch_tokens=16384, steps=3,
            gen_prompts=64, gen_prompt_len=256, gen_new_tokens=128, matmul=8192)
CPU = Sizes(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=512,
            seqs=4, seq_len=64, micro_batch_tokens=256, steps=1,
            gen_prompts=4, gen_prompt_len=16, gen_new_tokens=8, matmul=256)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_gib(device: str) -> float | None:
    """None on CPU: nothing measures it there (a NaN would print as "peak GPU memory nan GiB" and land in the JSON)."""
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None


def _peak_text(gib: float | None) -> str:
    return "" if gib is None else f"; peak GPU memory {gib:.2f} GiB"


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def synthetic_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over `vocab` ids (pad 0, eos 1): enough for batching, stopping and decoding."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, vocab)}}
    core = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def random_model(sizes: Sizes, device: str) -> Qwen2ForCausalLM:
    """A random-initialised Qwen2 causal LM (fp32 master weights) built directly on `device`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=sizes.vocab, hidden_size=sizes.hidden, intermediate_size=sizes.intermediate,
                         num_hidden_layers=sizes.layers, num_attention_heads=sizes.heads,
                         num_key_value_heads=sizes.kv_heads, max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        return Qwen2ForCausalLM(config)


def matmul_rate(n: int, device: str, seconds: float = 2.0) -> float:
    """Achieved bf16 FLOP/s of an n x n x n matmul: the ceiling the learner's MFU is also reported against."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    a @ b
    _sync(device)
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or count < 3:
        a @ b
        count += 1
        if count % 8 == 0:
            _sync(device)
    _sync(device)
    return 2 * n**3 * count / (time.perf_counter() - t0)


def learner_flops(sizes: Sizes, non_embedding: int, tokens: int, masked: int) -> float:
    """Model FLOPs of one Learner.train_step: a no-grad pass (old log-probs, entropy) + forward/backward (3x).

    Per token forward: 2 x non-embedding params + 4 x layers x hidden x sequence length (attention scores and
    values, no causal discount); the vocab projection runs on masked (response) tokens only: 2 x vocab x hidden.
    """
    forward = (2 * non_embedding + 4 * sizes.layers * sizes.hidden * sizes.seq_len) * tokens
    forward += 2 * sizes.vocab * sizes.hidden * masked
    return 4 * forward


def _batch(sizes: Sizes, seed: int = 0) -> list[Sample]:
    """Random rollouts: each sequence half prompt, half the response the loss trains."""
    import random

    rng = random.Random(seed)
    half = sizes.seq_len // 2
    out = []
    for i in range(sizes.seqs):
        ids = [rng.randrange(2, sizes.vocab) for _ in range(sizes.seq_len)]
        mask = [0] * half + [1] * (sizes.seq_len - half)
        out.append(Sample(task=("a", "b")[i % 2], group_id=f"g{i // 4}", episode_id=f"e{i}", turn_index=-1,
                          input_ids=ids, loss_mask=mask, old_logprobs=[-11.0 * m for m in mask],
                          reward=float(i % 2), advantage=1.0 if i % 2 else -1.0))
    return out


def bench_learner(sizes: Sizes, device: str, model: PreTrainedModel) -> dict:
    """Time `Learner.train_step` (the EPPO loss, bf16 autocast on CUDA) on random rollouts."""
    from eppo_train.learner.learner import Learner

    # bf16 autocast on CPU too (--cpu), so the dry run takes the same autocast path the GPU always takes
    lc = LearnerConfig(lr=1e-6, micro_batch_tokens=sizes.micro_batch_tokens, bf16_autocast_cpu=True)
    cfg = Config(run=RunConfig(seed=0), learner=lc)
    learner = Learner(cfg, model=model, device=device)
    half = sizes.seq_len // 2
    learner.train_step(_batch(sizes))  # warm-up: CUDA kernels, allocator
    _sync(device)
    _reset_peak(device)
    losses, t0 = [], time.perf_counter()
    for step in range(sizes.steps):
        losses.append(learner.train_step(_batch(sizes, step + 1)).metrics["loss"])
    _sync(device)
    elapsed = time.perf_counter() - t0
    tokens = sizes.seqs * sizes.seq_len * sizes.steps
    masked = sizes.seqs * (sizes.seq_len - half) * sizes.steps
    embedding = model.get_input_embeddings().weight.numel()
    non_embedding = sum(p.numel() for p in model.parameters()) - embedding  # tied head: counted once, above
    return {"params": non_embedding + embedding, "tokens_per_s": tokens / elapsed,
            "flops_per_s": learner_flops(sizes, non_embedding, tokens, masked) / elapsed,
            "loss_finite": all(math.isfinite(v) for v in losses), "peak_gib": _peak_gib(device),
            "seconds": elapsed, "learner": learner}


def bench_generation(sizes: Sizes, device: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict:
    """Time HFPolicy.generate (the rollout's HF engine) on a bf16 copy of the model, random prompts."""
    import copy
    import random

    import torch

    from eppo_train.policy.hf import HFPolicy

    policy = HFPolicy(copy.deepcopy(model).to(torch.bfloat16), tokenizer=tokenizer, device=device)
    rng = random.Random(1)
    prompts = [[rng.randrange(2, sizes.vocab) for _ in range(sizes.gen_prompt_len)] for _ in range(sizes.gen_prompts)]
    params = SamplingParams(max_new_tokens=sizes.gen_new_tokens, temperature=1.0, seed=0)
    policy.generate(prompts[:2], SamplingParams(max_new_tokens=4, seed=0))  # warm-up
    _sync(device)
    _reset_peak(device)
    t0 = time.perf_counter()
    out = policy.generate(prompts, params)
    _sync(device)
    elapsed = time.perf_counter() - t0
    new = sum(len(g.token_ids) for g in out)
    policy.close()
    return {"tokens_per_s": new / elapsed, "new_tokens": new, "peak_gib": _peak_gib(device), "seconds": elapsed}


# The sharded step against one process on the same batch and initial weights. On CUDA FSDP2 computes with bf16
# parameters where one process keeps fp32 ones under bf16 autocast (norm weights and the head's input round
# differently), so the bound is bf16's (also on a CPU with native bf16); in fp32 both agree to float-sum order.
AGREE_RTOL = {"bf16": 5e-2, "fp32": 1e-4}


def _sharded_config(sizes: Sizes) -> Config:
    lc = LearnerConfig(lr=1e-6, micro_batch_tokens=sizes.micro_batch_tokens, bf16_autocast_cpu=True,
                       activation_checkpointing=True)
    return Config(run=RunConfig(seed=0), learner=lc)


def _first_step(report) -> dict:  # noqa: ANN001  (a StepReport)
    """What the comparison with one process reads from a step's report."""
    return {"grad_norm": report.metrics["grad_norm"], "loss": report.metrics["loss"],
            "entropy": {t: v["entropy"] for t, v in report.per_task.items()}}


def _sharded_rank(rank: int, world: int, address: str, cpu: bool, out: str, ckpt: str) -> None:
    """One rank of `bench_sharded`, in its own process: a gloo (CPU) or NCCL group, the Learner sharded by FSDP2.
    Its first step (untimed, also the warm-up) is kept for the comparison with one process, and the learner saves a
    sharded checkpoint after the timed steps."""
    import torch

    from eppo_train.learner.distributed import Group
    from eppo_train.learner.learner import Learner

    sizes = CPU if cpu else GPU
    device = "cpu"
    if not cpu:
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    group = Group(rank, world, address, backend="gloo" if cpu else "nccl")
    try:
        learner = Learner(_sharded_config(sizes), model=random_model(sizes, device), device=device, group=group)
        batch = _batch(sizes)
        first = _first_step(learner.train_step(batch))  # also the warm-up
        _sync(device)
        _reset_peak(device)
        t0 = time.perf_counter()
        losses = [learner.train_step(batch).metrics["loss"] for _ in range(sizes.steps)]
        _sync(device)
        elapsed = time.perf_counter() - t0
        peak = _peak_gib(device)
        learner.save(Path(ckpt))
        if rank == 0:
            tokens = sizes.seqs * sizes.seq_len * sizes.steps
            Path(out).write_text(json.dumps({"world": world, "tokens_per_s": tokens / elapsed, "losses": losses,
                                             "loss_finite": all(math.isfinite(v) for v in losses), "first": first,
                                             "step": learner.step, "peak_gib": peak, "seconds": elapsed}))
    finally:
        group.close()


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def against_one_process(cpu: bool, first: dict, ckpt: Path, step: int) -> dict:
    """The sharded run checked in this process: one unsharded Learner's first step on the same batch from the same
    initial weights (gradient norm and per-task entropies within `AGREE_RTOL`), and the sharded checkpoint loaded
    into an unsharded Learner (its step, and its weights equal to the gathered export, bit for bit)."""
    import torch
    from safetensors.torch import load_file

    from eppo_train.learner.learner import Learner

    device, sizes = ("cpu", CPU) if cpu else ("cuda", GPU)
    tol = AGREE_RTOL["bf16" if not cpu or use_cpu_autocast(True) else "fp32"]
    one = Learner(_sharded_config(sizes), model=random_model(sizes, device), device=device)
    mine = _first_step(one.train_step(_batch(sizes)))
    del one
    diffs = {"grad_norm": _rel(mine["grad_norm"], first["grad_norm"])}
    for task, value in mine["entropy"].items():
        diffs[f"entropy {task}"] = _rel(value, first["entropy"].get(task, math.nan))
    worst = max(diffs.values())
    agree = all(d <= tol for d in diffs.values())  # NaN fails too
    resumed = Learner(_sharded_config(sizes), model=random_model(sizes, device), device=device)
    resumed.load(ckpt)
    exported = load_file(str(ckpt / "model" / "model.safetensors"))
    weights = resumed.trainable_weights()
    same = [torch.equal(weights[n], t) for n, t in exported.items() if n in weights]
    got_step = resumed.step
    resumes = got_step == step and bool(same) and all(same)
    if device == "cuda":
        del resumed
        torch.cuda.empty_cache()
    why = []
    if not agree:
        why.append(f"first step differs from one process by {worst:.3g} relative (bound {tol:g}): {diffs}")
    if not resumes:
        why.append(f"checkpoint resumed at step {got_step} (saved at {step}) with {sum(same)}/{len(same)} exported "
                   "weights equal")
    return {"agree": agree, "worst_rel_diff": worst, "tolerance": tol, "resumes": resumes, "why": "; ".join(why)}


def bench_sharded(cpu: bool) -> dict:
    """`Learner.train_step` sharded over every GPU (2 ranks over gloo for the dry run), spawned processes, then
    `against_one_process`."""
    import multiprocessing

    import torch

    from eppo_train.learner.distributed import free_address

    world = 2 if cpu else torch.cuda.device_count()
    with tempfile.TemporaryDirectory(prefix="eppo-gpu-check-fsdp-") as tmp:
        out, ckpt = Path(tmp) / "rank0.json", Path(tmp) / "ckpt"
        ctx = multiprocessing.get_context("spawn")
        address = free_address()
        procs = [ctx.Process(target=_sharded_rank, args=(r, world, address, cpu, str(out), str(ckpt)))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(240)
        for p in procs:
            if p.is_alive():
                p.kill()
        if not out.is_file():
            return {"ok": False, "world": world, "why": f"exit codes {[p.exitcode for p in procs]}"}
        report = json.loads(out.read_text())
        check = against_one_process(cpu, report["first"], ckpt, report["step"])
    ok = report["loss_finite"] and check["agree"] and check["resumes"]
    why = "; ".join(w for w in ("" if report["loss_finite"] else "a loss is not finite", check["why"]) if w)
    return {**report, **check, "ok": ok, "why": why}


# The engine check's model: a random Qwen2 small enough to start fast, with a head size vLLM has kernels for on
# CPU and GPU (64; the tiny test model's 16 has none on CPU).
ENGINE_SIZES = Sizes(hidden=256, layers=2, heads=4, kv_heads=2, intermediate=512, vocab=1024, seqs=0, seq_len=0,
                     micro_batch_tokens=0, steps=0, gen_prompts=32, gen_prompt_len=24, gen_new_tokens=12, matmul=0)


def check_engines(cpu: bool) -> dict:
    """`generator.engines: 2` with vLLM: two engines behind one `EngineGroup`, as the rollout drives them.

    Groups of 4 prompts keyed as the rollout keys episodes: every generation comes back once, in the batch's order,
    and each engine holds half of the groups. Then a weight sync through the group (the learner's path): both
    engines greedily continue a prompt identically, and their log-probs are those of the new weights under
    transformers, not those of the old ones. Skipped when vLLM is not importable."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return {"ran": False, "ok": True, "why": "vllm is not importable here"}
    import torch

    from eppo_train.learner.learner import token_logprobs_entropy
    from eppo_train.policy.engine import EngineGroup, EngineSpec, make_engine

    sizes, device = ENGINE_SIZES, "cpu" if cpu else "cuda"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eppo-gpu-check-engines-") as tmp:
        model = random_model(sizes, "cpu")
        model.save_pretrained(tmp, safe_serialization=True)
        synthetic_tokenizer(sizes.vocab).save_pretrained(tmp)
        # two engines on one GPU share it: a fifth of its memory each (KV cache included) leaves room for the rest
        spec = EngineSpec(tmp, "vllm", "float32" if cpu else "bfloat16", max_model_len=256, seed=0, kv_cache_gb=1,
                          max_sequences=sizes.gen_prompts, gpu_memory_utilization=0.2)
        engines: list = []
        group = None
        try:
            for _ in range(2):  # one by one: one that started is closed below if the other fails
                engines.append(make_engine(spec))
            group = EngineGroup(engines)
            import random

            rng = random.Random(3)
            prompts = [[rng.randrange(2, sizes.vocab) for _ in range(sizes.gen_prompt_len)]
                       for _ in range(sizes.gen_prompts // 4)]
            keys = [("task", 0, g) for g in range(len(prompts)) for _ in range(4)]
            batch = [prompts[g] for g in range(len(prompts)) for _ in range(4)]
            params = SamplingParams(max_new_tokens=sizes.gen_new_tokens, temperature=1.0, seed=0)
            gens = group.generate_for(keys, batch, params)
            every = len(gens) == len(batch) and all(g is not None and g.token_ids for g in gens)
            shared = sorted(group.load) == [len(prompts) // 2, len(prompts) - len(prompts) // 2]

            def greedy(engine):  # noqa: ANN001, ANN202
                return engine.generate([prompts[0]], SamplingParams(max_new_tokens=8, temperature=0.0, seed=0))[0]

            def hf_logprobs(weights: dict[str, torch.Tensor], gen) -> torch.Tensor:  # noqa: ANN001
                model.load_state_dict(weights)
                ids = torch.tensor([prompts[0] + gen.token_ids])
                mask = torch.zeros(ids.shape)
                mask[0, len(prompts[0]):] = 1
                with torch.no_grad():
                    lp, _ = token_logprobs_entropy(model, ids, torch.ones_like(ids), mask)
                return lp[0, len(prompts[0]):]

            old = {k: v.clone() for k, v in model.state_dict().items()}
            noise = torch.Generator().manual_seed(1)
            with torch.no_grad():  # through the parameters: the tied head and embeddings stay one tensor
                for p in model.parameters():
                    p.add_(0.05 * torch.randn(p.shape, generator=noise))
            new = {k: v.clone() for k, v in model.state_dict().items()}
            t_sync = time.perf_counter()
            group.update_weights(new)
            sync_s = time.perf_counter() - t_sync
            a, b = greedy(engines[0]), greedy(engines[1])
            engines_agree = a.token_ids == b.token_ids
            got = torch.tensor(a.logprobs)
            err_new = float((got - hf_logprobs(new, a)).abs().max())
            err_old = float((got - hf_logprobs(old, a)).abs().max())
            tol = 1e-3 if cpu else 0.1  # bf16 engine against the fp32 transformers forward
            updated = err_new <= tol < err_old
        finally:
            if group is not None:
                group.close()
            else:
                for engine in engines:
                    engine.close()
    ok = every and shared and engines_agree and updated
    why = [] if ok else [f"every generation back once: {every}", f"groups shared out evenly: {shared} {group.load}",
                         f"both engines greedy-equal after the sync: {engines_agree}",
                         f"log-probs of the new weights: max diff {err_new:.3g} (bound {tol:g}; old weights' "
                         f"{err_old:.3g})"]
    return {"ran": True, "ok": ok, "device": device, "generations": len(gens), "load": list(group.load),
            "sync_s": sync_s, "sync_bytes": sum(t.numel() * t.element_size() for t in new.values()),
            "max_logprob_diff_new": err_new, "max_logprob_diff_old": err_old, "seconds": time.perf_counter() - t0,
            "why": "; ".join(why)}


def short_train(cpu: bool, out: Path) -> dict:
    """`eppo-train --config tiny` in a subprocess (in-process envs: no Ray here); its losses must be finite."""
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        return {"ok": False, "why": "gymnasium is not importable: build the bundle (make gpu-bundle) and carry it"}
    sets = ["ray.enabled=false", f"run.out_dir={out}", "run.tensorboard=false", "run.plots=false"]
    # the dry run keeps to the RL loop (one iteration); on CUDA the tiny config runs whole, its SFT warm start too
    sets += ["sft.steps=0", "run.iterations=1"] if cpu else ["run.iterations=3"]
    cmd = [sys.executable, "-m", "eppo_train.cli", "--config", "tiny"]
    for item in sets:
        cmd += ["--set", item]
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if cpu else {})}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        return {"ok": False, "why": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}",
                "seconds": seconds}
    rows = [json.loads(line) for line in (out / "tiny" / "metrics.jsonl").read_text().splitlines()]
    losses = [r.get("loss", 0.0) for r in rows]
    return {"ok": all(math.isfinite(v) for v in losses), "losses": losses, "iterations": len(rows),
            "seconds": seconds, "why": "" if all(math.isfinite(v) for v in losses) else "a loss is not finite"}


def run_check(cpu: bool, skip_train: bool = False, engines: bool = False) -> tuple[int, dict]:
    import torch

    if not cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to torch; use --cpu for the dry run")
        return 2, {}
    device, sizes = ("cpu", CPU) if cpu else ("cuda", GPU)
    name = "cpu" if cpu else torch.cuda.get_device_name(0)
    print(f"device: {name}; torch {torch.__version__}; python {sys.version.split()[0]}", flush=True)
    t0 = time.perf_counter()
    model = random_model(sizes, device)
    tokenizer = synthetic_tokenizer(sizes.vocab)
    rate = matmul_rate(sizes.matmul, device, seconds=0.3 if cpu else 2.0)
    lrn = bench_learner(sizes, device, model)
    spec = next((v for k, v in PEAK_BF16.items() if k in name), None)
    mfu_spec = f"{lrn['flops_per_s'] / spec:.1%} of the {spec / 1e12:.0f} TFLOP/s data-sheet peak" if spec else \
        "no data-sheet peak known for this device"
    print(f"model: random Qwen2, {lrn['params'] / 1e6:,.1f}M parameters ({sizes.layers} layers, hidden {sizes.hidden},"
          f" vocab {sizes.vocab}); bf16 matmul {sizes.matmul}^3: {rate / 1e12:.2f} TFLOP/s", flush=True)
    print(f"learner step (bf16 autocast, {sizes.seqs}x{sizes.seq_len} tokens, {sizes.steps} steps): "
          f"{lrn['tokens_per_s']:,.0f} tokens/s, {lrn['flops_per_s'] / 1e12:.2f} TFLOP/s model FLOPs; "
          f"MFU {lrn['flops_per_s'] / rate:.1%} of the measured matmul rate, {mfu_spec}; "
          f"loss finite: {lrn['loss_finite']}{_peak_text(lrn['peak_gib'])}", flush=True)
    del lrn["learner"]  # frees its optimizer state before generation
    if device == "cuda":
        torch.cuda.empty_cache()
    gen = bench_generation(sizes, device, model, tokenizer)
    print(f"HF generation (bf16, {sizes.gen_prompts} prompts x {sizes.gen_prompt_len} tokens, up to "
          f"{sizes.gen_new_tokens} new): {gen['tokens_per_s']:,.0f} new tokens/s ({gen['new_tokens']} tokens)"
          f"{_peak_text(gen['peak_gib'])}", flush=True)
    sharded = bench_sharded(cpu)
    backend = "gloo" if cpu else "NCCL"
    print(f"sharded learner (FSDP2, {sharded['world']} ranks over {backend}, activation checkpointing): "
          + (f"{sharded['tokens_per_s']:,.0f} tokens/s; losses finite: {sharded['loss_finite']}; first step within "
             f"{sharded['worst_rel_diff']:.2g} relative of one process's (bound {sharded['tolerance']:g}); sharded "
             f"checkpoint resumed in one process exactly{_peak_text(sharded['peak_gib'])}"
             if sharded["ok"] else f"FAILED ({sharded['why']})"), flush=True)
    loaded = sorted(m for m in ("gymnasium", "ray", "vllm") if sys.modules.get(m) is not None)
    print(f"modules loaded by the timed part beyond torch/transformers: {', '.join(loaded) or 'none'}", flush=True)
    del model
    report = {"device": name, "matmul_flops_per_s": rate, "learner": lrn, "generation": gen, "sharded": sharded,
              "foreign": loaded}
    ok = lrn["loss_finite"] and sharded["ok"] and not loaded
    if engines or not cpu:  # after the timed part: vLLM's import would count as a foreign module there
        if device == "cuda":
            torch.cuda.empty_cache()
        try:
            eng = check_engines(cpu)
        except Exception as exc:  # an engine that cannot start or load: this section fails, the report stays
            eng = {"ran": True, "ok": False, "why": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
        report["engines"] = eng
        if not eng["ran"]:
            print(f"vLLM engines (generator.engines=2): skipped ({eng['why']})", flush=True)
        elif eng["ok"]:
            print(f"vLLM engines (generator.engines=2): {eng['generations']} generations back in order, groups "
                  f"{eng['load']}; weight sync {eng['sync_bytes'] / 2**20:.1f} MiB in {eng['sync_s']:.2f}s to both, "
                  f"next sample's log-probs within {eng['max_logprob_diff_new']:.2g} of the new weights "
                  f"(old: {eng['max_logprob_diff_old']:.2g}); {eng['seconds']:.0f}s", flush=True)
        else:
            print(f"vLLM engines (generator.engines=2): FAILED ({eng['why']})", flush=True)
        ok = ok and eng["ok"]
    if not skip_train:
        with tempfile.TemporaryDirectory(prefix="eppo-gpu-check-") as tmp:
            train = short_train(cpu, Path(tmp))
        report["train"] = train
        state = "ok" if train["ok"] else f"FAILED ({train['why']})"
        print(f"eppo-train --config tiny on {device}: {state}; losses {train.get('losses')}; "
              f"{train.get('seconds', 0.0):.0f}s", flush=True)
        ok = ok and train["ok"]
    print(f"gpu_check: {'passed' if ok else 'FAILED'} in {time.perf_counter() - t0:.0f}s", flush=True)
    return (0 if ok else 1), report


def make_bundle(dest: Path) -> int:
    """Copy gymnasium (+ its pure-Python deps), psutil and the tiny model into `dest` (site/ and cache/)."""
    import importlib


    if dest.exists():
        shutil.rmtree(dest)
    for name in BUNDLE_PACKAGES:
        src = Path(importlib.import_module(name).__file__).parent
        shutil.copytree(src, dest / "site" / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(tiny_model_dir(), dest / "cache" / "models" / TINY_MODEL_NAME)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"bundle written to {dest} ({size / 2**20:.1f} MiB): carry it with scripts/gpu_check.sh")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="?", default="check", choices=("check", "bundle"))
    p.add_argument("dest", nargs="?", help="bundle: the folder to write")
    p.add_argument("--cpu", action="store_true", help="a dry run on CPU with tiny sizes")
    p.add_argument("--skip-train", action="store_true", help="only the timed part (no eppo-train run)")
    p.add_argument("--engines", action="store_true",
                   help="with --cpu: the two-engine vLLM check too (always on CUDA, where vLLM is importable)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args(argv)
    if args.what == "bundle":
        if not args.dest:
            p.error("bundle needs a destination folder")
        return make_bundle(Path(args.dest))
    code, report = run_check(args.cpu, args.skip_train, args.engines)
    if args.json and report:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main())
