"""Config loading, overrides and one-line errors."""

import pytest

from eppo_train.config import Config, ConfigError, from_dict, load_config, save_config, to_dict


def test_shipped_configs_load():
    for name in ("tiny", "default"):
        cfg = load_config(name)
        assert isinstance(cfg, Config) and cfg.env.tasks
    tiny = load_config("tiny")
    assert tiny.model.name == "tiny" and len(tiny.env.tasks) >= 2


def test_overrides_are_typed():
    cfg = load_config("tiny", ["algo.name=grpo", "rollout.group_size=4", "learner.lr=3e-4",
                               "ray.enabled=false", "env.tasks.0.problems=5", "learner.betas=[0.8, 0.9]"])
    assert cfg.algo.name == "grpo" and cfg.rollout.group_size == 4 and cfg.learner.lr == 3e-4
    assert cfg.ray.enabled is False and cfg.env.tasks[0].problems == 5 and cfg.learner.betas == (0.8, 0.9)
    assert load_config("tiny", ["pacing.eps_max=0.4"]).pacing.eps_max == 0.4  # int-like -> float fine


@pytest.mark.parametrize("override, words", [
    ("algo.nme=grpo", "unknown key algo.nme"),
    ("algo.name=ppo2", "algo.name: unknown loss 'ppo2'"),
    ("rollout.group_size=many", "rollout.group_size: expected a whole number"),
    ("ray.enabled=maybe", "ray.enabled: expected true or false"),
    ("pacing.variant=sideways", "pacing.variant"),
    ("env.tasks.0.train_reward=graded", "env.tasks.0.train_reward: env or won"),
    ("env.tasks.9.problems=1", "no item '9'"),
    ("learner.lr", "--set expects KEY=VALUE"),
    ("=5", "--set expects KEY=VALUE"),
    ("bogus.key=1", "unknown key bogus"),
])
def test_bad_keys_and_values_are_one_line(override, words):
    with pytest.raises(ConfigError) as exc:
        load_config("tiny", [override])
    assert words in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("override, words", [
    # unchecked, some would run as another value (0 turns as the default cap, -1 checkpoints as 1), others fail
    # mid-run with a library's traceback (top_p 0 in the sampler, betas in AdamW, num_cpus in ray.init)
    ("rollout.top_p=0", "rollout.top_p: must be in (0, 1]"),
    ("rollout.top_p=2", "rollout.top_p: must be in (0, 1]"),
    ("rollout.max_turns=0", "rollout.max_turns: must be >= 1"),
    ("rollout.max_total_tokens=-1", "rollout.max_total_tokens: must be >= 1"),
    ("evaluation.max_turns=0", "evaluation.max_turns: must be >= 1"),
    ("evaluation.max_new_tokens=0", "evaluation.max_new_tokens: must be >= 1"),
    ("evaluation.batch_size=0", "evaluation.batch_size: must be >= 1"),
    ("env.tasks.0.max_turns=-1", "env.tasks.0.max_turns: must be >= 1"),
    ("env.num_workers=-1", "env.num_workers: must be >= 0"),
    ("run.save_every=-1", "run.save_every: must be >= 1"),
    ("run.keep_checkpoints=-2", "run.keep_checkpoints: must be >= 1"),
    ("run.name=..", "run.name: a plain name"),
    ("learner.max_grad_norm=-1", "learner.max_grad_norm: must be > 0"),
    ("learner.weight_decay=-1", "learner.weight_decay: must be >= 0"),
    ("learner.betas=[2, 3]", "learner.betas: two numbers in [0, 1)"),
    ("sft.micro_batch_tokens=0", "sft.micro_batch_tokens: must be >= 16"),
    ("pacing.warmup=-1", "pacing.warmup: must be >= 0"),
    ("algo.kl_coef=-1", "algo.kl_coef: must be >= 0"),
    ("ray.num_cpus=-1", "ray.num_cpus: must be >= 1"),
    # a negative alpha reverses the pacing
    ("pacing.alpha=-1", "pacing.alpha: must be >= 0"),
    ("pacing.tau=0", "pacing.tau: must be > 0"),
    ("pacing.default_target=0", "pacing.default_target: must be > 0"),
    ("pacing.target_entropy={guess_small: -0.1}", "pacing.target_entropy.guess_small: must be > 0"),
    # the recipe's tools (issue 60)
    ("rollout.min_p=1", "rollout.min_p: must be in [0, 1)"),
    ("env.tasks.0.top_p=0", "env.tasks.0.top_p: must be in (0, 1]"),
    ("env.tasks.0.min_p=-0.1", "env.tasks.0.min_p: must be in [0, 1)"),
    ("env.tasks.0.temperature=0", "env.tasks.0.temperature: must be > 0"),
    ("env.tasks.0.group_size=0", "env.tasks.0.group_size: must be >= 1"),
    ("env.tasks.0.loss_weight=-1", "env.tasks.0.loss_weight: must be >= 0"),
    ("env.tasks.0.advantage=gipo", "env.tasks.0.advantage: unknown estimator 'gipo'"),
    ("env.tasks.0.min_signal_groups=-1", "env.tasks.0.min_signal_groups: must be >= 0"),
    ("algo.refill_rounds=-1", "algo.refill_rounds: must be >= 0"),
    ("algo.refill=groups", "algo.refill: problems or members"),
    ("algo.anchor_kl=-1", "algo.anchor_kl: must be >= 0"),
    ("algo.ptx_coef=-1", "algo.ptx_coef: must be >= 0"),
    ("algo.ptx_samples=0", "algo.ptx_samples: must be >= 1"),
    ("learner.rollout_correction=is", "learner.rollout_correction: none or tis"),
    ("learner.tis_cap=0.5", "learner.tis_cap: must be >= 1"),
])
def test_out_of_range_values_are_one_line(override, words):
    with pytest.raises(ConfigError) as exc:
        load_config("tiny", [override])
    assert words in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("overrides, words", [
    # KL-Cov's top-k asked for more tokens than the batch has, mid-run; an empty Clip-Cov window detached no token,
    # silently plain PPO; a discount past 1 let GiGPO's step returns grow with the distance to the end
    (["algo.name=kl_cov", "algo.options={ratio: 2}"], "algo.options.ratio: a share of the tokens in (0, 1]"),
    (["algo.name=clip_cov", "algo.options={lb: 5, ub: 1}"], "algo.options: need lb < ub"),
    (["algo.advantage=gigpo", "algo.advantage_options={gamma: 1.5}"], "algo.advantage_options.gamma: a discount"),
])
def test_out_of_range_loss_and_estimator_options_are_one_line(overrides, words):
    with pytest.raises(ConfigError) as exc:
        load_config("tiny", overrides)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_unknown_config_name():
    with pytest.raises(ConfigError, match="no config named 'nope'"):
        load_config("nope")


def test_a_folder_given_as_the_config_is_named_as_a_folder(tmp_path):
    # not "no config file <folder>", which reads as if the path did not exist
    with pytest.raises(ConfigError, match=r"is a folder; --config takes a YAML file"):
        load_config(str(tmp_path))


def test_save_and_reload_round_trip(tmp_path):
    cfg = load_config("tiny", ["algo.name=dapo", "pacing.target_entropy={guess_small: 0.7}"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(str(tmp_path / "config.yaml"))
    assert to_dict(again) == to_dict(cfg) and again.pacing.target_entropy == {"guess_small": 0.7}
    assert from_dict(to_dict(cfg)) == cfg


def test_a_config_saved_with_flat_loss_settings_still_loads(tmp_path):
    old = to_dict(load_config("tiny", ["algo.name=clip_cov", "algo.advantage=gigpo"]))
    old["algo"].pop("options")
    old["algo"].pop("advantage_options")
    old["algo"].update(clip_cov_ratio=0.01, clip_cov_lb=1.0, clip_cov_ub=5.0, kl_cov_ratio=0.002, kl_cov_coef=1.0,
                       gigpo_weight=0.5, gigpo_gamma=0.9)
    cfg = from_dict(old)
    assert cfg.algo.options == {"ratio": 0.01, "lb": 1.0, "ub": 5.0}  # kl_cov's keys belonged to another loss
    assert cfg.algo.advantage_options == {"weight": 0.5, "gamma": 0.9}


def test_a_bad_task_option_is_one_line_before_the_run():
    # not a TypeError traceback from gymnasium once the first env is built, mid-run
    from eppo_train.rollout.task_slots import prepare_tasks

    with pytest.raises(ConfigError) as exc:
        prepare_tasks(load_config("tiny", ["env.tasks.0.kwargs={colour: red}"]))
    assert str(exc.value).startswith("env.tasks.0.kwargs: ") and "colour" in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("override, words", [
    ("env.tasks.0.split=nope", "env.tasks.0.split: 'nope' is not a split of example/GuessNumber-v0 (train, test)"),
    ("evaluation.split={guess_small: nope}", "evaluation.split.guess_small: 'nope' is not a split"),
    ("evaluation.split={nope: test}", "evaluation.split: no task 'nope' (tasks: guess_small, guess_large)"),
    ("pacing.target_entropy={guess: 0.3}", "pacing.target_entropy: no task 'guess' (tasks: guess_small, guess_large)"),
])
def test_a_bad_split_is_one_line_before_the_run(override, words):
    # env.tasks[].split and evaluation.split: not a ValueError traceback at the first reset
    from eppo_train.rollout.task_slots import prepare_tasks

    with pytest.raises(ConfigError) as exc:
        prepare_tasks(load_config("tiny", [override]))
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_a_negative_eval_every_is_one_line():
    assert load_config("tiny", ["run.eval_every=2"]).run.eval_every == 2
    with pytest.raises(ConfigError) as exc:
        load_config("tiny", ["run.eval_every=-1"])
    assert str(exc.value).startswith("run.eval_every: must be >= 0") and "\n" not in str(exc.value)


def test_every_setting_carries_its_help_text():
    from eppo_train.config import Config
    from eppo_train.core.registry import explain

    rows = list(explain(Config))
    assert len(rows) > 80 and {"learner.lr", "pacing.lam", "env.tasks.N.id"} <= {r.key for r in rows}
    missing = [r.key for r in rows if len(r.help.strip()) < 8]
    assert not missing, f"settings without help text: {missing}"


def test_config_explain_prints_a_key_a_section_and_loss_options(capsys):
    from eppo_train.cli import main

    assert main(["config", "--explain", "learner.lr"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == ["learner.lr  (float, default 1e-06)", "    AdamW learning rate"]
    assert main(["config", "--explain", "pacing"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pacing:  ") and "pacing.lam  (float, default 0.5)" in out
    assert main(["config", "--explain", "algo.options"]) == 0
    assert "algo.options.ratio  (algo.name: clip_cov)  (float, default 0.0002)" in capsys.readouterr().out


def test_config_explain_of_an_unknown_key_is_one_line_with_close_names(capsys):
    from eppo_train.cli import main

    assert main(["config", "--explain", "learner.lrr"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["eppo-train: error: unknown config key 'learner.lrr' (did you mean learner.lr, "
                   "learner.lora.r, learner.lora?)"]


def test_config_prints_the_resolved_config_as_yaml(capsys):
    import yaml

    from eppo_train.cli import main

    assert main(["config", "--config", "tiny", "--set", "learner.lr=0.5"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["learner"]["lr"] == 0.5 and data["run"]["name"] == "tiny"


def test_rollout_correction_needs_the_learners_log_probs():
    with pytest.raises(ConfigError, match="learner.rollout_correction needs learner.recompute_old_logprobs"):
        load_config("tiny", ["learner.rollout_correction=tis", "learner.recompute_old_logprobs=false"])
