"""policy.factory.make_policy: every name a user can type, and one clear error for the rest."""

from __future__ import annotations

import pytest

from eppo_train.policy.agents import ChatAgent, ExpertAgent, PolicyAgent, RandomAgent
from eppo_train.policy.factory import PolicyNameError, PolicyOptions, make_policy
from eppo_train.policy.models import tiny_model_dir


def test_text_agents_by_name():
    assert isinstance(make_policy("expert"), ExpertAgent)
    rnd = make_policy("random:7")
    assert isinstance(rnd, RandomAgent) and rnd.seed == 7
    chat = make_policy("openai:http://127.0.0.1:9/v1", options=PolicyOptions(model_name="m"))
    assert isinstance(chat, ChatAgent)


@pytest.mark.parametrize("name", ["tiny", "hf:TINY", "TINY"])
def test_model_names_and_paths_load_on_hf(name):
    name = name.replace("TINY", str(tiny_model_dir()))
    agent = make_policy(name, "hf", PolicyOptions(batch_size=4))
    assert isinstance(agent, PolicyAgent) and agent.tokenizer is not None
    assert agent.policy.max_batch == 4


@pytest.mark.parametrize("name, backend, message", [
    ("bogus", "hf", "unknown policy 'bogus'"),
    ("hf:", "hf", "needs a path"),
    ("random:x", "hf", "seed must be a number"),
    ("openai:", "hf", "needs a URL"),
    ("tiny", "tensorrt", "unknown backend 'tensorrt'"),
    ("hf:/no/such/dir", "hf", "not found"),
    ("/tmp", "hf", "not a transformers model folder"),
])
def test_bad_names_are_one_clear_error(name, backend, message):
    with pytest.raises(PolicyNameError, match=message) as err:
        make_policy(name, backend)
    assert "\n" not in str(err.value)


def test_a_new_policy_kind_is_one_registration(monkeypatch):
    from eppo_train.policy.factory import POLICIES, PolicyKind

    monkeypatch.setattr(POLICIES, "_entries", dict(POLICIES._entries))  # the registration ends with the test
    seen = []

    def build(arg, backend, opts):
        seen.append((arg, backend, opts.batch_size))
        return RandomAgent(seed=len(arg))

    POLICIES.register("lucky", PolicyKind(build, "lucky:WORD"))
    agent = make_policy("lucky:abc", "vllm", PolicyOptions(batch_size=3))
    assert isinstance(agent, RandomAgent) and agent.seed == 3 and seen == [("abc", "vllm", 3)]
    with pytest.raises(PolicyNameError, match=r"openai:URL, latest, expert, random, lucky:WORD or one of"):
        make_policy("bogus")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="CUDA's vLLM kernels take head size 16")
def test_a_model_vllm_cannot_run_on_cpu_is_refused_before_the_engine_starts():
    # the tiny model (head size 16): refused before vLLM starts, not at the first generate with its kernel's message
    with pytest.raises(PolicyNameError, match=r"head size 16 .*--backend hf") as err:
        make_policy("tiny", "vllm")
    assert "\n" not in str(err.value)


def test_a_policy_kind_make_policy_cannot_call_is_one_line_when_it_registers(monkeypatch):
    from eppo_train.config import ConfigError
    from eppo_train.policy.factory import POLICIES, PolicyKind

    monkeypatch.setattr(POLICIES, "_entries", dict(POLICIES._entries))
    with pytest.raises(ConfigError, match=r"POLICIES.register\('mine', \.\.\.\): <lambda>\(arg\) cannot be called"):
        POLICIES.register("mine", PolicyKind(lambda arg: RandomAgent(), "mine"))
    with pytest.raises(ConfigError, match=r"expected PolicyKind\(\.\.\.\), got function"):
        POLICIES.register("mine", lambda arg, backend, opts: RandomAgent())
    assert "mine" not in POLICIES
