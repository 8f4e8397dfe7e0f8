"""A new loss is one file plus one `register_loss` call: its own options dataclass, set from `algo.options`,
validated by that dataclass, reaching the loss function through the unchanged learner and config."""

from __future__ import annotations

import importlib
import random
import sys
import textwrap
import warnings

import pytest

from eppo_train.algos.advantages import ESTIMATORS, EstimatorSpec, compute_advantages, register_estimator
from eppo_train.algos.losses import LOSSES, ClipCovOptions, LossSpec, ppo_clip, register_loss
from eppo_train.config import ConfigError, load_config
from eppo_train.core.records import Sample
from eppo_train.learner.learner import Learner

PLUGIN = '''
from dataclasses import dataclass

from eppo_train.algos.losses import LossSpec, ppo_clip, register_loss


@dataclass
class ScaledOptions:
    scale: float = 1.0  # the PPO-clip loss times this


def scaled_clip(inp):
    out = ppo_clip(inp)
    out.per_token = out.per_token * inp.options.scale
    return out


register_loss("scaled_clip", LossSpec(scaled_clip, 0.2, 0.2, "seq_mean", options=ScaledOptions))
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "my_scaled_loss.py").write_text(textwrap.dedent(PLUGIN))
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("my_scaled_loss")
    finally:
        sys.path.remove(str(folder))


def batch() -> list[Sample]:
    rng = random.Random(0)
    out = []
    for i in range(4):
        p, r = 4, 3
        ids = [rng.randint(10, 4000) for _ in range(p + r)]
        s = Sample("t", f"g{i // 2}", f"e{i}", -1, ids, [0] * p + [1] * r, [0.0] * (p + r), float(i % 2))
        s.advantage = 1.0 if i % 2 else -1.0
        out.append(s)
    return out


def loss_of(algo: str, *sets: str) -> float:
    cfg = load_config("tiny", [f"algo.name={algo}", "learner.lr=1e-3", *sets])
    return Learner(cfg, device="cpu").train_step(batch()).metrics["loss"]


def test_a_registered_loss_gets_its_own_options(plugin):
    base = loss_of("grpo")  # the same PPO-clip, sequence mean, symmetric 0.2 bounds
    assert loss_of("scaled_clip") == pytest.approx(base, rel=1e-5)
    assert loss_of("scaled_clip", "algo.options.scale=0.5") == pytest.approx(0.5 * base, rel=1e-5)
    assert base != 0.0


def test_its_options_are_validated_by_its_dataclass(plugin):
    with pytest.raises(ConfigError, match="unknown key algo.options.scal "):
        load_config("tiny", ["algo.name=scaled_clip", "algo.options.scal=0.5"])
    with pytest.raises(ConfigError, match="algo.options.scale: expected a number"):
        load_config("tiny", ["algo.name=scaled_clip", "algo.options.scale=big"])
    with pytest.raises(ConfigError, match="takes no options"):
        load_config("tiny", ["algo.name=grpo", "algo.options.scale=0.5"])
    with pytest.raises(ConfigError, match="algo.name: unknown loss 'nope'"):
        load_config("tiny", ["algo.name=nope"])


ENV_IMPORTED = '''
from dataclasses import dataclass

from eppo_train.algos.advantages import EstimatorSpec, grpo, register_estimator
from eppo_train.algos.losses import LossSpec, ppo_clip, register_loss


@dataclass
class ShiftOptions:
    shift: float = 0.0


def shifted(samples, scale_by_std=True, options=None):
    return {k: v + options.shift for k, v in grpo(samples, scale_by_std).items()}


register_loss("env_imported_clip", LossSpec(ppo_clip, 0.2, 0.2, "seq_mean"))
register_estimator("env_imported_shift", EstimatorSpec(shifted, ShiftOptions))
'''


def test_a_loss_and_an_estimator_registered_by_env_imports_are_known_to_the_config(tmp_path, monkeypatch):
    """The documented way from the command line: `--set env.imports=[mod] --set algo.name=<its loss>`. The names
    are checked after `env.imports` is imported, so a loss or an estimator that only a config's import registers is
    known, not 'unknown loss'."""
    (tmp_path / "my_env_imported_algo.py").write_text(ENV_IMPORTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_env_imported_algo", raising=False)
    cfg = load_config("tiny", ["env.imports=[my_env_imported_algo]", "algo.name=env_imported_clip",
                               "algo.advantage=env_imported_shift", "algo.advantage_options.shift=0.5"])
    assert (cfg.algo.name, cfg.algo.advantage) == ("env_imported_clip", "env_imported_shift")
    assert Learner(cfg, device="cpu").train_step(batch()).metrics["loss"] != 0.0
    shifted = compute_advantages(batch(), cfg.algo.advantage, options=cfg.algo.advantage_options).samples
    plain = compute_advantages(batch(), "grpo").samples
    assert [s.advantage for s in shifted] == pytest.approx([s.advantage + 0.5 for s in plain])
    with pytest.raises(ConfigError, match="env.imports: cannot import 'no_such_plugin_mod'"):
        load_config("tiny", ["env.imports=[no_such_plugin_mod]", "algo.name=env_imported_clip"])
    # every module is imported, not the first only; one that exists but fails on an import of its own is one line too
    (tmp_path / "my_second_algo.py").write_text(
        "from eppo_train.algos.losses import LossSpec, ppo_clip, register_loss\n"
        "register_loss('env_imported_second', LossSpec(ppo_clip, 0.2, 0.2, 'seq_mean'))\n")
    monkeypatch.delitem(sys.modules, "my_second_algo", raising=False)
    assert load_config("tiny", ["env.imports=[json,my_second_algo]", "algo.name=env_imported_second"]).algo.name \
        == "env_imported_second"
    (tmp_path / "my_broken_algo.py").write_text("from eppo_train.algos.losses import no_such_name\n")
    with pytest.raises(ConfigError, match="env.imports: cannot import 'my_broken_algo': cannot import name 'no_such_name'"):
        load_config("tiny", ["env.imports=[my_broken_algo]"])


def _two_args(inp, extra):
    return inp


@pytest.mark.parametrize("call, message", [
    (lambda: register_loss("bad", ppo_clip), r"register_loss\('bad', \.\.\.\): expected LossSpec\(\.\.\.\), got function"),
    (lambda: register_loss("bad", LossSpec(_two_args, 0.2, 0.2, "token_mean")),
     r"_two_args\(inp, extra\) cannot be called as _two_args\(x\)"),
    (lambda: register_loss("bad", LossSpec(ppo_clip, 0.2, 0.2, "mean")), "LossSpec.agg: unknown loss aggregation 'mean'"),
    (lambda: register_loss("bad", LossSpec(ppo_clip, 0.2, 2.0, "token_mean")), r"eps_high must be a number in \(0, 1\)"),
    (lambda: register_loss("bad", LossSpec(ppo_clip, 0.2, 0.2, "token_mean", options={"scale": 1})),
     "options must be a dataclass"),
    (lambda: register_estimator("bad", lambda samples, scale_by_std=True, options=None: {}),
     r"register_estimator\('bad', \.\.\.\): expected EstimatorSpec\(\.\.\.\)"),
    (lambda: register_estimator("bad", EstimatorSpec(lambda samples: {})), r"cannot be called as <lambda>\(x, scale_by_std"),
    # the rest of each check: a name for a function, an options instance, each bound's both ends and its type, the
    # estimator's options= keyword (compute_advantages passes it)
    (lambda: register_loss("bad", LossSpec("ppo_clip", 0.2, 0.2, "token_mean")), "LossSpec.fn must be callable, got str"),
    (lambda: register_loss("bad", LossSpec(ppo_clip, 0.2, 0.2, "token_mean", options=ClipCovOptions())),
     "options must be a dataclass"),
    (lambda: register_loss("bad", LossSpec(ppo_clip, 0.0, 0.2, "token_mean")), r"eps_low must be a number in \(0, 1\)"),
    (lambda: register_loss("bad", LossSpec(ppo_clip, 0.2, "0.28", "token_mean")), r"eps_high must be a number in"),
    (lambda: register_estimator("bad", EstimatorSpec(lambda samples, scale_by_std=True: {})),
     r"cannot be called as <lambda>\(x, scale_by_std=\.\.\., options=\.\.\.\)"),
])
def test_a_loss_or_estimator_that_cannot_run_is_one_line_when_it_registers(call, message):
    """A wrong signature or spec is a ConfigError, which the CLIs print as one line, raised while `env.imports`
    imports the plugin: not a traceback from the learner (or the advantage step) after the SFT warm start and the
    first rollout."""
    with pytest.raises(ConfigError, match=message) as err:
        call()
    assert "\n" not in str(err.value)
    assert "bad" not in LOSSES and "bad" not in ESTIMATORS


def _returns(value_of):
    """A loss whose output is `value_of(ppo_clip's output, its inputs)`."""
    return lambda inp: value_of(ppo_clip(inp), inp)


@pytest.mark.parametrize("value_of, message", [
    (lambda out, inp: (out.per_token, out.clipped, out.approx_kl),
     r"loss 'bad_output' returned tuple; return LossOutput\(per_token, clipped, approx_kl\)"),
    (lambda out, inp: type(out)(out.per_token.sum(), out.clipped, out.approx_kl),
     r"LossOutput.per_token is shape \[\]; it must be a tensor of the batch's shape \[4, 7\]"),
    (lambda out, inp: type(out)(out.per_token, out.clipped.tolist(), out.approx_kl), "LossOutput.clipped is list"),
    (lambda out, inp: type(out)(out.per_token.detach(), out.clipped, out.approx_kl),
     "LossOutput.per_token carries no gradient"),
])
def test_a_loss_that_returns_the_wrong_thing_is_one_line_naming_it(value_of, message):
    """Unchecked, a tuple is an AttributeError inside the learner, a scalar per_token broadcasts silently over the
    batch's token weights (a wrong gradient), a detached one is a backward error from torch."""
    register_loss("bad_output", LossSpec(_returns(value_of), 0.2, 0.2, "token_mean"))
    try:
        with pytest.raises(ConfigError, match=message) as err:
            loss_of("bad_output")
        assert "\n" not in str(err.value)
    finally:
        LOSSES._entries.pop("bad_output")


@pytest.mark.parametrize("result, message", [
    (lambda samples: [0.0] * len(samples), r"advantage estimator 'bad_values' returned list"),
    (lambda samples: {id(s): 1.0 for s in samples[1:]}, "gave nothing for a t sample"),
    (lambda samples: {id(s): float("nan") for s in samples}, "gave nan for a t sample"),
    (lambda samples: {id(s): "1" for s in samples}, "gave '1' for a t sample"),
])
def test_an_estimator_that_misses_a_sample_or_gives_nan_is_one_line_naming_it(result, message):
    """Unchecked, a missing sample is a KeyError, and a NaN advantage trains silently into the weights."""
    register_estimator("bad_values", EstimatorSpec(lambda samples, scale_by_std=True, options=None: result(samples)))
    try:
        with pytest.raises(ConfigError, match=message):
            compute_advantages(batch(), "bad_values")
    finally:
        ESTIMATORS._entries.pop("bad_values")


def test_an_estimator_may_give_numpy_numbers():
    import numpy as np

    register_estimator("numpy_values", EstimatorSpec(
        lambda samples, scale_by_std=True, options=None: {id(s): np.float32(0.5) for s in samples}))
    try:
        advantages = [s.advantage for s in compute_advantages(batch(), "numpy_values").samples]
    finally:
        ESTIMATORS._entries.pop("numpy_values")
    assert advantages == [0.5] * 4 and all(type(a) is float for a in advantages)


def test_registering_a_known_name_again_warns_and_replaces_it():
    """A plugin's `grpo` replaces the built-in one with a warning, as gymnasium says of an id registered twice. The
    same entry registered again (a module imported twice) is quiet."""
    builtin = LOSSES.get("grpo")
    mine = LossSpec(ppo_clip, 0.1, 0.1, "seq_mean")
    try:
        with pytest.warns(UserWarning, match="loss 'grpo' was registered already; the new entry replaces it"):
            register_loss("grpo", mine)
        assert LOSSES.get("grpo") is mine
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            register_loss("grpo", mine)
    finally:
        LOSSES._entries["grpo"] = builtin
