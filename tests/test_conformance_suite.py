"""The conformance suite itself: it must fail on envs that break the contract."""

import re

import pytest

import eppo_envs
from eppo_envs.core import AgentEnv, StepResult, conformance, parse_tool_call
from eppo_envs.example.guess_number import GuessNumberEnv


class RaisesOnEmpty(GuessNumberEnv):
    def transition(self, text):
        if not text.strip():
            raise ValueError("empty action")
        return super().transition(text)


class AcceptsAnything(GuessNumberEnv):
    def transition(self, text):
        return StepResult("ok")


class SilentOnInvalid(GuessNumberEnv):
    def transition(self, text):
        call = parse_tool_call(text, self.tool_tags)
        if not call.valid:
            return StepResult("?", action_valid=False)  # no hint: the model never learns how to act
        return super().transition(text)


class NonDeterministic(GuessNumberEnv):
    counter = 0

    def load_instance(self, split, index):
        NonDeterministic.counter += 1
        instruction, obs, info = super().load_instance(split, index)
        return instruction, f"{obs} (call {NonDeterministic.counter})", info


class LosingExpert(GuessNumberEnv):
    def expert_action(self):
        return "<answer>0</answer>"


class UnicodeObservation(GuessNumberEnv):
    def transition(self, text):
        result = super().transition(text)
        result.info["extra"] = "x"
        return result

    def load_instance(self, split, index):
        instruction, obs, info = super().load_instance(split, index)
        return instruction, obs, {}


def _register(cls):
    env_id = f"broken/{cls.__name__}-v0"
    eppo_envs.register(env_id, entry_point=cls, task="guess_number", max_episode_steps=10)
    return env_id


@pytest.mark.parametrize(
    "cls, check",
    [
        (RaisesOnEmpty, conformance.check_malformed),
        (AcceptsAnything, conformance.check_malformed),
        (SilentOnInvalid, conformance.check_malformed),
        (NonDeterministic, conformance.check_determinism),
        (LosingExpert, conformance.check_expert),
    ],
)
def test_suite_catches_broken_env(cls, check):
    with pytest.raises(conformance.ConformanceError):
        check(_register(cls))


def test_suite_passes_the_example():
    import eppo_envs.example.guess_number  # noqa: F401

    conformance.check_all("example/GuessNumber-v0")


def test_base_class_sanitises_non_ascii():
    class Fancy(GuessNumberEnv):
        def load_instance(self, split, index):
            instruction, obs, info = super().load_instance(split, index)
            return instruction + " \u2014 caf\u00fc \u4e2d \u00a3", obs, info

    env = Fancy()
    obs, info = env.reset(seed=0)
    assert info["instruction"].isascii() and "- caf? ? GBP" in info["instruction"]


def test_agent_env_rejects_unknown_split():
    with pytest.raises(ValueError, match="unknown split"):
        GuessNumberEnv(split="nope")
    assert issubclass(GuessNumberEnv, AgentEnv)


class ReturnsGymTuple(GuessNumberEnv):
    def transition(self, text):
        result = super().transition(text)
        return result.observation, result.reward, result.terminated, False, result.info


class ReturnsNumberObservation(GuessNumberEnv):
    def transition(self, text):
        result = super().transition(text)
        result.observation = 7
        return result


class LoadsTwoValues(GuessNumberEnv):
    def load_instance(self, split, index):
        instruction, obs, _ = super().load_instance(split, index)
        return instruction, obs


class LoadsFourValues(GuessNumberEnv):
    def load_instance(self, split, index):
        return (*super().load_instance(split, index), "the answer")


class LoadsNothing(GuessNumberEnv):
    def load_instance(self, split, index):
        super().load_instance(split, index)  # the return forgotten


class LoadsNumberInstruction(GuessNumberEnv):
    def load_instance(self, split, index):
        _, obs, extra = super().load_instance(split, index)
        return 7, obs, extra


class LoadsNumberObservation(GuessNumberEnv):
    def load_instance(self, split, index):
        instruction, _, extra = super().load_instance(split, index)
        return instruction, 7, extra


class LoadsNoExtra(GuessNumberEnv):
    def load_instance(self, split, index):
        instruction, obs, _ = super().load_instance(split, index)
        return instruction, obs, None


class ReturnsBoolReward(GuessNumberEnv):
    def transition(self, text):
        result = super().transition(text)
        result.reward = result.reward > 0  # True would pass as a reward of 1.0
        return result


class ReturnsStringReward(GuessNumberEnv):
    def transition(self, text):
        result = super().transition(text)
        result.reward = str(result.reward)
        return result


class ReturnsNoInfo(GuessNumberEnv):
    def transition(self, text):
        result = super().transition(text)
        result.info = None
        return result


@pytest.mark.parametrize("cls, message", [
    (ReturnsGymTuple, r"ReturnsGymTuple.transition returned a tuple of 5 \(str, float, bool, bool, dict\); "
                      r"return a StepResult"),
    (ReturnsNumberObservation, r"ReturnsNumberObservation.transition returned StepResult\(observation=int"),
    (LoadsTwoValues, r"LoadsTwoValues.load_instance returned a tuple of 2 \(str, str\); return \(instruction"),
    # each part of each check: no tuple at all, each of the three values, the reward's type (a bool too), the info
    (LoadsFourValues, r"LoadsFourValues.load_instance returned a tuple of 4 \(str, str, dict, str\)"),
    (LoadsNothing, r"LoadsNothing.load_instance returned a NoneType; return \(instruction"),
    (LoadsNumberInstruction, r"LoadsNumberInstruction.load_instance returned a tuple of 3 \(int, str, dict\)"),
    (LoadsNumberObservation, r"LoadsNumberObservation.load_instance returned a tuple of 3 \(str, int, dict\)"),
    (LoadsNoExtra, r"LoadsNoExtra.load_instance returned a tuple of 3 \(str, str, NoneType\)"),
    (ReturnsBoolReward, r"ReturnsBoolReward.transition returned StepResult\(observation=str, reward=bool, info=dict\)"),
    (ReturnsStringReward, r"ReturnsStringReward.transition returned StepResult\(observation=str, reward=str,"),
    (ReturnsNoInfo, r"ReturnsNoInfo.transition returned StepResult\(.*info=NoneType\); they must be str, float and dict"),
])
def test_a_hook_returning_the_wrong_types_is_named_in_one_line(cls, message, capsys):
    """A task whose hook returned the wrong shape failed inside the base class, as "'tuple' object has no attribute
    'terminated'" (conformance) or that AttributeError's traceback (eppo-envs): now the hook and what to return."""
    from eppo_envs.cli import main

    env_id = _register(cls)
    with pytest.raises(conformance.ConformanceError, match=message):
        conformance.check_all(env_id)
    assert main(["expert", env_id, "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.search(message, err)
