"""The entropy pacer against hand-computed bounds."""

import pytest

from eppo_train.algos.pacing import EntropyPacer, PacingConfig


def pacer(**kw):
    cfg = PacingConfig(**{"warmup": 0, "beta": 0.9, "lam": 0.5, "alpha": 2.0, "reference": "mean", **kw})
    return EntropyPacer(cfg, eps_low=0.2, eps_high=0.28)


def test_low_entropy_task_gets_tighter_range_high_gets_looser():
    p = pacer()
    step = p.update({"a": 0.2, "b": 1.0})
    # mean 0.6. a: z = log(1/3), sigmoid(2z) = 1/(1+9) = 0.1, c = 1 + 0.5(0.2 - 1) = 0.6
    assert step.bounds["a"] == pytest.approx((0.12, 0.168))
    # b: z = log(1/0.6), sigmoid(2z) = 1/(1+0.36), c = 1 + 0.5(2/1.36 - 1)
    c = 1 + 0.5 * (2 / 1.36 - 1)
    assert step.bounds["b"] == pytest.approx((0.2 * c, 0.28 * c))
    assert step.bounds["a"][1] < 0.28 < step.bounds["b"][1]


def test_ema_update():
    p = pacer()
    p.update({"a": 1.0, "b": 1.0})
    step = p.update({"a": 0.0, "b": 2.0})
    assert step.ema == pytest.approx({"a": 0.9, "b": 1.1})


def test_bounds_stay_clamped():
    p = pacer(lam=0.9, alpha=10.0, eps_min=0.1, eps_max=0.3)
    step = p.update({"a": 0.01, "b": 5.0})
    lo_a, hi_a = step.bounds["a"]
    lo_b, hi_b = step.bounds["b"]
    assert lo_a == pytest.approx(0.1) and hi_a == pytest.approx(0.1)  # 0.1*0.2 and ~0.1*0.28 clamp to eps_min
    assert hi_b == pytest.approx(0.3)  # 1.9*0.28 clamps to eps_max


def test_warmup_holds_the_base():
    p = pacer(warmup=2)
    for _ in range(2):
        step = p.update({"a": 0.2, "b": 1.0})
        assert step.bounds == {"a": (0.2, 0.28), "b": (0.2, 0.28)}
    step = p.update({"a": 0.2, "b": 1.0})
    assert step.bounds["a"][0] < 0.2 < step.bounds["b"][0]


def test_variants():
    high = pacer(variant="high").update({"a": 0.2, "b": 1.0})
    assert high.bounds["a"] == pytest.approx((0.2, 0.168))
    low = pacer(variant="low").update({"a": 0.2, "b": 1.0})
    assert low.bounds["a"] == pytest.approx((0.12, 0.28))
    # target: a sits at its target (c = 1), b is above its target of 0.5 -> looser
    target = pacer(variant="target", target_entropy={"a": 0.2, "b": 0.5}).update({"a": 0.2, "b": 1.0})
    assert target.bounds["a"] == pytest.approx((0.2, 0.28))
    assert target.bounds["b"][0] > 0.2


def test_crossovers_and_spikes():
    p = pacer(beta=0.0, tau=0.5)  # beta 0: the EMA is the last value, so the order flips at once
    assert p.update({"a": 1.0, "b": 0.5}).crossovers == []
    step = p.update({"a": 0.4, "b": 0.5})
    assert step.crossovers == [("a", "b")] and step.spikes == []
    step = p.update({"a": 0.4, "b": 0.8})  # 0.8 > 1.5 * 0.5 -> spike
    assert step.spikes == ["b"] and step.crossovers == []
    assert (p.crossovers, p.spikes) == (1, 1)


def test_state_round_trip():
    p = pacer(warmup=1)
    for h in ({"a": 0.3, "b": 0.9}, {"a": 0.5, "b": 0.4}):
        p.update(h)
    q = pacer(warmup=1)
    q.load_state_dict(p.state_dict())
    nxt = {"a": 0.2, "b": 0.7}
    assert p.update(nxt) == q.update(nxt)


def test_steep_sigmoid_saturates_instead_of_overflowing():
    # alpha 100, a task at 1e-6 nats against one at 1: alpha * z = 100 * log(1e-6 / 0.5000005) = -1312, whose
    # exp(1312) overflows a float. The scale saturates at 1 - lam = 0.5 (a) and 1 + lam = 1.5 (b):
    # a: (0.5 * 0.2, 0.5 * 0.28) = (0.1, 0.14); b: (1.5 * 0.2, 1.5 * 0.28) = (0.3, 0.42)
    step = pacer(alpha=100.0).update({"a": 1e-6, "b": 1.0})
    assert step.bounds["a"] == pytest.approx((0.1, 0.14))
    assert step.bounds["b"] == pytest.approx((0.3, 0.42))
    assert step.scale == pytest.approx({"a": 0.5, "b": 1.5})


def test_a_tie_is_no_crossover_and_the_order_before_it_is_kept():
    p = pacer(beta=0.0)
    assert p.update({"a": 1.0, "b": 0.5}).crossovers == []
    assert p.update({"a": 0.5, "b": 0.5}).crossovers == []  # tie
    assert p.update({"a": 1.0, "b": 0.5}).crossovers == []  # the same order as before the tie: no flip
    assert p.update({"a": 0.4, "b": 0.5}).crossovers == [("a", "b")]
    assert p.crossovers == 1


def test_a_spike_is_strictly_above_one_plus_tau_times_the_ema():
    p = pacer(beta=0.0, tau=0.5)
    p.update({"a": 0.5})
    assert p.update({"a": 0.75}).spikes == []  # exactly 1.5 x 0.5
    assert p.update({"a": 1.125 + 1e-9}).spikes == ["a"]


def test_scale_is_reported_as_one_during_warmup():
    p = pacer(warmup=1)
    assert p.update({"a": 0.2, "b": 1.0}).scale == {"a": 1.0, "b": 1.0}
    assert p.update({"a": 0.2, "b": 1.0}).scale["a"] == pytest.approx(0.6)  # the first test's c_a


def test_the_entropy_order_survives_a_checkpoint():
    # a crossover right after a resume is seen only if the last order was saved with the EMA
    p = pacer(beta=0.0)
    p.update({"a": 1.0, "b": 0.5})
    q = pacer(beta=0.0)
    q.load_state_dict(p.state_dict())
    assert q.update({"a": 0.4, "b": 0.5}).crossovers == [("a", "b")]


def test_a_task_near_zero_entropy_is_paced_from_its_own_value():
    # 1e-3 nats against 1 nat, alpha 0.2 (no saturation): z = log(1e-3 / 0.5005), c = 1 + 0.5 tanh(0.1 z)
    import math

    c = 1 + 0.5 * math.tanh(0.1 * math.log(1e-3 / 0.5005))
    step = pacer(alpha=0.2, eps_min=0.0).update({"a": 1e-3, "b": 1.0})
    assert step.scale["a"] == pytest.approx(c) and step.bounds["a"] == pytest.approx((0.2 * c, 0.28 * c))


def test_a_task_first_seen_late_warms_up_on_its_own_batches():
    """A task absent from the first steps (all its groups filtered) keeps the base bounds for its own first
    `warmup` batches, and its EMA joins the others' reference mean only then."""
    p = pacer(warmup=1)
    for _ in range(3):
        p.update({"a": 0.2, "b": 1.0})
    step = p.update({"a": 0.2, "b": 1.0, "c": 5.0})  # c's first batch: base bounds, not yet in the mean
    assert step.bounds["c"] == (0.2, 0.28) and step.scale["c"] == 1.0
    assert step.scale["a"] == pytest.approx(0.6)  # the first test's c_a: the mean is still a's and b's, 0.6
    step = p.update({"a": 0.2, "b": 1.0, "c": 5.0})  # c's second: warm, and its 5.0 now raises the mean
    mean = (0.2 + 1.0 + 5.0) / 3
    c_a = 1 + 0.5 * (2 / (1 + (mean / 0.2) ** 2) - 1)  # 2 sigmoid(2 log(h / mean)) - 1 = 2 / (1 + (mean/h)^2) - 1
    assert step.scale["a"] == pytest.approx(c_a) and step.bounds["c"][1] > 0.28


def test_a_checkpoint_from_before_the_per_task_warm_up_still_loads():
    p = pacer(warmup=1)
    p.update({"a": 0.2, "b": 1.0})
    state = p.state_dict()
    del state["seen"]
    q = pacer(warmup=1)
    q.load_state_dict(state)
    assert q.update({"a": 0.2, "b": 1.0}) == p.update({"a": 0.2, "b": 1.0})


def test_references_against_hand_computed_scales():
    import math

    # two warm tasks, beta 0: the EMA is the batch's entropy. a = 0.1, b = 0.4 nats
    h = {"a": 0.1, "b": 0.4}
    mean = pacer(reference="mean", alpha=1.0).update(h)  # z_a = log(0.1 / 0.25)
    assert mean.scale["a"] == pytest.approx(1 + 0.5 * math.tanh(math.log(0.4) / 2))
    geo = pacer(reference="geomean", alpha=1.0).update(h)  # z_a = log 0.1 - (log 0.1 + log 0.4) / 2 = log(0.5)
    assert geo.scale["a"] == pytest.approx(1 + 0.5 * math.tanh(math.log(0.5) / 2))
    assert geo.scale["b"] == pytest.approx(1 + 0.5 * math.tanh(math.log(2.0) / 2))  # symmetric in log space
    # self: the baseline is the EMA one batch behind; a steady task sits at c = 1, a collapsing one tightens
    p = pacer(reference="self", alpha=1.0, beta=0.0, self_beta=0.0)
    p.update({"a": 0.4, "b": 0.4})
    step = p.update({"a": 0.1, "b": 0.4})  # a's baseline 0.4 -> z = log(0.25); b's 0.4 -> z = 0
    assert step.scale["a"] == pytest.approx(1 + 0.5 * math.tanh(math.log(0.25) / 2))
    assert step.scale["b"] == pytest.approx(1.0)
    # pace: own changes against the mean change: a fell by log 4, b by log 2 -> z_a = -log 4 + (log 4 + log 2) / 2
    p = pacer(reference="pace", alpha=1.0, beta=0.0, self_beta=0.0)
    p.update({"a": 0.4, "b": 0.4})
    step = p.update({"a": 0.1, "b": 0.2})
    z_a = math.log(0.25) - (math.log(0.25) + math.log(0.5)) / 2
    assert step.scale["a"] == pytest.approx(1 + 0.5 * math.tanh(z_a / 2))
    assert step.scale["b"] == pytest.approx(1 + 0.5 * math.tanh(-z_a / 2))
    assert step.scale["a"] < 1 < step.scale["b"]  # the faster collapse is tightened


def test_all_tasks_equal_is_the_base_range_for_every_reference():
    for reference in ("mean", "geomean", "self", "pace"):
        p = pacer(reference=reference)
        for _ in range(3):
            step = p.update({"a": 0.3, "b": 0.3, "c": 0.3})
        assert step.bounds == {t: pytest.approx((0.2, 0.28)) for t in "abc"}, reference


def test_self_anchored_baseline_keeps_the_first_entropy():
    p = pacer(reference="self", beta=0.0, self_beta=1.0)
    p.update({"a": 0.8})
    p.update({"a": 0.4})
    p.update({"a": 0.2})
    assert p.baseline["a"] == pytest.approx(0.8)


def test_study_dynamics_count_by_the_fixed_definition():
    from eppo_train.study.dynamics import count

    # smoothing 0.5: t1 a 1.0 b 0.5; t2 a~ 0.7 (0.4) b~ 0.5 -> no flip; t3 a~ 0.4 (0.1) < b~ 0.5 -> crossover
    # spikes: b at t3 is 0.5 against b~ 0.5 -> no; a at t4 1.0 > 1.5 * 0.4 -> spike
    d = count([{"a": 1.0, "b": 0.5}, {"a": 0.4, "b": 0.5}, {"a": 0.1, "b": 0.5}, {"a": 1.0, "b": 0.5}])
    assert d.crossover_steps == [3, 4] and d.spikes_by_task == {"a": 1}
    assert (d.crossovers, d.spikes) == (2, 1)  # t4: a~ 0.7 > b~ 0.5 flips back


def test_pacer_replay_tells_task_identity_from_following_entropy():
    from eppo_train.algos.pacing import PacingConfig
    from eppo_train.study.pacer_replay import response

    # constant, different entropies: c_k is a constant per task (all of its variance is task identity)
    steady = [[{"a": 0.1, "b": 0.4}] * 8]
    r = response(steady, PacingConfig(warmup=0))
    assert r.task_share == pytest.approx(1.0) and r.within_sd == pytest.approx(0.0) and r.order == 1.0
    # a's entropy halves and recovers while b's stays: under the log-space reference c_a falls and rises with it
    # (c_b moves the other way with b's entropy unchanged, which keeps the pooled correlation below 1)
    moving = [[{"a": h, "b": 0.4} for h in (0.4, 0.2, 0.1, 0.2, 0.4, 0.2, 0.1, 0.2)]]
    r = response(moving, PacingConfig(warmup=0, beta=0.0, reference="geomean"))
    assert 0.5 < r.follow < 1 and r.within_sd > 0.05 and r.task_share < 0.9
    # a self baseline with no change in the entropies leaves c at 1 throughout
    flat = response(steady, PacingConfig(warmup=0, reference="self"))
    assert flat.within_sd == pytest.approx(0.0)
