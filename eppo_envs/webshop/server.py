"""The shop as a real web site: a small threaded HTTP server on 127.0.0.1 with one `ShopSession` per session id.

    GET  /s/<sid>/          the current page, rendered from the session's `Page`
    POST /s/<sid>/search    q=<query>      -> 303 back to the page
    POST /s/<sid>/click     label=<button> -> 303 back to the page

Session ids are random tokens, so two envs (or two browsers) never see each other's state. The server runs in a
daemon thread on a free port and stops on `close()`.
"""

from __future__ import annotations

import secrets
import threading
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from eppo_envs.webshop.catalogue import Goal
from eppo_envs.webshop.html import render_html
from eppo_envs.webshop.pages import Command, clean
from eppo_envs.webshop.session import ShopSession
from eppo_envs.webshop.world import ShopWorld

_MAX_BODY = 64 * 1024


class ShopServer:
    def __init__(self, world: ShopWorld, host: str = "127.0.0.1", exact_options: tuple[str, ...] = ()) -> None:
        self.world = world
        self.exact_options = exact_options
        self.sessions: dict[str, ShopSession] = {}
        self._lock = threading.Lock()
        # The handler holds only a weak reference, so a forgotten server is collected and its finalizer stops it.
        self._httpd = ThreadingHTTPServer((host, 0), _make_handler(weakref.ref(self)))
        self._httpd.daemon_threads = True
        self.host, self.port = host, self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=f"webshop-http-{self.port}", daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._httpd, self._thread)

    def url(self, sid: str) -> str:
        return f"http://{self.host}:{self.port}/s/{sid}/"

    def new_session(self, goal: Goal) -> str:
        sid = secrets.token_hex(8)
        with self._lock:
            self.sessions[sid] = ShopSession(self.world, goal, self.exact_options)
        return sid

    def drop_session(self, sid: str) -> None:
        with self._lock:
            self.sessions.pop(sid, None)

    def handle(self, sid: str, verb: str | None, form: dict[str, str]) -> str | None:
        """Apply a posted action (None for a plain GET); return the page's HTML, or None for an unknown session."""
        with self._lock:
            session = self.sessions.get(sid)
            if session is None:
                return None
            if verb == "search":
                session.apply(Command("search", clean(form.get("q", ""))[:200] or " "))
            elif verb == "click":
                session.apply(Command("click", clean(form.get("label", ""))))
            return render_html(session.page(), sid)

    def close(self) -> None:
        self._finalizer()


def _shutdown(httpd: ThreadingHTTPServer, thread: threading.Thread) -> None:
    if thread.is_alive():
        httpd.shutdown()
    httpd.server_close()


def _make_handler(server_ref: weakref.ref[ShopServer]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

        def _route(self) -> tuple[str, str | None] | None:
            parts = self.path.split("?")[0].strip("/").split("/")
            if len(parts) == 2 and parts[0] == "s":
                return parts[1], None
            if len(parts) == 3 and parts[0] == "s" and parts[2] in ("search", "click"):
                return parts[1], parts[2]
            return None

        def _send(self, status: int, body: str, location: str | None = None) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            if location:
                self.send_header("Location", location)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            route, server = self._route(), server_ref()
            html = server.handle(route[0], None, {}) if server and route and route[1] is None else None
            if html is None:
                self._send(404, "<html><body><p>No such WebShop session.</p></body></html>")
            else:
                self._send(200, html)

        def do_POST(self) -> None:
            route, server = self._route(), server_ref()
            length = min(int(self.headers.get("Content-Length") or 0), _MAX_BODY)
            raw = self.rfile.read(length).decode("utf-8", errors="replace")
            form = {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}
            if not server or not route or route[1] is None or server.handle(route[0], route[1], form) is None:
                self._send(404, "<html><body><p>No such WebShop session.</p></body></html>")
                return
            self._send(303, "", location=f"/s/{route[0]}/")

    return Handler
