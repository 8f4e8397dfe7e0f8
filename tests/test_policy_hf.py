"""HFPolicy on the tiny random model: log-probs are those of the sampling distribution, budgets/eos/stop end rows
where they should, weights update in place. The real default model is checked once, in a slow test."""

from __future__ import annotations

import pytest
import torch

from eppo_train.policy.base import SamplingParams
from eppo_train.policy.hf import HFPolicy
from eppo_train.policy.models import ModelNotFoundError, resolve_model, tiny_model_dir


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    return HFPolicy("tiny", device="cpu")


def _prompts(tokenizer, sizes=(1, 6, 20)) -> list[list[int]]:
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "hello " * n}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for n in sizes
    ]


def _forward_logprobs(policy: HFPolicy, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = policy.model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)


def test_resolve_model_names_and_errors(tmp_path):
    assert resolve_model("tiny") == str(tiny_model_dir())
    assert resolve_model(tiny_model_dir()) == str(tiny_model_dir())
    with pytest.raises(ModelNotFoundError):
        resolve_model(tmp_path)  # a folder without config.json
    with pytest.raises(ModelNotFoundError):
        resolve_model("no-such-model-anywhere")


def test_a_missing_run_folder_is_not_taken_for_a_hub_id(monkeypatch):
    # `eppo-train signal --model runs/nothere` (no HF_HUB_OFFLINE set yet) retried huggingface.co for 27 s
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(ModelNotFoundError, match="'runs/nothere' not found"):
        resolve_model("runs/nothere")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # a user who turned the hub on still gets their hub id through
    assert resolve_model("HuggingFaceTB/SmolLM2-360M") == "HuggingFaceTB/SmolLM2-360M"


def test_sampling_logprobs_match_a_forward_pass(policy):
    prompts = _prompts(policy.tokenizer)
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.7, seed=3))
    for prompt, gen in zip(prompts, gens, strict=True):
        assert len(gen.token_ids) == len(gen.logprobs) == 8  # the random model never picks eos in 8 tokens here
        expected = _forward_logprobs(policy, prompt, gen.token_ids, 0.7)
        assert torch.allclose(expected, torch.tensor(gen.logprobs), atol=1e-4)


def test_top_p_logprobs_are_renormalised_over_the_nucleus(policy):
    prompts = _prompts(policy.tokenizer, (3,))
    gen = policy.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0, top_p=0.5, seed=0))[0]
    full = _forward_logprobs(policy, prompts[0], gen.token_ids, 1.0)
    shift = torch.tensor(gen.logprobs) - full
    assert (shift > 0).all()  # the nucleus holds less than all the mass, so each kept token's share grows


def test_greedy_is_argmax_and_repeatable(policy):
    prompts = _prompts(policy.tokenizer)
    a = policy.generate(prompts, SamplingParams(max_new_tokens=6, temperature=0))
    b = policy.generate(list(reversed(prompts)), SamplingParams(max_new_tokens=6, temperature=0))
    assert [g.token_ids for g in a] == [g.token_ids for g in reversed(b)]  # batch order and padding do not matter
    for prompt, gen in zip(prompts, a, strict=True):
        with torch.no_grad():
            logits = policy.model(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
        assert logits.argmax(-1).tolist() == gen.token_ids


def test_budgets_eos_and_stop_strings_end_rows(policy):
    prompts = _prompts(policy.tokenizer, (2, 2))
    greedy = policy.generate(prompts[:1], SamplingParams(max_new_tokens=8, temperature=0))[0]
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0), budgets=[3, 8])
    assert len(gens[0].token_ids) == 3 and not gens[0].finished
    assert gens[1].token_ids == greedy.token_ids

    stop = policy.tokenizer.decode(greedy.token_ids[:3])
    stopped = policy.generate(prompts[:1], SamplingParams(max_new_tokens=8, temperature=0, stop=(stop,)))[0]
    assert stopped.finished and stopped.token_ids == greedy.token_ids[:3]

    saved = policy.eos_ids
    policy.eos_ids = {greedy.token_ids[4]}  # pretend the 5th greedy token is end-of-turn
    try:
        ended = policy.generate(prompts[:1], SamplingParams(max_new_tokens=8, temperature=0))[0]
    finally:
        policy.eos_ids = saved
    assert ended.finished and ended.token_ids == greedy.token_ids[: greedy.token_ids.index(greedy.token_ids[4]) + 1]


def test_update_weights_in_place_changes_and_restores_samples():
    policy = HFPolicy("tiny", device="cpu", dtype="bfloat16")
    prompts = _prompts(policy.tokenizer, (4,))
    params = SamplingParams(max_new_tokens=6, temperature=0)
    before = policy.generate(prompts, params)[0].token_ids
    original = {k: v.float().clone() for k, v in policy.model.state_dict().items()}
    torch.manual_seed(0)
    policy.update_weights({k: torch.randn_like(v) for k, v in original.items()})
    assert policy.model.model.embed_tokens.weight.dtype == torch.bfloat16  # cast to the sampler's dtype
    assert policy.generate(prompts, params)[0].token_ids != before
    policy.update_weights(original)
    assert policy.generate(prompts, params)[0].token_ids == before
    with pytest.raises(KeyError):
        policy.update_weights({"not.a.weight": torch.zeros(1)})


@pytest.mark.slow
def test_default_model_answers_a_question():
    policy = HFPolicy("default", device="cpu")
    prompt = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, return_dict=False
    )
    gen = policy.generate([prompt], SamplingParams(max_new_tokens=24, temperature=0))[0]
    assert "Paris" in gen.text and gen.finished


def test_sampler_draws_from_the_processed_distribution():
    from eppo_train.policy.hf import _Sampler

    probs = torch.tensor([0.5, 0.3, 0.2, 0.0])
    scores = probs.log().repeat(20_000, 1)  # the 0.0 entry is -inf, as after a top-p cut
    sampler = _Sampler(greedy=False, generator=torch.Generator().manual_seed(0))
    out = sampler(torch.zeros(20_000, 1, dtype=torch.long), scores)
    tokens = out.argmax(-1)
    freq = torch.bincount(tokens, minlength=4).float() / 20_000
    assert torch.allclose(freq, probs, atol=0.02) and freq[3] == 0
    assert torch.allclose(sampler.logprobs(20_000)[:, 0], probs.log()[tokens])


def test_loading_and_saving_a_model_draw_no_progress_bars(tmp_path):
    """transformers 5 drew a 'Loading weights' bar at every load and a 'Writing model shards' bar at every save, in
    among the run's progress lines (make experiment-quick: two per iteration); HF_HUB_DISABLE_PROGRESS_BARS=0 keeps
    them for whoever wants them. A fresh process: the switch is process-wide."""
    import os
    import subprocess
    import sys

    script = ("import sys\nfrom eppo_train.policy.models import load_model\n"
              "load_model('tiny').save_pretrained(sys.argv[1])\n")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    quiet = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a")], capture_output=True, text=True,
                           env=env, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr[-2000:]
    asked = subprocess.run([sys.executable, "-c", script, str(tmp_path / "b")], capture_output=True, text=True,
                           env={**env, "HF_HUB_DISABLE_PROGRESS_BARS": "0"}, timeout=120)
    assert "Loading weights" in asked.stderr and "Writing model shards" in asked.stderr


def test_building_the_models_in_an_empty_cache_draws_no_progress_bars(tmp_path):
    """The first command on a machine converts the embedded GGUF model and builds the tiny one: transformers'
    de-quantisation and shard-writing bars landed in that command's stderr (a one-line error was then six lines, and
    a test that counts them passed or failed by which test had built the cache first)."""
    import os
    import subprocess
    import sys

    script = "from eppo_train.policy.models import tiny_model_dir\nprint(tiny_model_dir())\n"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    built = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                           env={**env, "EPPO_CACHE_DIR": str(tmp_path / "cache")})
    assert built.returncode == 0 and built.stderr == "", built.stderr[-2000:]
    assert (tmp_path / "cache" / "models" / "smollm2-135m-instruct" / "model.safetensors").exists()
    assert built.stdout.strip() == str(tmp_path / "cache" / "models" / "tiny-llama-smollm2-tok")


def test_request_seeds_never_repeat_across_a_rollouts_turns():
    """The rollout samples turn t with seed + t and a batched backend seeds request i from that: `seed + i` would
    give turn t's request i + 1 the very stream of turn t + 1's request i."""
    from eppo_train.policy.base import request_seed

    seeds = [request_seed(1000 + turn, i) for turn in range(10) for i in range(200)]
    assert len(set(seeds)) == len(seeds)
    assert request_seed(None, 3) is None
    with pytest.raises(ValueError, match="seeds would repeat"):
        request_seed(1, 1_000_003)
