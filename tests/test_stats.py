"""stats.py against hand-computed values: Wilson, the percentile bootstrap, the paired and stratified bootstraps,
the t interval over seeds."""

from __future__ import annotations

import math

import pytest

from eppo_train.core.stats import (
    Z95,
    bootstrap_mean,
    paired_bootstrap_diff,
    paired_bootstrap_mean_diff,
    stratified_bootstrap_mean,
    t_interval,
    wilson,
)


def test_wilson_holds_its_own_rate_at_every_count():
    # unclamped, 4 of 4 gives (0.51, 0.9999999999999999): an interval that excludes the observed rate
    for n in range(1, 130):
        for k in range(n + 1):
            lo, hi = wilson(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0, (k, n)


def test_wilson_at_0_half_and_all_of_64():
    # 0/64: the upper bound is (z²/n) / (1 + z²/n) = 0.060023 / 1.060023
    assert wilson(0, 64) == (0.0, pytest.approx(0.056624, abs=1e-6))
    # 32/64: 0.5 ± z·sqrt(0.25/64 + z²/(4·64²)) / (1 + z²/64) = 0.5 ± 0.118979
    lo, hi = wilson(32, 64)
    assert lo == pytest.approx(0.381021, abs=1e-6) and hi == pytest.approx(0.618979, abs=1e-6)
    # 64/64 mirrors 0/64
    assert wilson(64, 64) == (pytest.approx(1 - 0.056624, abs=1e-6), 1.0)
    assert wilson(5, 10) == (pytest.approx(0.236593, abs=1e-6), pytest.approx(0.763407, abs=1e-6))
    assert wilson(0, 0) == (0.0, 1.0)


def test_bootstrap_mean_stays_in_the_data_range_and_matches_the_normal_width():
    # 4 wins in 64: the normal interval 0.0625 ± 1.96·0.242/8 reaches below 0.003; the bootstrap cannot go below 0
    values = [1.0] * 4 + [0.0] * 60
    iv = bootstrap_mean(values)
    assert iv.estimate == 0.0625 and 0.0 <= iv.lo < 0.0625 < iv.hi <= 1.0
    # with 64 values of sd 0.5 the percentile interval is about the normal one: 0.5 ± 1.96·0.5/8 = ±0.1225
    iv = bootstrap_mean([0.0, 1.0] * 32)
    assert iv.lo == pytest.approx(0.5 - Z95 * 0.5 / 8, abs=0.02) and iv.hi == pytest.approx(0.5 + Z95 * 0.5 / 8, abs=0.02)
    assert bootstrap_mean([0.3, 0.3]) .as_list() == [0.3, 0.3] and bootstrap_mean([]).estimate == 0.0
    assert bootstrap_mean(values) == bootstrap_mean(values)  # seeded: the same numbers every time


def test_paired_bootstrap_excludes_zero_for_a_clear_difference_and_includes_it_for_none():
    base = [0.0] * 64
    better = [1.0] * 32 + [0.0] * 32  # half the instances flip to won
    iv = paired_bootstrap_diff(base, better)
    # the differences are Bernoulli(0.5) over 64 pairs: 0.5 ± 1.96·0.5/8
    assert iv.estimate == 0.5 and iv.excludes_zero()
    assert iv.lo == pytest.approx(0.5 - 0.1225, abs=0.02) and iv.hi == pytest.approx(0.5 + 0.1225, abs=0.02)
    same = [float(i % 2) for i in range(64)]
    iv = paired_bootstrap_diff(same, same)
    assert iv.as_list() == [0.0, 0.0] and not iv.excludes_zero()
    # two wins gained, two lost on other instances: no change, and the interval straddles 0
    a = [1.0, 1.0, 0.0, 0.0] + [0.0] * 60
    b = [0.0, 0.0, 1.0, 1.0] + [0.0] * 60
    iv = paired_bootstrap_diff(a, b)
    assert iv.estimate == 0.0 and iv.lo < 0 < iv.hi


def test_pairing_is_what_makes_a_small_consistent_gain_visible():
    # 8 of 64 instances improve and none get worse, on instances whose base success is 0.5: the unpaired
    # difference of two Wilson intervals overlaps heavily, the paired interval is [a few, ~0.2] and excludes 0
    a = [float(i % 2) for i in range(64)]
    b = [1.0 if (i % 2 or i < 16) else 0.0 for i in range(64)]
    assert sum(b) - sum(a) == 8
    lo_a, hi_a = wilson(int(sum(a)), 64)
    lo_b, hi_b = wilson(int(sum(b)), 64)
    assert lo_b < hi_a  # unpaired: overlapping
    iv = paired_bootstrap_diff(a, b)
    assert iv.estimate == pytest.approx(0.125) and iv.excludes_zero() and iv.hi < 0.25


def test_stratified_mean_over_tasks_weighs_tasks_equally():
    # task 1: 64 episodes all won; task 2: 8 episodes all lost -> the mean over tasks is 0.5, not 64/72
    iv = stratified_bootstrap_mean([[1.0] * 64, [0.0] * 8])
    assert iv.estimate == 0.5 and iv.lo == iv.hi == 0.5
    # two tasks, each Bernoulli(0.5) over 64: the mean's sd is 0.5/8/sqrt(2)
    iv = stratified_bootstrap_mean([[0.0, 1.0] * 32, [1.0, 0.0] * 32])
    half = Z95 * 0.5 / 8 / math.sqrt(2)
    assert iv.lo == pytest.approx(0.5 - half, abs=0.02) and iv.hi == pytest.approx(0.5 + half, abs=0.02)
    gain = paired_bootstrap_mean_diff([([0.0] * 64, [1.0] * 32 + [0.0] * 32), ([0.0] * 8, [0.0] * 8)])
    assert gain.estimate == 0.25 and gain.excludes_zero()
    with pytest.raises(ValueError, match="same length"):
        paired_bootstrap_diff([0.0, 1.0], [1.0])


def test_t_interval_over_three_seeds_by_hand():
    # per-seed differences -0.18, -0.03, +0.06: mean -0.05, sd sqrt(0.0294 / 2) = 0.12124, t(0.975, 2) = 4.3027,
    # half-width 4.3027 * 0.12124 / sqrt(3) = 0.30118
    iv = t_interval([-0.18, -0.03, 0.06])
    assert iv is not None and iv.estimate == pytest.approx(-0.05)
    assert iv.lo == pytest.approx(-0.35118, abs=1e-4) and iv.hi == pytest.approx(0.25118, abs=1e-4)
    assert not iv.excludes_zero()
    # a consistent gain over seeds is seen; one seed has no spread to estimate
    assert t_interval([0.07, 0.11, 0.11]).excludes_zero()
    assert t_interval([0.04]) is None and t_interval([]) is None


def test_an_interval_below_zero_excludes_it_too():
    from eppo_train.core.stats import Interval

    assert Interval(-0.3, -0.5, -0.1).excludes_zero() and Interval(0.3, 0.1, 0.5).excludes_zero()
    assert not Interval(0.0, -0.1, 0.1).excludes_zero()


def test_stratified_mean_leaves_an_empty_task_out():
    assert stratified_bootstrap_mean([[1.0, 0.0], []]) == stratified_bootstrap_mean([[1.0, 0.0]])
    assert stratified_bootstrap_mean([[], []]).as_list() == [0.0, 0.0]


def test_episode_stats_by_hand():
    from eppo_envs.core.record import Episode, Turn
    from eppo_train.core.stats import episode_stats

    def episode(rewards, valid, won, truncated, tokens):
        turns = [Turn("x", "y", r, v, {"response_tokens": n}) for r, v, n in zip(rewards, valid, tokens, strict=True)]
        return Episode("e", "t", "test", 0, "i", "", "", turns, won=won, truncated=truncated)

    # 3 episodes, 6 steps: rewards 1, 0.5 (not won: a graded reward is no win), 0; 2 invalid actions; 1 truncated
    eps = [episode([0.0, 1.0], [True, True], True, False, [10, 20]),
           episode([0.5], [False], False, False, [30]),
           episode([0.0, 0.0, 0.0], [True, False, True], False, True, [5, 5, 2])]
    eps[2].turns[2].info["env_error"] = "ValueError: raised by the env"  # one step the env raised on
    assert episode_stats(eps) == pytest.approx({
        "episodes": 3, "success": 1 / 3, "mean_reward": 0.5, "mean_turns": 2.0, "invalid_rate": 2 / 6,
        "truncated": 1 / 3, "response_length": 72 / 6, "env_errors": 1})
    assert episode_stats([]) == {"episodes": 0, "success": 0.0, "mean_reward": 0.0, "mean_turns": 0.0,
                                 "invalid_rate": 0.0, "truncated": 0.0, "response_length": 0.0, "env_errors": 0}
