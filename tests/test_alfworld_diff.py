"""The fast ALFWorld engine against the stock one (TextWorld's PddlEnv + alfworld's AlfredDemangler) as oracle.

The default suite plays a sample (six games: all six task types, all three splits, game dicts and official-format
files); `make test-alfworld-diff` plays 1,000 trajectories. Any difference in feedback text, admissible list (order
included) or `won`, at any step, fails with both texts.
"""

from __future__ import annotations

import pytest

import eppo_envs
import eppo_envs.alfworld  # noqa: F401  (registers eppo/ALFWorld-v0)
from eppo_envs.alfworld.differential import SPLITS, run
from eppo_envs.alfworld.engine import AlfredEngine
from eppo_envs.alfworld.generator import game_file, load_specs
from eppo_envs.alfworld.tasks import TASK_TYPES
from eppo_envs.alfworld.translation import cached_translation, decode, encode, translate


def _check(report, trajectories: int) -> None:
    assert not report.differences, "\n".join(report.differences[:3])
    assert report.trajectories == trajectories
    assert report.task_types == set(TASK_TYPES) and report.splits == set(SPLITS)
    assert report.kinds == {"dict", "file"}
    assert report.inadmissible > 0 and report.wins > 0  # both kinds of step, and the goal, were compared


def test_differential_sample():
    report = run(trajectories=12, steps=8, seed=1, per_game=2)
    _check(report, 12)


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)  # the stock engine is the slow side: ~30-60 min on the shared 2-core machine
def test_differential_1000_trajectories():
    report = run(trajectories=1000, steps=12, seed=2026, per_game=5, log_every=20)
    _check(report, 1000)
    assert report.wins >= 150  # one planned trajectory per game (200 games) is meant to win


def test_engine_is_selectable_and_checked():
    with pytest.raises(ValueError, match="unknown ALFWorld engine 'nope'"):
        eppo_envs.make("eppo/ALFWorld-v0", engine="nope")
    fast = eppo_envs.make("eppo/ALFWorld-v0", split="valid_unseen")
    stock = eppo_envs.make("eppo/ALFWorld-v0", split="valid_unseen", engine="textworld")
    assert fast.unwrapped.engine.engine == "fast" and stock.unwrapped.engine.engine == "textworld"
    a, info_a = fast.reset(seed=5)
    b, info_b = stock.reset(seed=5)
    assert a == b and info_a["admissible_actions"] == info_b["admissible_actions"]
    command = f"<action>{info_a['admissible_actions'][0]}</action>"
    assert fast.step(command)[0] == stock.step(command)[0]
    fast.close()
    stock.close()


def test_planner_from_a_later_state_matches_stock():
    spec = load_specs("valid_unseen")[2]  # a cleaning task: the plan goes through the sink
    game = game_file(spec, "plan")
    fast, stock = AlfredEngine("fast"), AlfredEngine("textworld")
    fast.start(game)
    stock.start(game)
    for command in ("inventory", fast.admissible[3], "look"):
        assert fast.step(command) == stock.step(command)
    plan = fast.plan()
    assert plan and plan == stock.plan()
    for command in plan:
        fast.step(command)
    assert fast.won


def test_translation_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("EPPO_CACHE_DIR", str(tmp_path))
    game = game_file(load_specs("valid_seen")[0], "cache")
    fresh = translate(game["pddl_domain"], game["pddl_problem"])
    assert decode(encode(fresh)) == fresh
    first, _ = cached_translation(game["pddl_domain"], game["pddl_problem"])  # translates and writes
    assert list(tmp_path.rglob("*.json.z"))
    again, _ = cached_translation(game["pddl_domain"], game["pddl_problem"])  # reads the file
    assert first == again == fresh
