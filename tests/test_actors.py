"""The generator and learner actors' own set-up, run as plain objects (what Ray runs inside each actor)."""

from __future__ import annotations

import tempfile

import torch

from eppo_train.config import load_config, to_dict
from eppo_train.learner.workers import GeneratorWorker, LearnerWorker, engine_spec, folder_files
from eppo_train.policy.base import SamplingParams
from eppo_train.policy.models import tiny_model_dir


def test_a_shipped_model_folder_is_gone_once_both_actors_have_loaded_it(tmp_path, monkeypatch):
    """On a cluster the model reaches each actor as files, written to a node-local folder. The actors end by
    `ray.kill`, which runs no clean-up: that folder has to go as soon as the model is loaded (each run left a copy
    of the model per actor in /tmp). Both actors keep working without it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cfg = load_config("tiny")
    files = folder_files(tiny_model_dir())
    generator = GeneratorWorker(engine_spec(cfg), 1, files)
    learner = LearnerWorker(to_dict(cfg), 1, files)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("eppo-")) == []

    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    before = generator.generate([[1, 2, 3]], greedy)[0].token_ids
    weights = learner.weights()
    assert generator.update_weights({name: torch.zeros_like(t) for name, t in weights.items()}) > 0
    assert generator.generate([[1, 2, 3]], greedy)[0].token_ids != before  # the zeroed weights reached it
    generator.close()
