"""The pipeline's one engine: a later stage's model is pushed into the running engine instead of a new start, and
it then generates exactly what a fresh engine of that model does (HF backend, tiny model: greedy is exact)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from eppo_train.policy.base import SamplingParams
from eppo_train.policy.engine import EngineSpec, SharedEngine, make_engine
from eppo_train.policy.models import tiny_model_dir

PROMPTS = [[1, 5, 9, 13], [2, 4, 6]]
GREEDY = SamplingParams(12, 0.0, 1.0, 0)


def _perturbed_copy(dest: Path) -> Path:
    """The tiny model with every weight moved: a stand-in for a fine-tuned checkpoint."""
    shutil.copytree(tiny_model_dir(), dest)
    for f in dest.glob("*.safetensors"):
        weights = load_file(str(f))
        gen = torch.Generator().manual_seed(0)
        save_file({k: v + 0.5 * torch.randn(v.shape, generator=gen).to(v.dtype) for k, v in weights.items()}, str(f))
    return dest


def _tokens(engine) -> list[list[int]]:
    return [g.token_ids for g in engine.generate(PROMPTS, GREEDY)]


def test_a_pushed_model_generates_what_a_fresh_engine_of_it_does(tmp_path: Path):
    tuned = _perturbed_copy(tmp_path / "tuned")
    spec = EngineSpec("tiny", "hf", "float32")
    fresh_base, fresh_tuned = make_engine(spec), make_engine(EngineSpec(str(tuned), "hf", "float32"))
    want_base, want_tuned = _tokens(fresh_base), _tokens(fresh_tuned)
    assert want_base != want_tuned  # the push must be visible

    shared = SharedEngine(spec)
    try:
        first = shared.serving("tiny")
        assert _tokens(first) == want_base
        started = shared.engine
        second = shared.serving(str(tuned))
        assert shared.engine is started  # no second start
        assert _tokens(second) == want_tuned
        second.close()  # a stage's close leaves the shared engine running
        assert shared.engine is started and _tokens(shared.serving("tiny")) == want_base
    finally:
        shared.close()
    assert shared.engine is None
