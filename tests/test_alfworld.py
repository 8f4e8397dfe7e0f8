"""ALFWorld on TextWorld's PDDL engine: generated problems, splits, parsing, expert, official game files, CLI."""

from __future__ import annotations

import socket

import pytest

import eppo_envs
import eppo_envs.alfworld  # noqa: F401  (registers eppo/ALFWorld-v0)
from eppo_envs.alfworld.actions import read_command
from eppo_envs.alfworld.generator import export_games, load_specs, render_problem, sample_specs
from eppo_envs.alfworld.scenes import SEEN_FLOORPLANS, UNSEEN_FLOORPLANS, load_scene
from eppo_envs.alfworld.tasks import TASK_TYPES
from eppo_envs.core import expert_policy, play_episode

ENV_ID = "eppo/ALFWorld-v0"


@pytest.fixture(scope="module")
def env():
    env = eppo_envs.make(ENV_ID)
    yield env
    env.close()


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a socket (e.g. alfworld's downloader) fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")
    monkeypatch.setattr(socket.socket, "connect", refuse)


def first_index_of(split: str, task_type: str) -> int:
    """The instance of `task_type` in the smallest room (the engine's cost grows with the room: keeps tests fast)."""
    specs = load_specs(split)
    return min((i for i, s in enumerate(specs) if s.task_type == task_type),
               key=lambda i: (len(load_scene(specs[i].floorplan).receptacles), i))


def test_held_out_floorplans_never_in_train():
    assert not set(SEEN_FLOORPLANS) & set(UNSEEN_FLOORPLANS)
    train = {s.floorplan for s in load_specs("train")}
    unseen = {s.floorplan for s in load_specs("valid_unseen")}
    seen = {s.floorplan for s in load_specs("valid_seen")}
    assert unseen and unseen <= set(UNSEEN_FLOORPLANS)
    assert not train & set(UNSEEN_FLOORPLANS)
    assert seen <= train | set(SEEN_FLOORPLANS) and not seen & set(UNSEEN_FLOORPLANS)


def test_split_sizes_and_all_six_types(env):
    u = env.unwrapped
    assert u.splits == ("train", "valid_seen", "valid_unseen") and u.eval_split == "valid_unseen"
    assert u.num_instances("train") >= 3000
    for split in ("valid_seen", "valid_unseen"):
        assert u.num_instances(split) >= 140
        assert {s.task_type for s in load_specs(split)} == set(TASK_TYPES)


def test_specs_and_problems_are_deterministic():
    a, b = sample_specs("valid_unseen", 12), sample_specs("valid_unseen", 12)
    assert a == b
    assert render_problem(a[3], "p") == render_problem(b[3], "p")
    assert sample_specs("valid_unseen", 12, seed=1) != a


@pytest.mark.parametrize("task_type", sorted(TASK_TYPES))
def test_expert_wins_each_task_type(env, task_type, no_network):
    index = first_index_of("valid_unseen", task_type)
    episode = play_episode(env, expert_policy(env), seed=index, split="valid_unseen")
    assert episode.won, [t.observation for t in episode.turns][-3:]
    assert episode.total_reward == 1.0
    assert env.unwrapped.game.task_type == task_type


def test_observation_is_alfworld_text(env):
    obs, info = env.reset(seed=first_index_of("valid_unseen", "pick_clean_then_place_in_recep"),
                          options={"split": "valid_unseen"})
    assert obs.startswith("You are in the middle of a room. Looking quickly around you, you see a ")
    assert "\n\nYour task is to: " in obs and ("put a clean " in obs or "clean some " in obs)
    assert "go to sinkbasin 1" in info["admissible_actions"] or any(
        a.startswith("go to sinkbasin") for a in info["admissible_actions"])
    assert "<action>" in info["instruction"]


def test_tolerant_parsing_and_inadmissible_commands(env):
    _, info = env.reset(seed=0, options={"split": "valid_unseen"})
    places = [a for a in info["admissible_actions"] if a.startswith("go to ")]
    for n, text in enumerate(("<action>{}</action>", "<think>hmm</think><action>  {}.  </action>", "{}",
                              "I will move.\n{}")):
        target = places[n % len(places)]
        obs, _, _, _, info = env.step(text.format(target.upper() if n == 1 else target))
        assert info["action_valid"], (text, obs)
        assert obs.startswith("You arrive at ")
    obs, reward, terminated, _, info = env.step("<action>open the pod bay doors</action>")
    assert not info["action_valid"] and reward == 0 and not terminated
    assert obs.startswith("Nothing happens.") and obs.endswith(env.unwrapped.action_hint)
    obs, *_, info = env.step("go somewhere nice")  # bare text that is no command: invalid, with the hint
    assert not info["action_valid"] and obs.endswith(env.unwrapped.action_hint)


def test_one_reply_applies_at_most_one_command(env):
    _, info = env.reset(seed=0, options={"split": "valid_unseen"})
    first, second = [a for a in info["admissible_actions"] if a.startswith("go to ")][:2]
    for reply in (f"<action>{first}</action><action>{second}</action>", f"<action>{first}; {second}</action>",
                  f"<action>{first} and {second}</action>", "<action>Your task is to: done</action>"):
        obs, reward, terminated, _, info = env.step(reply)
        assert not info["action_valid"] and reward == 0 and not terminated and "You arrive" not in obs, reply
    obs, _, _, _, info = env.step(f"{first}\n{second}")  # bare lines: the last line only, once
    assert info["action_valid"] and info["command"] == second and obs.count("You arrive") == 1


def test_put_reads_as_move():
    admissible = ["move mug 1 to cabinet 1", "look"]
    assert read_command("<action>put mug 1 in/on cabinet 1</action>", admissible).text == "move mug 1 to cabinet 1"
    assert read_command("<action>Put  mug 1 on cabinet 1.</action>", admissible).admissible


def test_max_episode_steps_is_configurable():
    env = eppo_envs.make(ENV_ID, max_episode_steps=2)
    env.reset(seed=0, options={"split": "valid_unseen"})
    env.step("<action>look</action>")
    *_, truncated, _ = env.step("<action>look</action>")
    assert truncated
    env.close()
    assert eppo_envs.make(ENV_ID).spec.max_episode_steps == 50


def test_official_game_files_are_played(tmp_path, monkeypatch, no_network):
    specs = [s for s in load_specs("valid_unseen") if s.floorplan >= 400][:3]  # bathrooms: small and quick
    export_games(specs[:2], tmp_path, "valid_unseen")
    unsolvable = export_games(specs[2:3], tmp_path / "other", "valid_unseen")[0]
    target = tmp_path / "json_2.1.1" / "valid_unseen" / "broken" / "trial_x"
    target.mkdir(parents=True)
    (target / "game.tw-pddl").write_text(unsolvable.read_text().replace('"solvable": true', '"solvable": false'))

    env = eppo_envs.make(ENV_ID, data_path=str(tmp_path), split="valid_unseen")
    u = env.unwrapped
    assert u.source.name == "official" and u.num_instances("valid_unseen") == 2  # the unsolvable one is skipped
    for seed in range(2):
        episode = play_episode(env, expert_policy(env), seed=seed, split="valid_unseen")
        assert episode.won and episode.first_observation.startswith("You are in the middle of a room.")
    env.close()

    # task_types reads the official files' types too: only the games of the chosen type are played
    kept = specs[0].task_type
    env = eppo_envs.make(ENV_ID, data_path=str(tmp_path), split="valid_unseen", task_types=[kept])
    expected = sum(s.task_type == kept for s in specs[:2])
    assert env.unwrapped.num_instances("valid_unseen") == expected
    assert {env.reset(seed=k)[1]["task_type"] for k in range(expected)} == {kept}
    env.close()

    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    env = eppo_envs.make(ENV_ID)
    assert env.unwrapped.source.name == "official"
    with pytest.raises(ValueError, match="no 'train' split"):
        env.reset(seed=0, options={"split": "train"})
    env.close()


def test_bad_data_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        eppo_envs.make(ENV_ID, data_path=str(tmp_path / "missing"))


def test_cli_play_reaches_won(monkeypatch, capsys):
    from eppo_envs import cli

    answers = iter(["help", "look", "expert"] + ["expert"] * 30)
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    assert cli.main(["play", ENV_ID, "--split", "valid_unseen", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "Your task is to:" in out and "episode won; total reward 1" in out


@pytest.mark.slow
@pytest.mark.parametrize("task_type", sorted(TASK_TYPES))
def test_expert_wins_at_least_99_percent(env, task_type):
    """Every valid-split instance of the type (about 47 per type)."""
    played = won = 0
    for split in ("valid_seen", "valid_unseen"):
        for i, spec in enumerate(load_specs(split)):
            if spec.task_type == task_type:
                played += 1
                won += play_episode(env, expert_policy(env), seed=i, split=split).won
    assert won >= 0.99 * played, f"{won}/{played}"
