"""The frozen-layer cache (frozen_cache.py): the same update as the full forward, frozen blocks not rerun, fallback."""

import random

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from eppo_train.config import load_config
from eppo_train.core.records import Sample
from eppo_train.learner.frozen_cache import cache_start, decoder_layers
from eppo_train.learner.learner import Learner, freeze_below_top, micro_batches

VOCAB = 512
LAYERS, TOP = 4, 2
BUDGET = 40  # padded tokens per micro-batch: several micro-batches, each with padding


def llama(**over) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, **over)
    return LlamaForCausalLM(cfg)


def gpt2() -> GPT2LMHeadModel:
    # GPT-2 adds its position embeddings (`wpe`) to `inputs_embeds`: the cached path adds them a second time
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=32, n_layer=LAYERS, n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def multi_turn_batch(seed: int, n: int = 8) -> list[Sample]:
    """Two tasks, prompt / reply / observation / reply masks, lengths that differ (padding in every micro-batch)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, r1, o, r2 = rng.randint(3, 8), rng.randint(2, 5), rng.randint(1, 4), rng.randint(0, 4)
        mask = [0] * p + [1] * r1 + [0] * o + [1] * r2
        ids = [rng.randrange(10, VOCAB) for _ in mask]
        s = Sample("even" if i % 2 == 0 else "odd", f"g{i // 4}", f"e{i}", -1, ids, mask,
                   [rng.uniform(-7.0, -5.0) * m for m in mask], float(i % 3 == 0))
        s.advantage = 1.0 if i % 3 == 0 else -0.5
        out.append(s)
    return out


def cfg_for(cache: bool, algo: str = "eppo", top: int = TOP, kl_coef: float = 0.0):
    return load_config("tiny", [f"algo.name={algo}", "pacing.warmup=0", "learner.lr=1e-2", "learner.epochs=2",
                                "learner.mini_batches=2", f"learner.micro_batch_tokens={BUDGET}",
                                f"learner.train_top_layers={top}", f"learner.cache_frozen={str(cache).lower()}",
                                f"algo.kl_coef={kl_coef}"])


def run(model: torch.nn.Module, cache: bool, algo: str = "eppo", steps: int = 2, kl_coef: float = 0.0):
    learner = Learner(cfg_for(cache, algo, kl_coef=kl_coef), model=model, device="cpu")
    reports = [learner.train_step(multi_turn_batch(seed)) for seed in range(steps)]
    return learner, reports


@pytest.mark.parametrize(("algo", "kl_coef"), [("eppo", 0.0), ("grpo", 0.0), ("grpo", 0.5)])
def test_cached_update_equals_the_full_forward(algo, kl_coef):
    """Equal up to float rounding, not bit for bit: the cached path runs the frozen blocks on other batch shapes,
    and on some CPUs (an AMD EPYC host, for one) the kernels then round differently (loss ~1e-8 apart).
    AdamW turns such noise on near-zero gradient entries into updates that differ by a part in 1e4, so the weights
    are compared by their update, and steps after the first (which see those weights) with a looser tolerance. A
    cached path that is really wrong is refused up front by the learner's own comparison (the GPT-2 test below)."""
    on, on_reports = run(llama(), cache=True, algo=algo, kl_coef=kl_coef)
    off, off_reports = run(llama(), cache=False, algo=algo, kl_coef=kl_coef)
    assert on.cache_from == LAYERS - TOP and on._cache_checked and off.cache_from is None
    for step, (a, b) in enumerate(zip(on_reports, off_reports, strict=True)):
        rel = 1e-5 if step == 0 else 5e-4
        for key in ("loss", "grad_norm", "learner_tokens"):
            assert a.metrics[key] == pytest.approx(b.metrics[key], rel=rel, abs=1e-7), (step, key)
        assert set(a.per_task) == set(b.per_task) == {"even", "odd"}
        for task in a.per_task:
            for key, value in a.per_task[task].items():
                assert value == pytest.approx(b.per_task[task][key], rel=rel, abs=1e-7), (step, task, key)
    moved = 0
    before = llama().state_dict()
    for (name, p), (_, q) in zip(on.model.named_parameters(), off.model.named_parameters(), strict=True):
        step_on, step_off = p.detach() - before[name], q.detach() - before[name]
        if not torch.any(step_off):
            assert not torch.any(step_on), name  # frozen either way
            continue
        moved += 1
        # measured up to 7e-5 across machines (the update itself is ~lr = 1e-2 per entry)
        assert (step_on - step_off).norm() <= 1e-3 * step_off.norm(), name
    assert moved > 0  # the update did something (lr 1e-2, two steps x two epochs x two mini-batches)


def test_frozen_blocks_are_not_rerun_in_the_optimizer_passes():
    calls = {}
    for cache in (True, False):
        model = llama()
        learner = Learner(cfg_for(cache), model=model, device="cpu")
        layers = decoder_layers(learner.model)
        count = {"bottom": 0, "top": 0}
        layers[0].register_forward_hook(lambda *_, c=count: c.__setitem__("bottom", c["bottom"] + 1))
        layers[LAYERS - TOP].register_forward_hook(lambda *_, c=count: c.__setitem__("top", c["top"] + 1))
        batch = multi_turn_batch(0)
        learner.train_step(batch)
        calls[cache] = count
        first_pass = len(micro_batches([len(s.input_ids) for s in batch], BUDGET))
    # with the cache the bottom block runs once per micro-batch of the no-grad pass and never again
    assert calls[True]["bottom"] == first_pass
    assert calls[False]["bottom"] == calls[False]["top"] > first_pass  # without it, again in every optimizer pass
    # the trained blocks run as often either way, plus once for the check of the cached path
    assert calls[True]["top"] == calls[False]["top"] + 1 == calls[False]["bottom"] + 1


def test_the_kl_reference_runs_only_its_top_blocks_from_the_cache():
    """With a KL penalty the frozen reference starts from the training model's cached states: its bottom blocks never
    run, its top ones once per micro-batch of the no-grad pass; the penalty acts (the update differs from kl_coef 0)."""
    calls = {}
    for cache in (True, False):
        learner = Learner(cfg_for(cache, "grpo", kl_coef=0.5), model=llama(), device="cpu")
        layers = decoder_layers(learner.ref)
        count = {"bottom": 0, "top": 0}
        layers[0].register_forward_hook(lambda *_, c=count: c.__setitem__("bottom", c["bottom"] + 1))
        layers[LAYERS - TOP].register_forward_hook(lambda *_, c=count: c.__setitem__("top", c["top"] + 1))
        batches = [multi_turn_batch(0), multi_turn_batch(1)]  # the second step's reference sees a moved model
        for batch in batches:
            learner.train_step(batch)
        calls[cache] = count
    first_passes = sum(len(micro_batches([len(s.input_ids) for s in b], BUDGET)) for b in batches)
    assert calls[True] == {"bottom": 0, "top": first_passes}
    assert calls[False]["bottom"] == calls[False]["top"] == calls[True]["top"]
    with_kl, kl_reports = run(llama(), cache=True, algo="grpo", kl_coef=0.5)
    without, plain_reports = run(llama(), cache=True, algo="grpo")
    assert kl_reports[1].metrics["loss"] != pytest.approx(plain_reports[1].metrics["loss"], rel=1e-4)
    # the KL to the reference, measured before each step: none before the first (the model is the reference)
    assert all(kl_reports[0].per_task[t]["ref_kl"] == pytest.approx(0.0, abs=1e-6) for t in ("even", "odd"))
    assert all(kl_reports[1].per_task[t]["ref_kl"] > 1e-4 for t in ("even", "odd"))
    assert "ref_kl" not in plain_reports[1].per_task["even"]


def test_a_model_the_cached_path_gets_wrong_falls_back(capsys):
    probe = gpt2()
    freeze_below_top(probe, TOP)
    assert cache_start(probe) == (LAYERS - TOP, "")  # nothing up front refuses it: the comparison must
    on, on_reports = run(gpt2(), cache=True, steps=1)
    err = capsys.readouterr().err
    assert on.cache_from is None and "frozen-layer cache off" in err and "differ from the full forward" in err
    off, off_reports = run(gpt2(), cache=False, steps=1)
    assert on_reports[0].metrics["loss"] == off_reports[0].metrics["loss"]
    for (name, p), (_, q) in zip(on.model.named_parameters(), off.model.named_parameters(), strict=True):
        assert torch.equal(p, q), name


def test_cache_start_refuses_what_one_comparison_cannot_see():
    model = llama()
    assert cache_start(model)[0] is None  # nothing frozen
    freeze_below_top(model, TOP)
    assert cache_start(model)[0] == LAYERS - TOP
    model.config.layer_types = ["sliding_attention", "full_attention"] * (LAYERS // 2)
    assert cache_start(model)[0] == LAYERS - TOP  # the top blocks' types are the first ones': the loop gets them right
    model.config.layer_types = ["sliding_attention"] * TOP + ["full_attention"] * (LAYERS - TOP)
    assert "layer_types" in cache_start(model)[1]
    dropout = llama(attention_dropout=0.1)
    freeze_below_top(dropout, TOP)
    assert "dropout" in cache_start(dropout)[1]
    trained_embeddings = llama()
    freeze_below_top(trained_embeddings, TOP)
    trained_embeddings.model.embed_tokens.weight.requires_grad_(True)
    assert "embed_tokens" in cache_start(trained_embeddings)[1]
