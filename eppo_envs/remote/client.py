"""`connect(url)`: a served EPPO task as a Gymnasium env, so anything written for `eppo_envs.make` runs remotely.

The client holds one server session for its lifetime (created lazily, closed by `close()`); `reset(seed=,
options={"split": ...})` picks the same instance a local env would, and the info dict is the local one after a
JSON round trip. `unwrapped.expert_action()` asks the server for the oracle's move (when the server allows it).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import gymnasium as gym
import httpx
from gymnasium.error import ResetNeeded

from eppo_envs.core.parsing import clip
from eppo_envs.core.spaces import action_space, observation_space


class RemoteError(RuntimeError):
    """The server refused a request (the message is the server's); `status` is the HTTP code (None: no reply)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RemoteEnv(gym.Env[str, str]):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, url: str, timeout: float = 120.0, render_mode: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.render_mode = render_mode
        self.observation_space = observation_space()
        self.action_space = action_space()
        # Idle connections are dropped here after 20 s, well before the server's 60 s (server.KEEP_ALIVE_S): a request
        # sent on a connection the server is closing at that moment would be lost.
        self._http = httpx.Client(base_url=self.url, timeout=timeout, trust_env=False,  # loopback: no proxies
                                  limits=httpx.Limits(keepalive_expiry=20.0))
        try:
            self.info = self._call("GET", "/task")
        except Exception:
            self._http.close()
            raise
        # The attributes callers read off `env.unwrapped` of a local task.
        self.env_id: str = self.info["env_id"]
        self.task: str = self.info["task"]
        self.splits: tuple[str, ...] = tuple(self.info["splits"])
        self.eval_split: str | None = self.info["eval_split"]
        self.tool_tags: tuple[str, ...] = tuple(self.info["tool_tags"])
        self.action_hint: str = self.info["action_hint"]
        self.session_id: str | None = None
        self._reset_done = False
        self._last_observation = ""

    # ----------------------------------------------------------------- transport
    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        # json.dumps escapes everything to ASCII, so a lone surrogate in a model's reply still travels (and the
        # env answers it like a local env would) instead of failing to encode as UTF-8.
        content = json.dumps(payload).encode() if payload is not None else None
        headers = {"content-type": "application/json"} if content is not None else None
        try:
            response = self._http.request(method, path, content=content, headers=headers)
        except httpx.HTTPError as exc:
            raise RemoteError(f"{self.url}{path}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            if response.status_code == 409:
                raise ResetNeeded(str(detail))
            raise RemoteError(f"{self.url}{path}: HTTP {response.status_code}: {detail}", response.status_code)
        return response.json()

    def _session(self) -> str:
        if self.session_id is None:
            self.session_id = self._call("POST", "/sessions")["session_id"]
        return self.session_id

    # ----------------------------------------------------------------- Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        if seed is None and "index" not in options:
            # No seed: draw one from this env's own generator, as a local env draws its instance.
            seed = int(self.np_random.integers(2**31))
        payload = {"seed": seed, "split": options.get("split"), "index": options.get("index")}
        try:
            reply = self._call("POST", f"/sessions/{self._session()}/reset", payload)
        except RemoteError as exc:
            if exc.status != 404:
                raise
            # The server expired our idle session (its env is closed): a new episode simply gets a new session.
            self.session_id = None
            reply = self._call("POST", f"/sessions/{self._session()}/reset", payload)
        obs, info = self._unpack(reply)
        self._reset_done = True
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self._reset_done:
            raise ResetNeeded("call reset() before step()")
        # The env clips every reply to the same bound; clipping here keeps a huge reply off the wire.
        reply = self._call("POST", f"/sessions/{self._session()}/step", {"action": {"text": clip(action)}})
        obs, info = self._unpack(reply)
        terminated, truncated = bool(reply["observation"]["info"]["terminated"]), bool(reply["observation"]["info"]["truncated"])
        return obs, float(reply["reward"] or 0.0), terminated, truncated, info

    def expert_action(self) -> str:
        if not self._reset_done:
            raise ResetNeeded("call reset() before asking for the expert's move")
        state = self._call("GET", f"/sessions/{self._session()}/state")
        if state.get("expert_action") is None:
            raise RemoteError(f"{self.url}: the server gives no expert move here (started with --no-expert?)")
        return state["expert_action"]

    def render(self) -> str | None:
        return self._last_observation if self.render_mode == "ansi" else None

    def close(self) -> None:
        if self.session_id is not None:
            try:
                self._call("DELETE", f"/sessions/{self.session_id}")
            except RemoteError:
                pass  # already expired or the server is gone: nothing left to free on our side
            self.session_id = None
        self._http.close()
        super().close()

    def _unpack(self, reply: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        observation = reply["observation"]
        self._last_observation = observation["text"]
        # `terminated`/`truncated` travel in `info` (OpenEnv's `done` merges them); the info dict is the rest.
        info = {k: v for k, v in observation["info"].items() if k not in ("terminated", "truncated")}
        return self._last_observation, info


def connect(url: str, **kwargs: Any) -> RemoteEnv:
    """A Gymnasium env backed by the EPPO server at `url` (e.g. the one `eppo-envs serve ID --port 0` printed)."""
    return RemoteEnv(url, **kwargs)
