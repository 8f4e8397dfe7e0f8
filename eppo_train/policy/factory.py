"""Build an `Agent` from a name, the way a user types it: `make_policy("latest")`, `make_policy("runs/x/sft")`.

    default | tiny | smollm2       a shipped model (models.resolve_model)
    latest                         the newest checkpoint under runs/ (the default model when there is none)
    PATH | hf:PATH | vllm:PATH     a transformers folder; `vllm:` forces the vLLM backend for it
    openai:URL                     an OpenAI-compatible endpoint (text only: evaluation, not training)
    expert | random[:SEED]         each task's oracle, or random admissible/tool-shaped actions

Model names run on `backend` ("hf": transformers, "vllm": the vLLM engine). The factory is the one place a name
becomes a policy, so the CLI, the pipeline and studies accept the same names. Each `KIND:ARG` prefix is an entry of
`POLICIES` (the registry style of losses, estimators and tasks, `eppo_train.core.registry.Registry`), so a new kind is one
`POLICIES.register(...)` call; a name with no registered prefix is a model name (`resolve_model`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from eppo_train.core.registry import Registry, check_entry
from eppo_train.policy.agents import Agent, ChatAgent, ExpertAgent, PolicyAgent, RandomAgent
from eppo_train.policy.base import SamplingParams
from eppo_train.policy.engine import EngineError, EngineSpec, make_engine
from eppo_train.policy.models import ModelNotFoundError, resolve_model
from eppo_train.policy.openai import OpenAIChat

BACKENDS = ("hf", "vllm")
SHIPPED = ("default", "tiny", "smollm2")  # for the error message; models.resolve_model knows every alias


class PolicyNameError(ValueError):
    """A policy name or backend the factory cannot build: one line for the user."""


@dataclass
class PolicyOptions:
    model_name: str | None = None  # the model name sent to an openai endpoint
    device: str | None = None
    dtype: str = "float32"
    batch_size: int = 64  # most sequences per generate call (HF splits larger batches)
    params: SamplingParams = field(default_factory=lambda: SamplingParams(256, 0.0, 1.0, 0))
    max_model_len: int = 4096  # vLLM: prompt + completion tokens per sequence


def newest_model_folder(root: Path = Path("runs")) -> Path | None:
    """The newest folder under `root` holding a transformers model (config.json + weights), from any run: what
    `latest` names (a run's own newest checkpoint is `trainer.latest_checkpoint`)."""
    if not root.exists():
        return None
    found = [p.parent for p in root.glob("**/config.json") if any(p.parent.glob("*.safetensors"))]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _model_agent(path: str, backend: str, opts: PolicyOptions) -> Agent:
    if backend == "hf":
        from eppo_train.policy.hf import HFPolicy

        policy = HFPolicy(path, device=opts.device, dtype=opts.dtype, max_batch=opts.batch_size)
        return PolicyAgent(policy, opts.params)

    try:
        policy = make_engine(EngineSpec(path, "vllm", opts.dtype, opts.max_model_len,
                                           max_sequences=opts.batch_size))
    except EngineError as exc:
        raise PolicyNameError(str(exc)) from None
    return PolicyAgent(policy, opts.params)


@dataclass(frozen=True)
class PolicyKind:
    """How `KIND[:ARG]` becomes an agent: `build(arg, backend, options)`; `usage` is the form the error names."""

    build: Callable[[str, str, PolicyOptions], Agent]
    usage: str


def _check_kind(name: str, kind: PolicyKind) -> None:
    """A kind make_policy cannot call as build(arg, backend, options) is one line when it registers."""
    check_entry(kind, PolicyKind, f"POLICIES.register({name!r}, ...)", "build", 3)


POLICIES: Registry[PolicyKind] = Registry("policy kind", "policy", check=_check_kind)


def _path_kind(kind: str) -> Callable[[str, str, PolicyOptions], Agent]:
    def build(arg: str, backend: str, opts: PolicyOptions) -> Agent:
        if not arg:
            raise PolicyNameError(f"{kind} policy needs a path: {kind}:PATH")
        return _model_agent(arg, kind, opts)  # the prefix chooses the backend

    return build


def _latest(arg: str, backend: str, opts: PolicyOptions) -> Agent:
    found = newest_model_folder()
    # say which: the report names the policy `latest` only, and a newer run (a tiny smoke test) takes its place
    print(f"latest: {found}" if found else "no checkpoint under runs/: evaluating the default model", file=sys.stderr)
    return _model_agent(str(found) if found else "default", backend, opts)


def _random(arg: str, backend: str, opts: PolicyOptions) -> Agent:
    if arg and not arg.isdigit():
        raise PolicyNameError(f"random policy seed must be a number, got {arg!r}")
    return RandomAgent(seed=int(arg) if arg else 0)


def _openai(arg: str, backend: str, opts: PolicyOptions) -> Agent:

    if not arg:
        raise PolicyNameError("openai policy needs a URL: openai:http://host:port/v1")
    return ChatAgent(OpenAIChat(arg, model=opts.model_name), opts.params)


for _kind in BACKENDS:
    POLICIES.register(_kind, PolicyKind(_path_kind(_kind), f"{_kind}:PATH"))
POLICIES.register("openai", PolicyKind(_openai, "openai:URL"))
POLICIES.register("latest", PolicyKind(_latest, "latest"))
POLICIES.register("expert", PolicyKind(lambda arg, backend, opts: ExpertAgent(), "expert"))
POLICIES.register("random", PolicyKind(_random, "random"))


def _named_model(name: str, backend: str, opts: PolicyOptions) -> Agent:
    """A shipped model name, a folder, or (with network) a hub id: whatever models.resolve_model takes."""

    try:
        resolve_model(name)
    except ModelNotFoundError as exc:
        if Path(name).exists():
            raise PolicyNameError(str(exc)) from None
        kinds = ", ".join(POLICIES[k].usage for k in POLICIES)
        raise PolicyNameError(f"unknown policy {name!r}; use a model folder, {kinds} or one of: "
                              f"{', '.join(SHIPPED)}") from None
    return _model_agent(name, backend, opts)


def make_policy(name: str, backend: str = "hf", options: PolicyOptions | None = None) -> Agent:
    """The agent for `name` (see the module docstring); model names load on `backend`."""

    opts = options or PolicyOptions()
    if backend not in BACKENDS:
        raise PolicyNameError(f"unknown backend {backend!r}; use one of: {', '.join(BACKENDS)}")
    kind, _, arg = name.partition(":")
    try:
        if kind in POLICIES:
            return POLICIES[kind].build(arg, backend, opts)
        return _named_model(name, backend, opts)
    except ModelNotFoundError as exc:
        raise PolicyNameError(str(exc)) from None
