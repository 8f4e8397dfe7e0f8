"""`dtype: auto` and the CPU bf16 autocast follow whether this machine multiplies bf16 natively (policy/precision.py)."""

import pytest
import torch

from eppo_train.config import ConfigError, load_config, validate
from eppo_train.learner.learner import autocast
from eppo_train.policy import precision
from eppo_train.policy.models import load_model


@pytest.fixture(params=[True, False], ids=["native-bf16", "emulated-bf16"])
def bf16_native(request, monkeypatch):
    """Pretend this CPU has (or lacks) native bf16; the cached answers are reset around each case."""
    probe = precision.native_bf16
    probe.cache_clear()
    monkeypatch.setattr(precision, "native_bf16", lambda device="cpu": request.param)
    yield request.param
    probe.cache_clear()


def test_auto_resolves_by_hardware_and_explicit_names_stay(bf16_native):
    assert precision.resolve_dtype("auto") == ("bfloat16" if bf16_native else "float32")
    assert precision.resolve_dtype("bfloat16") == "bfloat16"  # an explicit choice is the user's
    assert precision.resolve_dtype("float32") == "float32"


def test_cpu_autocast_only_where_bf16_is_native(bf16_native):
    with autocast("cpu", bf16_cpu=True):
        out = torch.nn.Linear(8, 8)(torch.randn(2, 8))
    assert out.dtype == (torch.bfloat16 if bf16_native else torch.float32)
    with autocast("cpu", bf16_cpu=False):
        assert torch.nn.Linear(8, 8)(torch.randn(2, 8)).dtype == torch.float32


def test_load_model_auto(bf16_native):
    model = load_model("tiny", dtype="auto")
    assert next(model.parameters()).dtype == (torch.bfloat16 if bf16_native else torch.float32)


def test_notice_is_one_line_on_stderr(bf16_native, capsys):
    precision._notice_once.cache_clear()
    precision.resolve_dtype("auto")
    precision.use_cpu_autocast(True)
    err = capsys.readouterr().err
    assert err.count("\n") == (0 if bf16_native else 1)
    if not bf16_native:
        assert "no native bf16" in err and "float32" in err


def test_config_accepts_auto_and_rejects_unknown():
    validate(load_config("pipeline"))
    assert load_config("pipeline").model.generator_dtype == "auto"
    with pytest.raises(ConfigError, match="generator_dtype"):
        validate(load_config("pipeline", ["model.generator_dtype=float64"]))


def test_fp32_head_projects_in_float32_under_bf16_autocast():
    """`learner.fp32_head`: the vocab projection of bf16 autocast in float32, so log-probs differ from the float32
    model's only by what the blocks below rounded; in bf16 the head alone moves them by hundredths of a nat."""
    from eppo_train.learner.learner import hidden_logprobs_entropy

    model = load_model("tiny")
    torch.manual_seed(0)
    hidden = torch.randn(2, 12, model.config.hidden_size) * 4
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    mask = torch.ones_like(ids)
    exact, exact_ent = hidden_logprobs_entropy(model, hidden, ids, mask)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        bf16_head, _ = hidden_logprobs_entropy(model, hidden, ids, mask)
        fp32_head, fp32_ent = hidden_logprobs_entropy(model, hidden, ids, mask, fp32_head=True)
    assert torch.allclose(fp32_head, exact, atol=1e-5) and torch.allclose(fp32_ent, exact_ent, atol=1e-5)
    assert (bf16_head - exact).abs().max() > 1e-3  # the rounding it removes
