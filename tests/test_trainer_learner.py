"""The learner on the tiny random model: exact log-probs, exact gradient accumulation, updates, resume."""

import math
import random

import pytest
import torch

from eppo_train.config import load_config
from eppo_train.core.records import Sample
from eppo_train.learner.learner import Learner, micro_batches, token_logprobs_entropy
from eppo_train.policy.models import load_model


@pytest.fixture(scope="module")
def model_path():
    from eppo_train.policy.models import tiny_model_dir

    return str(tiny_model_dir())


def make_batch(seed=0, n=6):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        task = "low" if i % 2 else "high"
        p, r = rng.randint(3, 9), rng.randint(2, 6)
        ids = [rng.randint(10, 4000) for _ in range(p + r)]
        s = Sample(task, f"g{i // 3}", f"e{i}", -1, ids, [0] * p + [1] * r, [0.0] * (p + r), float(i % 3 == 0))
        s.advantage = 1.0 if i % 3 == 0 else -0.5
        out.append(s)
    return out


def cfg_for(**over):
    sets = [f"{k}={v}" for k, v in over.items()]
    return load_config("tiny", ["learner.lr=1e-2", "pacing.warmup=0", *sets])


def test_logprobs_and_entropy_match_full_softmax(model_path):
    model = load_model(model_path)
    ids = torch.randint(10, 4000, (3, 7))
    attn = torch.ones_like(ids)
    # row 2: two replies with a tool observation between them (full context mode): the gap stays out
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0, 0], [0, 1, 1, 0, 0, 1, 0]], dtype=torch.float32)
    lp, ent = token_logprobs_entropy(model, ids, attn, mask, chunk=3)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)
    want = logp[:, :-1].gather(2, ids[:, 1:, None]).squeeze(2) * mask[:, 1:]
    want_ent = -(logp.exp() * logp).sum(-1)[:, :-1] * mask[:, 1:]
    assert torch.allclose(lp[:, 1:], want, atol=1e-5) and lp[:, 0].abs().sum() == 0
    assert torch.allclose(ent[:, 1:], want_ent, atol=1e-4)


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
def test_first_step_loss_by_hand(model_path, agg):
    # old log-probs are recomputed with the training model, so the one update of a batch starts at ratio 1 (inside
    # any clip range): the loss is -sum_i A_i n_i / sum_i n_i (token mean) or -mean_i A_i (sequence mean).
    # make_batch(): A = +1 for samples 0 and 3, -0.5 for 1, 2, 4, 5; sample 0 raised to +2 (A sums to 1, not 0)
    batch = make_batch()
    batch[0].advantage = 2.0
    n = [s.num_response_tokens for s in batch]
    want = (-(2 * n[0] + n[3]) + 0.5 * (n[1] + n[2] + n[4] + n[5])) / sum(n) if agg == "token_mean" else -1 / 6
    report = Learner(cfg_for(**{"algo.name": "dapo", "algo.loss_agg": agg})).train_step(batch)
    assert report.metrics["loss"] == pytest.approx(want, abs=1e-6)


def test_micro_batches_respect_the_budget():
    lengths = [5, 9, 3, 12, 7]
    batches = micro_batches(lengths, 20)
    assert sorted(i for b in batches for i in b) == list(range(5))
    assert all(len(b) * max(lengths[i] for i in b) <= 20 or len(b) == 1 for b in batches)


@pytest.mark.parametrize("algo", ["grpo", "eppo"])
def test_accumulation_is_exact(model_path, algo):
    # one big micro-batch vs many small ones: the same update
    grads = []
    for budget in (4096, 16):
        torch.manual_seed(0)
        learner = Learner(cfg_for(**{"algo.name": algo, "learner.micro_batch_tokens": budget}))
        learner.train_step(make_batch())  # the (clipped) gradient stays in .grad after the step
        grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
    for n in grads[0]:
        assert torch.allclose(grads[0][n], grads[1][n], rtol=1e-4, atol=1e-7), n


def test_step_changes_weights_and_reports_per_task(model_path):
    learner = Learner(cfg_for())
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    report = learner.train_step(make_batch())
    changed = [n for n, p in learner.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed
    assert set(report.per_task) == {"low", "high"}
    for t in report.per_task.values():
        assert {"entropy", "entropy_ema", "eps_low", "eps_high", "clip_frac", "approx_kl"} <= set(t)
    # EPPO with warmup 0: the task with the lower entropy has the tighter range
    lo, hi = sorted(report.per_task.values(), key=lambda t: t["entropy"])
    assert lo["eps_high"] < hi["eps_high"] and lo["eps_low"] < hi["eps_low"]
    assert report.metrics["learner_tokens_per_s"] > 0


def test_top_layers_only(model_path):
    learner = Learner(cfg_for(**{"learner.train_top_layers": 1}))
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    learner.train_step(make_batch())
    changed = {n for n, p in learner.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(n.startswith(("model.layers.1.", "model.norm")) for n in changed)
    assert set(learner.trainable_weights()) == changed


def test_checkpoint_resume_is_exact(model_path, tmp_path):
    cfg = cfg_for(**{"algo.name": "clip_cov", "learner.mini_batches": 2})
    a = Learner(cfg)
    a.train_step(make_batch(1))
    a.save(tmp_path / "ck")
    a.train_step(make_batch(2))
    b = Learner(cfg)
    b.load(tmp_path / "ck")
    assert b.step == 1 and b.pacer.step == 1
    b.train_step(make_batch(2))
    for (n, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=True):
        assert torch.equal(p, q), n
    assert a.pacer.state_dict() == b.pacer.state_dict()


def test_position_zero_is_never_in_the_loss():
    from eppo_train.learner.learner import pad_tokens

    rows = [Sample("t", "g", "e", -1, [5, 6, 7], [1, 1, 0], [0.0] * 3, 0.0),
            Sample("t", "g", "f", -1, [5, 6], [1, 1], [0.0] * 2, 0.0)]
    ids, attn, mask = pad_tokens(rows)
    assert mask.tolist() == [[0, 1, 0], [0, 1, 0]] and attn.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert ids.tolist() == [[5, 6, 7], [5, 6, 0]]


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean"])
def test_each_mini_batch_is_weighted_by_its_own_tokens_and_sequences(model_path, agg):
    # lr 0 (the weights never move, so every ratio stays 1): with A = 1 everywhere each mini-batch's loss is -1
    # (token mean over its own tokens, sequence mean over its own sequences), however it is split into
    # micro-batches (budget 16: one or two rows each) and whatever a sample with no response tokens adds
    batch = make_batch()
    for s in batch:
        s.advantage = 1.0
    empty = Sample("high", "g9", "e9", -1, [11, 12, 13], [0, 0, 0], [0.0] * 3, 0.0)
    empty.advantage = 1.0
    learner = Learner(cfg_for(**{"algo.name": "dapo", "algo.loss_agg": agg, "learner.mini_batches": 2,
                                 "learner.micro_batch_tokens": 16}))
    for group in learner.optimizer.param_groups:
        group["lr"] = 0.0
    report = learner.train_step([*batch, empty])
    assert report.metrics["loss"] == pytest.approx(-1.0, abs=1e-6)


def test_reported_entropy_clip_fraction_and_kl_by_hand(model_path):
    # old log-probs kept (not recomputed) and set one nat above the model's own: every ratio is e^-1 < 1 - 0.2, so
    # exactly the tokens with A < 0 are clipped, and KL(old || new) per token is k3 = e^-1 - (-1) - 1 = e^-1.
    # Prompt positions carry an "old log-prob" too (0 + 1): they must count in neither figure.
    from eppo_train.learner.learner import pad_tokens

    cfg = cfg_for(**{"algo.name": "dapo", "learner.recompute_old_logprobs": "false"})
    learner = Learner(cfg)
    batch = make_batch()
    tokens = {"high": 0.0, "low": 0.0}
    negative = {"high": 0.0, "low": 0.0}
    ent_sum = {"high": 0.0, "low": 0.0}
    for s in batch:
        ids, attn, mask = pad_tokens([s])
        with torch.no_grad():
            lp, ent = token_logprobs_entropy(learner.model, ids, attn, mask)
        s.old_logprobs = (lp[0] + 1.0).tolist()
        n = float(mask.sum())
        tokens[s.task] += n
        ent_sum[s.task] += float((ent * mask).sum())
        negative[s.task] += n * (s.advantage < 0)
    want_entropy = {t: ent_sum[t] / tokens[t] for t in tokens}
    report = learner.train_step(batch)
    for t in ("high", "low"):
        got = report.per_task[t]
        assert got["entropy"] == pytest.approx(want_entropy[t], rel=1e-5), t
        assert got["clip_frac"] == pytest.approx(negative[t] / tokens[t]), t
        assert got["approx_kl"] == pytest.approx(math.exp(-1.0), rel=1e-4), t
        assert (got["eps_low"], got["eps_high"], got["pace_scale"]) == (0.2, 0.28, 1.0), t  # dapo is not paced
    assert Learner(cfg_for(**{"algo.eps_low": 0.1, "algo.eps_high": 0.4})).pacer.eps_high == 0.4


def test_the_pacers_bounds_reach_the_loss_inputs(model_path):
    learner = Learner(cfg_for(**{"algo.name": "eppo"}))
    batch = make_batch()
    learner._bounds = {"high": (0.1, 0.3)}  # task "low" has none: the base bounds
    b = learner._pad(batch, [0, 1])
    n0, n1 = len(batch[0].input_ids), len(batch[1].input_ids)
    assert batch[0].task == "high" and batch[1].task == "low"
    assert torch.allclose(b["lo"][0, :n0], torch.tensor(0.1)) and torch.allclose(b["hi"][0, :n0], torch.tensor(0.3))
    assert torch.allclose(b["lo"][1, :n1], torch.tensor(0.2)) and torch.allclose(b["hi"][1, :n1], torch.tensor(0.28))


def _first_step_ratios(learner: Learner, batch: list[Sample]) -> list[float]:
    """max |ratio - 1| the loss sees in each micro-batch of one step with lr 0 (the weights never move)."""
    from eppo_train.algos.losses import LossSpec

    for group in learner.optimizer.param_groups:
        group["lr"] = 0.0
    seen: list[float] = []
    fn = learner.spec.fn

    def spy(inp):  # noqa: ANN001, ANN202
        m = inp.mask > 0
        seen.append(float((torch.exp(inp.logprobs.detach() - inp.old_logprobs)[m] - 1).abs().max()))
        return fn(inp)

    learner.spec = LossSpec(spy, learner.spec.eps_low, learner.spec.eps_high, learner.spec.agg, learner.spec.paced)
    learner.train_step(batch)
    return seen


@pytest.mark.parametrize("top", [0, 1])  # 1: the optimizer passes run the top block from the cached states
def test_old_logprobs_come_from_the_batches_the_optimizer_passes_run(model_path, monkeypatch, top):
    # Under bf16 autocast a row's log-probs depend on the batch it runs in (padding width, matmul shapes): old
    # log-probs from one big no-grad batch would make the ratios of the first, on-policy step differ from 1 by up to
    # 0.2 on SmolLM2, where the clip then acts on rounding noise. The no-grad pass must run the very micro-batches of
    # the first epoch, so with the weights kept (lr 0) every ratio of every mini-batch is exactly 1.
    import eppo_train.learner.learner as learner_module

    monkeypatch.setattr(learner_module, "use_cpu_autocast", lambda asked: True)  # bf16 even where it is emulated
    batch = make_batch(3, n=12)
    for i, s in enumerate(batch):  # rows of very different lengths: padding widths differ between batchings
        s.input_ids = s.input_ids + [17 + i] * (9 * i)
        s.loss_mask = s.loss_mask + [1] * (9 * i)
        s.old_logprobs = s.old_logprobs + [0.0] * (9 * i)
    cfg = cfg_for(**{"algo.name": "eppo", "learner.mini_batches": 3, "learner.micro_batch_tokens": 200,
                     "learner.bf16_autocast_cpu": "true", "learner.train_top_layers": top})
    seen = _first_step_ratios(Learner(cfg), batch)
    assert len(seen) > 3 and max(seen) == 0.0, seen
