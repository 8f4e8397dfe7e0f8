"""`eppo/ALFWorld-v0` options for model training: the admissible commands in the observation, the exploring expert."""

from __future__ import annotations

import pytest

import eppo_envs
import eppo_envs.alfworld  # noqa: F401  (registers eppo/ALFWorld-v0)
from eppo_envs.alfworld.admissible import admissible_line
from eppo_envs.alfworld.generator import load_specs
from eppo_envs.alfworld.tasks import TASK_TYPES
from eppo_envs.core import conformance, expert_policy, play_episode

ENV_ID = "eppo/ALFWorld-v0"
PREFIX = "\nAdmissible commands: "
SEEDS = (0, 1, 4)  # bathrooms and a bedroom of valid_unseen: small rooms, quick resets


def split_listing(obs: str) -> tuple[str, list[str]]:
    """(the engine's text, the listed commands) of an observation with the listing."""
    assert PREFIX in obs and obs.endswith(".")
    text, listed = obs.rsplit(PREFIX, 1)
    return text, listed[:-1].split(", ")


def expand(listed: list[str], receptacles: set[str]) -> set[str]:
    """The commands a compact listing stands for."""
    out = set()
    for item in listed:
        if item.startswith("go to any receptacle"):
            but = item.split(" except ", 1)[1] if " except " in item else None
            out |= {f"go to {r}" for r in receptacles if r != but}
        else:
            out.add(item)
    return out


def trajectory(env, seed: int) -> list[str]:
    """The expert's commands for a few steps, an inadmissible and a malformed one in the middle."""
    env.reset(seed=seed, options={"split": "valid_unseen"})
    actions = []
    for n in range(12):
        if n == 2:
            actions += ["<action>take the moon from the sky</action>", "no tags, no command"]
        action = env.unwrapped.expert_action()
        actions.append(action)
        *_, terminated, _, _ = env.step(action)
        if terminated:
            break
    return actions


@pytest.mark.parametrize("form", ["all", "compact"])
def test_listing_shows_exactly_the_engine_admissible_commands(form):
    off = eppo_envs.make(ENV_ID, split="valid_unseen")
    on = eppo_envs.make(ENV_ID, split="valid_unseen", show_admissible=form)
    for seed in SEEDS:
        actions = trajectory(off, seed)
        obs_off, info_off = off.reset(seed=seed)
        obs_on, info_on = on.reset(seed=seed)
        rooms = {a[len("go to "):] for a in info_on["admissible_actions"] if a.startswith("go to ")}
        assert info_on["goal"] == info_off["goal"] and "Admissible" not in info_on["goal"]  # the goal is the task
        steps = [((obs_off, 0.0, False, info_off), (obs_on, 0.0, False, info_on))]
        for action in actions:
            a = off.step(action)
            b = on.step(action)
            steps.append(((a[0], a[1], a[2], a[4]), (b[0], b[1], b[2], b[4])))
        for (o_off, r_off, t_off, i_off), (o_on, r_on, t_on, i_on) in steps:
            text, listed = split_listing(o_on)
            admissible = i_on["admissible_actions"]
            assert admissible == i_off["admissible_actions"] and (r_on, t_on) == (r_off, t_off)
            assert i_on["won"] == i_off["won"] and i_on["action_valid"] == i_off["action_valid"]
            if form == "all":
                assert listed == admissible
            else:
                assert expand(listed, rooms) == set(admissible) and len(listed) <= len(admissible)
            if i_on["action_valid"]:
                assert text == o_off  # the engine's text, then the listing: nothing else changed
            else:
                assert "see the admissible commands" in text or text.startswith("Invalid action:")
                assert on.unwrapped.action_hint in text
        assert steps[-1][1][3]["won"]  # the expert's trajectory reached the goal with the listing on
    off.close()
    on.close()


def test_default_observation_is_the_engine_text_and_hint_names_no_list():
    env = eppo_envs.make(ENV_ID, split="valid_unseen")
    obs, info = env.reset(seed=0)
    assert "Admissible commands" not in obs and "Admissible commands" not in info["instruction"]
    assert obs.startswith("You are in the middle of a room.") and obs.endswith(info["goal"])
    obs, *_ = env.step(env.unwrapped.expert_action())
    assert obs == env.unwrapped.engine.feedback.strip()
    obs, *_, info = env.step("<action>take the moon from the sky</action>")
    assert not info["action_valid"] and "admissible" not in obs
    env.close()


def test_listing_is_deterministic_and_compact():
    a = eppo_envs.make(ENV_ID, split="valid_unseen", show_admissible="compact")
    b = eppo_envs.make(ENV_ID, split="valid_unseen", show_admissible="compact")
    obs_a, info = a.reset(seed=1)
    assert obs_a == b.reset(seed=1)[0] and "commands possible now" in info["instruction"]
    assert "go to any receptacle" in obs_a and obs_a.count("go to ") == 1  # at the start: every receptacle
    for _ in range(4):
        action = a.unwrapped.expert_action()
        assert a.step(action)[0] == b.step(action)[0]
    a.close()
    b.close()
    # a state whose `go to` commands are not "all but one" is listed in full
    assert admissible_line(["go to a 1", "look"], "compact", frozenset({"a 1", "b 1", "c 1"})) == \
        "Admissible commands: go to a 1, look."


def test_bad_option_values_are_one_clear_error():
    with pytest.raises(ValueError, match="show_admissible must be"):
        eppo_envs.make(ENV_ID, show_admissible="sometimes")
    with pytest.raises(ValueError, match="expert must be one of"):
        eppo_envs.make(ENV_ID, expert="oracle")


def test_conformance_with_the_options_on():
    for kwargs in ({"show_admissible": "compact", "expert": "explorer"}, {"show_admissible": True}):
        conformance.check_determinism(ENV_ID, **kwargs)
        conformance.check_expert(ENV_ID, **kwargs)
        conformance.check_malformed(ENV_ID, count=200, **kwargs)
    conformance.check_gymnasium(ENV_ID, show_admissible="compact")


def _first_of_each_type(split: str) -> list[int]:
    firsts: dict[str, int] = {}
    for i, spec in enumerate(load_specs(split)):
        firsts.setdefault(spec.task_type, i)
    return [firsts[t] for t in sorted(TASK_TYPES)]


def test_explorer_looks_before_it_takes_and_wins_every_type():
    env = eppo_envs.make(ENV_ID, split="valid_unseen", expert="explorer")
    planner = eppo_envs.make(ENV_ID, split="valid_unseen")
    differs = 0
    for seed in _first_of_each_type("valid_unseen"):
        planner.reset(seed=seed)
        env.reset(seed=seed)
        explorer = env.unwrapped._explorer
        first = env.unwrapped.expert_action()
        # the first move depends only on the room and the goal: the first receptacle in the fixed order
        assert first == f"<action>go to {explorer.order[0]}</action>"
        differs += planner.unwrapped.expert_action() != first
        episode = play_episode(env, expert_policy(env), seed=seed, split="valid_unseen")
        assert episode.won, (env.unwrapped.game.task_type, [t.observation for t in episode.turns][-3:])
        # every `take` of a target came right after an observation that showed the target there
        for before, turn in zip([episode.first_observation] + [t.observation for t in episode.turns],
                                episode.turns, strict=False):
            command = turn.info.get("command", "")
            if command.startswith(f"take {explorer.obj} "):
                assert command.split(" from ")[0][len("take "):] in before
    assert differs > 0  # the planner, which knows the full state, does not start by looking
    env.close()
    planner.close()


def test_task_types_keep_only_the_chosen_games_by_name_or_number():
    everything = eppo_envs.make(ENV_ID, split="valid_unseen")
    types = [spec.task_type for spec in load_specs("valid_unseen")]
    chosen = {"pick_and_place_simple", "look_at_obj_in_light"}
    wanted = [i for i, t in enumerate(types) if t in chosen]
    for option in (sorted(chosen), [1, 2], ["pick_and_place_simple", 2]):
        env = eppo_envs.make(ENV_ID, split="valid_unseen", task_types=option)
        assert env.unwrapped.num_instances("valid_unseen") == len(wanted) < len(types)
        for seed in (0, 1, 5):
            obs, info = env.reset(seed=seed)
            assert info["task_type"] in chosen
            # the same game as the unfiltered env's: the same text and the same instance id
            full_obs, full_info = everything.reset(seed=wanted[seed])
            assert (obs, info["instance_id"]) == (full_obs, full_info["instance_id"])
        env.close()
    # seeds wrap around the chosen games only
    env = eppo_envs.make(ENV_ID, split="valid_unseen", task_types=1)
    n = env.unwrapped.num_instances("valid_unseen")
    assert env.reset(seed=n + 3)[1]["instance_id"] == env.reset(seed=3)[1]["instance_id"]
    assert {env.reset(seed=s)[1]["task_type"] for s in range(n)} == {"pick_and_place_simple"}
    env.close()
    everything.close()


def test_task_types_conformance_and_the_explorer_wins_the_chosen_types():
    kwargs = {"show_admissible": "compact", "expert": "explorer", "task_types": [1, 2]}
    conformance.check_determinism(ENV_ID, **kwargs)
    conformance.check_expert(ENV_ID, **kwargs)
    conformance.check_malformed(ENV_ID, count=100, **kwargs)
    conformance.check_gymnasium(ENV_ID, **kwargs)


@pytest.mark.parametrize("bad", ["pick", 7, 0, True, [], ["pick_and_place_simple", "cook"]])
def test_unknown_or_empty_task_types_are_one_clear_error(bad):
    with pytest.raises(ValueError, match="ALFWorld task type|task_types is empty"):
        eppo_envs.make(ENV_ID, task_types=bad)


def test_repeat_goal_restates_the_goal_after_every_step_and_only_then():
    plain = eppo_envs.make(ENV_ID, split="valid_unseen", show_admissible="compact")
    env = eppo_envs.make(ENV_ID, split="valid_unseen", show_admissible="compact", repeat_goal=True)
    for seed in SEEDS:
        actions = trajectory(plain, seed)  # expert moves, an inadmissible command, a malformed reply
        first_plain, info = plain.reset(seed=seed)
        first, _ = env.reset(seed=seed)
        assert first == first_plain  # the first observation states the goal already
        goal_line = f"\nYour task is to: {info['goal']}\nAdmissible commands: "
        for action in actions:
            seen_plain, *_ = plain.step(action)
            seen, *_ = env.step(action)
            text, listing = seen_plain.rsplit("\nAdmissible commands: ", 1)
            assert seen == f"{text}{goal_line}{listing}"
    env.close()
    plain.close()
    # without the listing the goal ends the observation
    env = eppo_envs.make(ENV_ID, split="valid_unseen", repeat_goal=True)
    _, info = env.reset(seed=0)
    seen, *_ = env.step("<action>look</action>")
    assert seen.endswith(f"\nYour task is to: {info['goal']}")
    env.close()


def test_repeat_goal_conformance_and_a_bad_value():
    kwargs = {"show_admissible": "compact", "expert": "explorer", "repeat_goal": True}
    conformance.check_determinism(ENV_ID, **kwargs)
    conformance.check_expert(ENV_ID, **kwargs)
    conformance.check_malformed(ENV_ID, count=100, **kwargs)
    with pytest.raises(ValueError, match="repeat_goal must be"):
        eppo_envs.make(ENV_ID, repeat_goal="yes")
