"""The vLLM KV cache on CPU is sized to hold a whole batch of transcripts (policy/engine.py kv_cache_bytes)."""

import pytest

from eppo_train.config import ConfigError, load_config
from eppo_train.policy import engine
from eppo_train.policy.engine import EngineSpec, kv_cache_bytes

GiB = 2**30


@pytest.fixture
def plenty_of_memory(monkeypatch):
    monkeypatch.setattr(engine, "available_memory", lambda: 64 * GiB)


def test_sized_by_sequences_tokens_and_value_bytes(plenty_of_memory):
    # SmolLM2-135M: 30 layers x 3 KV heads x head_dim 64, a key and a value: 11,520 values a token.
    # float32: 80 sequences x 2048 tokens x 46,080 bytes = 7.03 GiB exactly (was rounded up to 8); bfloat16: half
    assert kv_cache_bytes(EngineSpec("default", dtype="float32", max_model_len=2048, max_sequences=80)) == 80 * 2048 * 46080
    assert kv_cache_bytes(EngineSpec("default", dtype="bfloat16", max_model_len=2048, max_sequences=80)) == 80 * 2048 * 23040
    assert kv_cache_bytes(EngineSpec("default", dtype="float32", max_model_len=2048, max_sequences=64)) == 64 * 2048 * 46080
    # the tiny model: 2 x 2 x 16 x 2 x 4 bytes = 512 bytes a token; 4 x 1024 tokens: 2 MiB -> the 256 MiB floor
    assert kv_cache_bytes(EngineSpec("tiny", dtype="float32", max_model_len=1024, max_sequences=4)) == 256 * 2**20


def test_capped_by_available_memory(monkeypatch):
    monkeypatch.setattr(engine, "available_memory", lambda: 10 * GiB)
    assert kv_cache_bytes(EngineSpec("default", dtype="float32", max_model_len=4096, max_sequences=80)) == 4 * GiB
    monkeypatch.setattr(engine, "available_memory", lambda: GiB // 2)
    assert kv_cache_bytes(EngineSpec("default", dtype="float32", max_model_len=4096, max_sequences=80)) == 256 * 2**20


def test_available_memory_is_positive_and_below_the_total():
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < engine.available_memory() <= total


def test_pipeline_engine_spec_holds_an_rl_iteration(plenty_of_memory):
    from eppo_train.learner.workers import engine_spec

    cfg = load_config("pipeline")
    spec = engine_spec(cfg)
    assert cfg.model.kv_cache_gb == "auto" and spec.kv_cache_gb is None
    assert spec.max_sequences == 80  # 20 problems x G=4 (evaluation plays 64 at a time)
    fixed = engine_spec(load_config("pipeline", ["model.kv_cache_gb=3"]))
    assert fixed.kv_cache_gb == 3.0


@pytest.mark.parametrize("value", ["0", "-1", "big"])
def test_bad_kv_cache_setting_is_one_line(value):
    with pytest.raises(ConfigError, match="model.kv_cache_gb"):
        load_config("pipeline", [f"model.kv_cache_gb={value}"])


def test_a_capped_cache_says_so_in_one_line(monkeypatch):
    """A cache smaller than the batch needs is slower and can flip near-tie greedy replies: the user is told."""
    spec = EngineSpec("default", dtype="bfloat16", max_model_len=2048, max_sequences=80)  # needs 3.5 GiB
    monkeypatch.setattr(engine, "available_memory", lambda: 5 * GiB)
    size = kv_cache_bytes(spec)
    assert size == 2 * GiB
    line = engine.kv_cache_warning(spec, size)
    assert line is not None and "\n" not in line
    assert line.startswith("warning: vLLM's KV cache is 2.0 GiB of the 3.5 GiB") and "model.kv_cache_gb" in line
    need = 80 * 2048 * 23040
    assert engine.kv_cache_warning(spec, need) is None and engine.kv_cache_warning(spec, 8 * GiB) is None


def test_the_engine_start_prints_the_warning_only_for_a_capped_automatic_cache(monkeypatch, capsys):
    """The wiring in `_start_vllm`: an automatic cache capped by free memory sets vLLM's cache size and prints the
    one line; a size the user chose (model.kv_cache_gb) is taken without it. The engine itself is not started here
    (tests/test_vllm.py does that)."""
    started = []
    for name in ("VLLMPolicy", "HostedVLLMPolicy"):  # the names engine.py starts them by
        monkeypatch.setattr(engine, name, lambda *a, **k: started.append((a, k)) or object())
    monkeypatch.setattr(engine, "available_memory", lambda: 5 * GiB)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    for chosen, expected, warned in ((None, 2 * GiB, True), (1.5, 3 * GiB // 2, False)):
        engine._start_vllm(EngineSpec("default", dtype="bfloat16", max_model_len=2048, max_sequences=80,
                                      kv_cache_gb=chosen))
        err = capsys.readouterr().err
        assert started[-1][1]["kv_cache_memory_bytes"] == expected  # the engine's own argument, in bytes
        assert "VLLM_CPU_KVCACHE_SPACE" not in engine.os.environ  # nothing left for a later engine to inherit
        assert ("warning: vLLM's KV cache is 2.0 GiB of the 3.5 GiB" in err) is warned, err
    assert len(started) == 2
    # a VLLM_CPU_KVCACHE_SPACE the user set is left to vLLM, which reads it over any argument
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    engine._start_vllm(EngineSpec("default", dtype="bfloat16", max_model_len=2048, max_sequences=80))
    assert "kv_cache_memory_bytes" not in started[-1][1] and "warning" not in capsys.readouterr().err
