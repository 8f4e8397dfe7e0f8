"""The off-policy regime and the clip diagnostics: the ratio's spread and the tokens each clip bound acts on,
counted by hand; stale sampling weights (`learner.staleness`) whose log-probs are the old ones exactly."""

import math

import pytest
import torch

from eppo_train.config import load_config
from eppo_train.learner.learner import Learner, ratio_diagnostics, token_logprobs_entropy
from eppo_train.policy.models import load_model
from tests.test_trainer_learner import make_batch


@pytest.fixture(scope="module")
def model_path():
    from eppo_train.policy.models import tiny_model_dir

    return str(tiny_model_dir())


def test_ratio_diagnostics_by_hand():
    # one row, four model tokens; eps_low 0.2 and eps_high 0.28 on every token
    old = torch.zeros(1, 5)
    ratios = [1.0, 0.7, 1.5, 0.9, 1.4]  # position 0 off the mask
    new = torch.log(torch.tensor([ratios]))
    mask = torch.tensor([[0.0, 1, 1, 1, 1]])
    adv = torch.tensor([[0.0, -1, 1, 1, -1]])  # 0.7 with A<0: low bound acts; 1.5 with A>0: high bound acts;
    # 0.9 with A>0: inside; 1.4 with A<0: past the high bound but the clip does not act on a negative advantage
    b = {"old": old, "mask": mask, "adv": adv, "lo": torch.full((1, 5), 0.2), "hi": torch.full((1, 5), 0.28)}
    d = ratio_diagnostics(new, b)
    assert d["clip_low"].tolist() == [1.0] and d["clip_high"].tolist() == [1.0]
    assert d["ratio_dev"].item() == pytest.approx(0.3 + 0.5 + 0.1 + 0.4, abs=1e-6)
    assert d["ratio_sum"].item() == pytest.approx(0.7 + 1.5 + 0.9 + 1.4, abs=1e-6)
    assert d["ratio_sq"].item() == pytest.approx(0.49 + 2.25 + 0.81 + 1.96, abs=1e-5)
    assert d["ratio_max"].item() == pytest.approx(1.5, abs=1e-6)


def _cfg(**over):
    sets = [f"{k}={v}" for k, v in over.items()]
    return load_config("tiny", ["learner.lr=5e-2", "pacing.warmup=0", "algo.name=grpo", *sets])


def test_on_policy_single_step_never_clips(model_path):
    learner = Learner(_cfg(**{"learner.mini_batches": 1}), load_model(model_path))
    report = learner.train_step(make_batch())
    assert report.metrics["optimizer_steps"] == 1
    for values in report.per_task.values():  # one step from the sampling weights: the ratio is 1 everywhere
        assert values["clip_low_frac"] == 0 and values["clip_high_frac"] == 0
        assert values["ratio_dev"] == pytest.approx(0.0, abs=1e-5)
        assert values["ratio_max"] == pytest.approx(1.0, abs=1e-5)


def test_more_steps_per_batch_move_the_ratio_and_the_clip_acts(model_path):
    learner = Learner(_cfg(**{"learner.mini_batches": 2, "learner.epochs": 4}), load_model(model_path))
    report = learner.train_step(make_batch(n=12))
    assert report.metrics["optimizer_steps"] == 8
    dev = [v["ratio_dev"] for v in report.per_task.values()]
    assert min(dev) > 1e-3  # later passes are off-policy
    acted = report.metrics["clip_low_frac"] + report.metrics["clip_high_frac"]
    assert acted > 0 and report.metrics["clip_frac"] >= acted - 1e-9  # ppo_clip's own count covers both bounds
    assert all(0 <= v["ratio_std"] for v in report.per_task.values())


def test_stale_sampling_weights_are_the_old_logprobs(model_path):
    cfg = _cfg(**{"learner.staleness": 2})
    learner = Learner(cfg, load_model(model_path))
    start = learner.sampling_weights()
    batch = make_batch()
    learner.train_step(batch)
    learner.train_step(batch)
    # after two steps with staleness 2 the generator still samples with the start's weights ...
    assert all(torch.equal(start[k], v) for k, v in learner.sampling_weights().items())
    assert not all(torch.equal(start[k], v) for k, v in learner.trainable_weights().items())
    learner.train_step(batch)  # ... and after three, with the weights after the first
    after_three = learner.sampling_weights()
    assert not all(torch.equal(start[k], v) for k, v in after_three.items())
    assert len(learner.history) == 3

    # pass 1 runs with the sampling weights: its old log-probs are those of a model holding them, and the learner
    # gets its own weights back
    seen = {}
    original = learner.pacer.update

    def spy(entropy):
        seen["entropy"] = dict(entropy)
        return original(entropy)

    learner.pacer.update = spy
    own = learner.trainable_weights()
    sampler = load_model(model_path)
    sampler.load_state_dict({**sampler.state_dict(), **after_three})
    from eppo_train.learner.learner import pad_tokens

    ids, attn, mask = pad_tokens(batch)
    with torch.no_grad():
        _, ent = token_logprobs_entropy(sampler, ids, attn, mask)
    report = learner.train_step(batch)
    for task in seen["entropy"]:
        rows = [i for i, s in enumerate(batch) if s.task == task]
        want = float(sum((ent[r] * mask[r]).sum() for r in rows) / sum(mask[r].sum() for r in rows))
        assert seen["entropy"][task] == pytest.approx(want, rel=1e-4)
    # the first optimizer pass starts from the learner's own weights, two steps past the sampler: ratio != 1
    assert max(v["ratio_dev"] for v in report.per_task.values()) > 1e-4
    assert not all(torch.equal(own[k], v) for k, v in learner.trainable_weights().items())


def test_staleness_history_survives_a_checkpoint(model_path, tmp_path):
    cfg = _cfg(**{"learner.staleness": 1})
    a = Learner(cfg, load_model(model_path))
    for _ in range(2):
        a.train_step(make_batch())
    a.save(tmp_path / "ckpt")
    b = Learner(cfg, load_model(model_path))
    b.load(tmp_path / "ckpt")
    assert len(b.history) == 2
    for x, y in zip(a.history, b.history, strict=True):
        assert all(torch.equal(x[k], y[k]) for k in x)
    ra, rb = a.train_step(make_batch(seed=3)), b.train_step(make_batch(seed=3))
    assert math.isclose(ra.metrics["loss"], rb.metrics["loss"], rel_tol=1e-6)


def test_one_optimizer_step_skips_the_no_grad_pass_with_the_same_update(model_path):
    """One step from the sampling weights with unpaced bounds: the old log-probs come from the optimizer pass
    itself. The same step through the two-pass path (forced by a history of two equal weight sets, so pass 1 runs
    under the very same weights) gives the same loss, diagnostics and weights."""
    batch = make_batch(n=12)
    one = Learner(_cfg(), load_model(model_path))
    forward_calls = []
    handle = one.model.base_model.register_forward_hook(lambda *_: forward_calls.append(1))
    a = one.train_step(batch)
    handle.remove()
    assert len(forward_calls) == 1  # 12 short rows: one micro-batch, one forward (no pass 1)
    two = Learner(_cfg(**{"learner.staleness": 1}), load_model(model_path))
    two.history.append(two.trainable_weights())
    b = two.train_step(batch)
    assert a.metrics["loss"] == pytest.approx(b.metrics["loss"], rel=1e-6, abs=1e-9)
    for task, values in a.per_task.items():
        for key, value in values.items():
            assert value == pytest.approx(b.per_task[task][key], rel=1e-5, abs=1e-7), (task, key)
        assert values["ratio_dev"] == 0.0
    for name, w in one.trainable_weights().items():
        assert torch.allclose(w, two.trainable_weights()[name], atol=1e-7), name
