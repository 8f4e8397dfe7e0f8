"""An OpenEnv server for any registered EPPO task: `eppo-envs serve ID`, or `build_app` in your own process.

Two ways in, one pool of sessions (bounded by `max_sessions`, idle ones closed after `idle_timeout` seconds):
- OpenEnv's own protocol (`/ws` WebSocket, `/mcp`, `/health`, `/schema`, `/metadata`), so OpenEnv clients and
  TRL's OpenEnv integration talk to it unchanged. Its stateless `/reset` and `/step` are left out on purpose: they
  build a fresh env per request, which is meaningless for a multi-turn episode and unbounded in cost.
- Plain HTTP sessions (`POST /sessions`, `/sessions/{id}/reset|step`, `GET /sessions/{id}/state`, `DELETE`), which
  `eppo_envs.remote.connect` uses. Bad requests get a 4xx with a message; the server never falls over.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import uvicorn
from fastapi import Body, FastAPI, HTTPException
from fastapi.responses import JSONResponse
from gymnasium.envs.registration import load_env_creator
from gymnasium.error import ResetNeeded
from openenv.core.env_server import ConcurrencyConfig, HTTPEnvServer, SessionCapacityError
from openenv.core.env_server.types import ServerMode
from pydantic import BaseModel, Field, ValidationError

from eppo_envs.core.registry import make, task_spec
from eppo_envs.remote.environment import EppoEnvironment
from eppo_envs.remote.models import TextAction, TextObservation, observation_payload


@dataclass(frozen=True)
class ServerConfig:
    env_id: str
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port (printed at start)
    max_sessions: int = 32
    idle_timeout: float | None = 600.0  # seconds without a request before a session's env is closed
    max_request_bytes: int = 1 << 20  # 1 MiB; env-side, replies are clipped to 64 KiB anyway
    expert: bool = True  # GET /sessions/{id}/state carries the oracle's next move
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to eppo_envs.make for every session


class ResetBody(BaseModel):
    seed: int | None = Field(default=None, ge=0)
    split: str | None = None
    index: int | None = Field(default=None, ge=0)


class StepBody(BaseModel):
    action: TextAction


def task_info(env_id: str) -> dict[str, Any]:
    """The task's class-level facts (splits, tags, hint), read off the entry point without building an env."""
    spec = task_spec(env_id)
    entry = gym.spec(env_id).entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    return {
        "env_id": env_id,
        "task": spec.task,
        "description": spec.description,
        "max_episode_steps": spec.max_episode_steps,
        "splits": list(getattr(creator, "splits", ())),
        "eval_split": getattr(creator, "eval_split", None),
        "tool_tags": list(getattr(creator, "tool_tags", ())),
        "action_hint": getattr(creator, "action_hint", ""),
    }


# An oversized body is read and thrown away up to this many bytes before the 413 goes out. A client that writes its
# whole body before it reads (Python's http.client and urllib, most scripts) then reads the 413 instead of a reset
# connection: closing a socket with unread bytes in it makes the kernel send RST, and the reply is lost with it.
# Beyond this, reading on costs the server more than a reset costs such a client.
DRAIN_BYTES = 64 << 20


# How long an idle HTTP connection stays open. A request that reaches a connection the server is closing as idle is
# lost (the client sees ECONNRESET), and a busy server closes late, on requests already sent: with uvicorn's 5 s, an
# agent whose model thinks ~5 s between steps met it. Longer than most such pauses; `connect`'s client drops its
# idle connections after 20 s, well before the server would.
KEEP_ALIVE_S = 60


class _BodyLimit:
    """ASGI middleware: a request body over the limit gets 413 before the app parses any of it. A declared
    Content-Length is checked up front; a chunked body is read (up to the limit) and then handed on. The refused
    body is drained (up to `DRAIN_BYTES`) so that the client reads the 413; a client that waits for
    `100 Continue` is answered at once and never sends it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            waits = headers.get(b"expect", b"").lower() == b"100-continue"  # nothing sent until we ask for it
            drain = not waits and length.isdigit() and int(length) <= DRAIN_BYTES
            await self._refuse(scope, receive, send, read=0, more=True, drain=drain)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.limit:
                await self._refuse(scope, receive, send, read=size, more=more, drain=True)
                return
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: dict, receive: Any, send: Any, read: int, more: bool, drain: bool) -> None:
        while drain and more and read <= DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nobody to answer
                return
            read += len(message.get("body", b""))
            more = message.get("more_body", False)
        message = f"request body over {self.limit} bytes; replies longer than 64 KiB are clipped anyway"
        # A body left unread ends the connection: the server stops reading it, and the client learns not to reuse it.
        headers = {"connection": "close"} if more else None
        await JSONResponse({"detail": message}, status_code=413, headers=headers)(scope, receive, send)


class _HangUps:
    """ASGI middleware: a WebSocket client that hangs up (closes, or just drops the connection) is one line on
    stderr. Without it, OpenEnv's handler closes the socket the client already closed, Starlette raises
    WebSocketDisconnect from that close, and uvicorn prints the whole traceback for every hang-up. Sends after the
    hang-up go nowhere, so they are dropped here; the session is closed by the handler as before."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        code: int | None = None

        async def watched_receive() -> dict:
            nonlocal code
            message = await receive()
            if message["type"] == "websocket.disconnect":
                code = message.get("code", 1005)
            return message

        async def guarded_send(message: dict) -> None:
            nonlocal code
            if code is not None:
                return
            try:
                await send(message)
            except OSError:  # uvicorn's ClientDisconnected: the connection is gone before we heard of it
                code = 1006

        await self.app(scope, watched_receive, guarded_send)
        if code is not None:
            client = scope.get("client") or ("?", 0)
            who = "the server is stopping" if code == 1012 else "the client hung up"
            print(f"websocket {client[0]}:{client[1]} {scope.get('path', '')}: {who} (code {code}); "
                  "its session is closed", file=sys.stderr, flush=True)


def build_app(config: ServerConfig) -> FastAPI:
    task_spec(config.env_id)  # unknown id: KeyError with the list of known ones, before anything starts
    info = {**task_info(config.env_id), "env_kwargs": dict(config.env_kwargs)}
    if config.env_kwargs:  # a wrong keyword fails here, in one line, not at every session's first reset
        try:
            make(config.env_id, **config.env_kwargs).close()
        except TypeError as exc:
            raise ValueError(f"{config.env_id} does not take these arguments {config.env_kwargs}: {exc}") from None
    app = FastAPI(title=f"EPPO {config.env_id}", version="0", description=__doc__)
    factory = functools.partial(EppoEnvironment, env_id=config.env_id, expert=config.expert, env_kwargs=config.env_kwargs)
    pool = HTTPEnvServer(
        factory,
        TextAction,
        TextObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=config.max_sessions, session_timeout=config.idle_timeout),
    )
    pool.register_routes(app, mode=ServerMode.PRODUCTION)
    app.state.pool = pool
    _register_sessions(app, pool, info)

    async def _close_all() -> None:  # SIGTERM / Ctrl-C: uvicorn runs shutdown hooks; close every env
        open_sessions = list(pool._sessions)
        for session_id in open_sessions:
            await pool._destroy_session(session_id)
        print(f"closed {len(open_sessions)} open session(s)", file=sys.stderr, flush=True)

    app.router.on_shutdown.append(_close_all)
    app.add_middleware(_BodyLimit, limit=config.max_request_bytes)
    app.add_middleware(_HangUps)
    return app


def _register_sessions(app: FastAPI, pool: HTTPEnvServer, info: dict[str, Any]) -> None:
    # The session table and per-session executors are OpenEnv's (HTTPEnvServer, openenv-core 0.3): HTTP sessions
    # share the WebSocket sessions' bound, idle reaper and cleanup instead of keeping a second pool.
    def session(session_id: str) -> EppoEnvironment:
        env = pool._sessions.get(session_id)
        if env is None:
            raise HTTPException(404, f"unknown session {session_id!r} (closed, expired or never created)")
        pool._update_session_activity(session_id)
        return env  # type: ignore[return-value]

    @app.get("/task", tags=["EPPO sessions"])
    async def get_task() -> dict[str, Any]:
        return {**info, "active_sessions": pool.active_sessions, "max_sessions": pool.max_concurrent_envs}

    @app.post("/sessions", status_code=201, tags=["EPPO sessions"])
    async def create_session() -> dict[str, str]:
        try:
            session_id, _ = await pool._create_session()
        except SessionCapacityError as exc:
            raise HTTPException(503, f"server full: {exc}") from None
        return {"session_id": session_id}

    @app.post("/sessions/{session_id}/reset", tags=["EPPO sessions"])
    async def reset(session_id: str, body: ResetBody = Body(default_factory=ResetBody)) -> dict[str, Any]:
        env = session(session_id)
        kwargs = body.model_dump(exclude_none=True)
        try:
            obs = await pool._run_in_session_executor(session_id, env.reset, **kwargs)
        except ValueError as exc:  # unknown split and the like: the user's mistake, said in one line
            raise HTTPException(422, str(exc)) from None
        return observation_payload(obs)

    @app.post("/sessions/{session_id}/step", tags=["EPPO sessions"])
    async def step(session_id: str, body: StepBody) -> dict[str, Any]:
        env = session(session_id)
        try:
            obs = await pool._run_in_session_executor(session_id, env.step, body.action)
        except ResetNeeded as exc:
            raise HTTPException(409, str(exc)) from None
        except ValidationError as exc:
            raise HTTPException(422, str(exc)) from None
        pool._update_session_activity(session_id, increment_step=True)
        return observation_payload(obs)

    @app.get("/sessions/{session_id}/state", tags=["EPPO sessions"])
    async def state(session_id: str) -> dict[str, Any]:
        env = session(session_id)
        result = await pool._run_in_session_executor(session_id, lambda: env.state)
        return result.model_dump()

    @app.delete("/sessions/{session_id}", tags=["EPPO sessions"])
    async def close_session(session_id: str) -> dict[str, Any]:
        session(session_id)
        await pool._destroy_session(session_id)
        return {"session_id": session_id, "closed": True}


class _Server(uvicorn.Server):
    """uvicorn re-raises a caught SIGTERM after its graceful shutdown, so the process dies "killed by signal 15";
    here SIGTERM/SIGINT only ask for that shutdown (sessions closed, hooks run), and `serve` returns: exit 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(config: ServerConfig) -> None:
    """Run until SIGTERM/SIGINT. Binds first so `--port 0` can print the real URL before serving."""
    app = build_app(config)
    sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError as exc:  # a port in use, a host name that does not resolve or is not ours: the user's to change
        sock.close()
        raise ValueError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc} "
                         "(--host, --port; --port 0 picks a free port)") from None
    sock.listen(2048)  # listening before the URL is printed: early clients queue instead of being refused
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {config.env_id} at http://{shown}:{port} (max {config.max_sessions} sessions)", flush=True)
    uv = uvicorn.Config(app, log_level="warning", ws_max_size=config.max_request_bytes, timeout_graceful_shutdown=10,
                        timeout_keep_alive=KEEP_ALIVE_S)
    _Server(uv).run(sockets=[sock])
    print(f"stopped {config.env_id}", file=sys.stderr, flush=True)
