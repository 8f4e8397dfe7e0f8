"""vLLM's engine core in process, inside a child process of ours: reproducible calls, and faster on CPU.

Why a child of our own rather than vLLM's default (engine core in a process of vLLM's, requests sent one by one):
- Reproducible: vLLM's engine core starts stepping while a call's requests are still arriving, so which prompts
  share a forward pass, and the bf16 rounding with it, depends on timing; the same greedy WebShop evaluation on a
  loaded machine moves on 3 of 64 instances (docs/bench.md). With the core in process (vLLM's own recipe,
  `VLLM_ENABLE_V1_MULTIPROCESSING=0`) a call is queued whole before the first step, and runs at load 2 to 5.4 are
  bit-identical.
- Faster on 2 cores: no front-end process competing with the model's threads; make-train's rollout workload runs at
  ~390-404 new tokens/s against ~300 (docs/bench.md).
- But not in *our* process: there vLLM's start scans every loaded module and fails once numba is imported (the
  SearchQA retriever `bm25s` imports it: `'_lib_fn_wrapper' object has no attribute 'get'`), binds the process's
  threads, disables `torch.set_num_threads` and reseeds its random generators, all of which the learner shares.
  A spawned child imports only vLLM and this package's policy modules.

The child gets each call whole over a pipe (token ids in, `Generation`s out) and the learner's weights as a
safetensors file in shared memory, as `VLLMPolicy` loads them. It ignores SIGINT: a Ctrl-C is the parent's to
handle, which then closes the child (and the reaper ends it if the parent dies without doing so). A SIGTERM (an
interrupted command terminates its children) makes it exit through its clean-up, which closes the engine and
removes its socket folder.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from eppo_train.policy.base import Generation, PolicyBackend, SamplingParams
from eppo_train.policy.models import load_tokenizer
from eppo_train.policy.vllm import VLLMPolicy, quiet_child_env, scoped_environment, weights_file
from eppo_train.report.memory import ENGINE, name_process
from eppo_train.runtime.interrupt import WorkerLost, relayed_child_output


class EngineProcessError(RuntimeError):
    """The engine's process failed to start, or a call failed in it; the message is its one-line reason (a process
    that died is `WorkerLost`)."""


class HostedVLLMPolicy(PolicyBackend):
    """`VLLMPolicy` (same arguments) run in a spawned child, with vLLM's engine core in that child's process."""

    def __init__(self, model: str | os.PathLike[str] = "default", **kwargs: Any) -> None:
        self.name = str(model)
        self.tokenizer = load_tokenizer(model)
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of ours imported but this
        self._conn, child_end = context.Pipe()
        self._process = context.Process(target=_serve, args=(child_end, model, kwargs), name="eppo-vllm-engine",
                                        daemon=True)
        # after a Ctrl-C, the child's shutdown messages are dropped
        with relayed_child_output(), scoped_environment(**quiet_child_env()):
            self._process.start()
        name_process(self._process.pid, ENGINE)  # the run's memory account counts it as the engine
        child_end.close()
        self._receive()  # "ready", or the reason it could not start

    def generate(
        self,
        prompts: Sequence[list[int]],
        params: SamplingParams,
        budgets: Sequence[int] | None = None,
    ) -> list[Generation]:
        if not prompts:
            return []
        return self._call("generate", [list(p) for p in prompts], params, None if budgets is None else list(budgets))

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """The learner's (HF-named) tensors into the running engine, through a file in shared memory."""
        with weights_file(state_dict) as path:
            self._call("load_weights_file", path)

    def close(self) -> None:
        process = getattr(self, "_process", None)
        if process is None:
            return
        self._process = None
        try:
            if process.is_alive():
                self._conn.send(("close", ()))
                self._conn.recv()
        except (OSError, EOFError):
            pass
        process.join(timeout=30)
        if process.is_alive():
            process.terminate()
            process.join(timeout=10)
        self._conn.close()

    # ----------------------------------------------------------------- the pipe
    def _call(self, method: str, *args: Any) -> Any:
        if self._process is None:
            raise EngineProcessError("the vLLM engine is closed")
        try:
            self._conn.send((method, args))
        except OSError:  # a broken pipe: it died between calls
            raise self._died() from None
        return self._receive()

    def _receive(self) -> Any:
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError):  # it died during the call
            raise self._died() from None
        if status == "error":
            raise EngineProcessError(value)
        return value

    def _died(self) -> WorkerLost:
        code = None
        if self._process is not None:
            self._process.join(timeout=5)  # its exit code is set once it is reaped
            code = self._process.exitcode
        return WorkerLost(f"the vLLM engine process died (exit code {code})")


def _serve(conn, model: str, kwargs: dict[str, Any]) -> None:  # noqa: ANN001  (a multiprocessing Connection)
    """The child: start the engine in process, then answer calls until told to close or the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, _exit_cleanly)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:

        engine = VLLMPolicy(model, **kwargs)
    except Exception as exc:  # noqa: BLE001  (sent to the parent, which raises it with its reason)
        conn.send(("error", _one_line(exc)))
        return
    conn.send(("ok", "ready"))
    try:
        while True:
            try:
                method, args = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            if method == "close":
                conn.send(("ok", None))
                return
            try:
                conn.send(("ok", getattr(engine, method)(*args)))
            except Exception as exc:  # noqa: BLE001
                conn.send(("error", _one_line(exc)))
    finally:
        engine.close()


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)  # through `_serve`'s finally and the interpreter's exit hooks, not straight out


def _one_line(exc: BaseException) -> str:
    """An exception as the parent's one-line reason: its type and message, whitespace folded, at most 500 chars."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
