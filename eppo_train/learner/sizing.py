"""`eppo-train plan`: a learner rank's memory from the model's config alone (no weights read), and whether it fits.

Per rank, for `world` ranks (FSDP2 shards weights, gradients and AdamW state evenly; world 1 holds them whole):
  weights      P x (4 bytes fp32 | 2 bf16) / world, the master copy (the KL reference adds one more)
  gathered     the FSDP units being computed, unsharded: the root (embeddings, head, final norm) and two blocks
               (the one running and the one prefetched), in the compute precision; 0 at world 1
  gradients    T x 4 / world (T: trainable parameters: all of them, or the LoRA adapters)
  optimizer    T x 8 / world (AdamW's two moments in fp32)
  activations  what backward keeps for one micro-batch of `micro_batch_tokens` tokens: per decoder block and token
               about 10 H + 4 I values (norms, q/k/v with rotary and GQA-expanded, attention out, gate/up/act/product;
               scaled dot-product attention keeps no T x T matrix), in the compute precision; with activation
               checkpointing each block's input only plus one block's worth being recomputed. Plus the log-prob
               head: `logit_chunk` x V fp32 logits a few times over
  runtime      on CPU the process itself (Python, torch, transformers: measured RSS before any model loads); on CUDA 0
               (`torch.cuda.max_memory_allocated` counts tensors only)
The engines' KV cache (per engine: 2 x layers x kv heads x head dim x bytes x the batch's tokens) is printed apart:
on a GPU shared with the learner it counts against the same memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from eppo_train.policy.models import resolve_model

GIB = 1024**3
CPU_RUNTIME_GIB = 0.55  # RSS of a learner process with torch and transformers imported, before the model (measured)
MODEL_CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "models"


@dataclass
class Shape:
    """What sizing needs of a transformers decoder config."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool = False

    @classmethod
    def from_config(cls, c: dict) -> Shape:
        heads = int(c["num_attention_heads"])
        hidden = int(c["hidden_size"])
        return cls(hidden=hidden, intermediate=int(c["intermediate_size"]), layers=int(c["num_hidden_layers"]),
                   heads=heads, kv_heads=int(c.get("num_key_value_heads") or heads),
                   head_dim=int(c.get("head_dim") or hidden // heads), vocab=int(c["vocab_size"]),
                   tied=bool(c.get("tie_word_embeddings", False)),
                   qkv_bias=bool(c.get("attention_bias", c.get("model_type") == "qwen2")))

    def projections(self) -> dict[str, tuple[int, int]]:
        """Each block's linear layers: name -> (in, out)."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        q = self.heads * self.head_dim
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, self.intermediate), "up_proj": (h, self.intermediate),
                "down_proj": (self.intermediate, h)}

    def block_params(self) -> int:
        biases = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return sum(i * o for i, o in self.projections().values()) + biases + 2 * self.hidden

    def root_params(self) -> int:
        """Embeddings, the final norm and (untied) the head."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def params(self) -> int:
        return self.layers * self.block_params() + self.root_params()

    def lora_params(self, r: int, targets: list[str]) -> int:
        return self.layers * sum(r * (i + o) for name, (i, o) in self.projections().items() if name in targets)


@dataclass
class Plan:
    model: str
    shape: Shape
    world: int
    device: str
    rows: dict[str, float] = field(default_factory=dict)  # component -> bytes per rank
    kv_cache: float = 0.0  # bytes per engine
    params: int = 0
    trainable: int = 0

    @property
    def total(self) -> float:
        return sum(self.rows.values())


def read_shape(model: str) -> tuple[Shape, str]:
    """A model's shape from its config.json: a folder, a config.json, a shipped name (eppo_train/configs/models:
    qwen2.5-1.5b, qwen2.5-7b) or an alias `resolve_model` knows ('default', 'tiny')."""
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "config.json"
    elif not path.exists():
        shipped = MODEL_CONFIGS / f"{model.lower()}.json"
        if shipped.is_file():
            path = shipped
        else:
            path = Path(resolve_model(model)) / "config.json"
    if not path.is_file():
        raise ValueError(f"no config.json for {model!r} (give a model folder, a config.json or one of "
                         f"{', '.join(sorted(p.stem for p in MODEL_CONFIGS.glob('*.json')))})")
    config = json.loads(path.read_text())
    config = config.get("text_config", config)
    try:
        return Shape.from_config(config), str(path)
    except KeyError as exc:
        raise ValueError(f"{path}: not a decoder config (no {exc.args[0]})") from None


def plan(shape: Shape, world: int = 1, *, device: str = "cuda", lora_r: int = 0,
         lora_targets: list[str] | None = None, micro_batch_tokens: int = 2048, logit_chunk: int = 256,
         checkpointing: bool = False, master_bytes: int = 4, reference: bool = False, engine_tokens: int = 0,
         engine_bytes: int = 2, top_layers: int = 0, model: str = "") -> Plan:
    """Per-rank bytes of a learner rank; `engine_tokens`: the tokens one engine keeps cached (episodes x length);
    `top_layers` > 0: only the top blocks train (backward keeps activations for those only)."""
    params = shape.params()
    trained = min(top_layers, shape.layers) if top_layers > 0 and lora_r == 0 else shape.layers
    if lora_r > 0:
        trainable = shape.lora_params(lora_r, lora_targets or [])
    elif trained < shape.layers:
        trainable = trained * shape.block_params() + shape.hidden
    else:
        trainable = params
    compute = 2 if device == "cuda" else 4  # bf16 under autocast / mixed precision on a GPU, fp32 on this CPU
    h, i = shape.hidden, shape.intermediate
    block_act = (10 * h + 4 * i) * compute  # per token
    tokens = micro_batch_tokens
    if checkpointing:
        activations = tokens * (trained * h * compute + block_act)
    else:
        activations = tokens * trained * block_act
    activations += tokens * h * 4 + 3 * logit_chunk * shape.vocab * 4  # the last hidden states; the head's chunk
    rows = {
        "weights": params * master_bytes / world * (2 if reference and lora_r == 0 else 1),
        "gathered": 0.0 if world == 1 else (shape.root_params() + 2 * shape.block_params()) * compute,
        "gradients": trainable * 4 / world,
        "optimizer": trainable * 8 / world,
        "activations": float(activations),
        "runtime": CPU_RUNTIME_GIB * GIB if device == "cpu" else 0.0,
    }
    if lora_r > 0:  # the adapters' own weights, unsharded in the count above only through `params`
        rows["weights"] += trainable * 4 / world
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * engine_bytes * engine_tokens
    return Plan(model, shape, world, device, rows, float(kv), params, trainable)


def render(p: Plan, gpu_gib: float, engines: int, engine_share: float = 0.3) -> str:
    """The plan as the lines `eppo-train plan` prints. On CUDA an engine sharing a learner's GPU takes
    `engine_share` of its memory (vLLM's `gpu_memory_utilization`: its weights plus its KV cache)."""
    s = p.shape
    lines = [f"{p.model}: {p.params / 1e9:.3g} B parameters ({s.layers} blocks, hidden {s.hidden}, vocab {s.vocab}); "
             f"trainable {p.trainable / 1e9:.3g} B; {p.world} rank(s) on {p.device}",
             "per learner rank:"]
    for name, value in p.rows.items():
        lines.append(f"  {name:<12} {value / GIB:8.2f} GiB")
    lines.append(f"  {'total':<12} {p.total / GIB:8.2f} GiB")
    if engines and p.device == "cuda":
        weights = p.params * 2
        budget = engine_share * gpu_gib * GIB
        kv = budget - weights
        lines.append(f"per engine ({engines}): {engine_share:.0%} of a GPU, {budget / GIB:.1f} GiB: bf16 weights "
                     f"{weights / GIB:.2f} GiB, KV cache {kv / GIB:.1f} GiB; the batch at full length would "
                     f"hold {p.kv_cache / GIB:.1f} GiB" + (" (vLLM preempts and re-prefills past its cache)"
                                                            if p.kv_cache > kv else ""))
        need = p.total + budget
        ok = need <= 0.9 * gpu_gib * GIB and kv > 0
        lines.append(f"{'fits' if ok else 'does NOT fit'} on {gpu_gib:g} GiB GPUs: {need / GIB:.1f} GiB per GPU "
                     "with an engine beside the rank (10 % kept for the allocator)")
    elif engines:
        lines.append(f"per engine ({engines}): bf16 weights {p.params * 2 / GIB:.2f} GiB; KV cache for the batch at "
                     f"full length {p.kv_cache / GIB:.2f} GiB")
    return "\n".join(lines)
