"""`eppo/WebShop-Browser-v0`: the same shop served as HTML on 127.0.0.1 and driven through headless Chromium.

Each env owns one `ShopServer` (random free port) and one `HeadlessChromium`. A command becomes a real browser
action (typing into the search box and pressing Enter, clicking a button); the observation is the rendered DOM read
back into a `Page` (`html.py`) and rendered with the text env's renderer, so both modes print the same text and
score the same reward. The shop's state lives in the server, so a crashed browser is restarted and simply reloads
the session page. Server and browser stop on `close()`, on garbage collection and at exit.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import Any

from eppo_envs.tools.teardown.browser_reaper import Reaper
from eppo_envs.tools.teardown.owner import owned_prefix
from eppo_envs.webshop.catalogue import Goal
from eppo_envs.webshop.env import WebShopEnv
from eppo_envs.webshop.html import FIND_BUTTON_JS, READ_PAGE_JS, page_from_dom
from eppo_envs.webshop.pages import Command, Page, clean
from eppo_envs.webshop.server import ShopServer
from eppo_envs.webshop.world import ShopWorld

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
)
COMMAND_TIMEOUT_S = 60  # no WebDriver call may hang longer than this
# quit() of a browser that stopped answering: urllib3 retries it ~4 times at the command timeout (a frozen Chromium
# would hold one step, and the rollout batch with it, for ~5 min); past this, its processes are killed instead
QUIT_TIMEOUT_S = 5
PAGE_TIMEOUT_S = 20


PR_CAPBSET_DROP, CAP_SYS_NICE = 24, 23  # <linux/prctl.h>, <linux/capability.h>
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it, between fork and exec
except (OSError, AttributeError):  # no libc prctl (not Linux)
    _prctl = None


def _keep_priority() -> None:
    """In chromedriver's process, before exec: drop CAP_SYS_NICE from the capability bounding set. Run as root,
    Chromium raises its display threads to nice -8; without that capability it keeps the niceness it inherits, so a
    niced run (a study beside other work, `nice make train`) stays niced. As another user it has no such right and
    the call fails harmlessly."""
    if _prctl is not None:
        _prctl(PR_CAPBSET_DROP, CAP_SYS_NICE, 0, 0, 0)


class BrowserError(RuntimeError):
    """Headless Chromium is missing, died and could not be restarted, or stopped answering."""


def _stop_all(driver_box: list, profile_dir: str, reaper: Reaper) -> None:
    _stop(driver_box, profile_dir)
    reaper.close()  # sweeps anything of this browser still tagged, then exits


def _stop(driver_box: list, profile_dir: str) -> None:
    """Quit the driver (Chromium with it), kill chromedriver and any Chromium process that lingers (a frozen one
    does not quit), remove the profile. Idempotent."""
    import psutil

    driver = driver_box.pop() if driver_box else None
    if driver is not None:
        process = getattr(getattr(driver, "service", None), "process", None)
        try:
            family = psutil.Process(process.pid).children(recursive=True) if process is not None else []
        except psutil.Error:
            family = []
        try:
            driver.command_executor._client_config.timeout = QUIT_TIMEOUT_S
            driver.quit()
        except Exception:  # already dead or not answering: its processes are killed below
            pass
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=5)
        for child in family:
            try:
                child.kill()
            except psutil.Error:  # gone with the driver, as it should be
                pass
    shutil.rmtree(profile_dir, ignore_errors=True)


class HeadlessChromium:
    """One headless Chromium under chromedriver, with a fresh profile in a temp dir."""

    def __init__(self) -> None:
        if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
            raise BrowserError(f"WebShop-Browser needs Debian's chromium and chromium-driver ({CHROMIUM}, "
                               f"{CHROMEDRIVER}); install them with scripts/install.sh or use eppo/WebShop-v0")
        self.profile_dir = tempfile.mkdtemp(prefix=owned_prefix("eppo-webshop-chromium-"))
        self._box: list = []
        self._reaper = Reaper(self.profile_dir)  # kills chromedriver and Chromium if this process dies without closing them
        # Runs on close(), on garbage collection and at interpreter exit, whichever comes first.
        self._finalizer = weakref.finalize(self, _stop_all, self._box, self.profile_dir, self._reaper)
        try:
            self._launch()
        except BrowserError:  # a Chromium that dies while starting (killed, out of memory) gets one more start,
            self._launch()  # as one that dies in a session is restarted once

    def _launch(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        shutil.rmtree(self.profile_dir, ignore_errors=True)
        # Chromium's own temp folders (org.chromium.Chromium.*) go inside the profile, so they go with it, even
        # when Chromium is killed before it can remove them.
        temp_dir = os.path.join(self.profile_dir, "tmp")
        os.makedirs(temp_dir, exist_ok=True)
        options.add_argument(f"--user-data-dir={self.profile_dir}")
        env = {**self._reaper.env(), "TMPDIR": temp_dir}
        try:
            service = Service(CHROMEDRIVER, env=env, popen_kw={"preexec_fn": _keep_priority})
            driver = webdriver.Chrome(service=service, options=options)
        except Exception as exc:
            raise BrowserError(f"could not start headless Chromium: {_one_line(exc)}") from exc
        driver.command_executor._client_config.timeout = COMMAND_TIMEOUT_S
        driver.set_page_load_timeout(PAGE_TIMEOUT_S)
        driver.set_script_timeout(PAGE_TIMEOUT_S)
        self._box.append(driver)

    @property
    def driver(self) -> Any:
        if not self._box:
            raise BrowserError("the browser is closed")
        return self._box[0]

    @property
    def alive(self) -> bool:
        return bool(self._box) and self._finalizer.alive

    def restart(self) -> None:
        _stop(self._box, self.profile_dir)
        self._launch()

    def close(self) -> None:
        self._finalizer()


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """`exc` as one line: its type and message, without the native stack trace chromedriver appends to its
    errors (str() of a WebDriverException is 'Message: ...' then 'Stacktrace:' and ~18 lines of addresses)."""
    message = getattr(exc, "msg", None) or str(exc)  # WebDriverException.msg: the message alone
    return " ".join(f"{type(exc).__name__}: {message}".split())[:limit]


def _browser_errors() -> tuple[type[BaseException], ...]:
    from selenium.common.exceptions import WebDriverException
    from urllib3.exceptions import HTTPError

    return (WebDriverException, HTTPError, ConnectionError, TimeoutError)


_DEAD_WORDS = ("invalid session", "session deleted", "not reachable", "disconnected", "no such window", "crash")


def _is_dead(exc: BaseException) -> bool:
    """Whether an error means the browser is gone (restart it), not that a page is mid-load (read again)."""
    from selenium.common.exceptions import WebDriverException

    return not isinstance(exc, WebDriverException) or any(w in str(exc).lower() for w in _DEAD_WORDS)


class BrowserFrontend:
    """Plays commands in Chromium against this env's own server; one browser and one session per env."""

    def __init__(self, world: ShopWorld, exact_options: tuple[str, ...] = ()) -> None:
        self.world = world
        self.exact_options = exact_options
        self.server: ShopServer | None = None
        self.browser: HeadlessChromium | None = None
        self.sid = ""
        self.page: Page | None = None

    def _ensure_started(self) -> None:
        if self.server is None:
            self.server = ShopServer(self.world, exact_options=self.exact_options)
        if self.browser is None:
            self.browser = HeadlessChromium()

    def start(self, goal: Goal) -> Page:
        self._ensure_started()
        assert self.server is not None
        if self.sid:
            self.server.drop_session(self.sid)
        self.sid = self.server.new_session(goal)
        self.page = self._guarded(self._open)
        return self.page

    def perform(self, command: Command) -> Page:
        assert self.page is not None
        before = self.page.seq
        self.page = self._guarded(lambda: self._act(command, before), retry=lambda: self._redo(command, before))
        return self.page

    # ------------------------------------------------------------------ browser work
    def _open(self) -> Page:
        assert self.server is not None and self.browser is not None
        self.browser.driver.get(self.server.url(self.sid))
        return self._await_page(-1)

    def _act(self, command: Command, before: int) -> Page:
        assert self.browser is not None
        driver = self.browser.driver
        if command.verb == "search":
            from selenium.webdriver.common.by import By
            from selenium.webdriver.common.keys import Keys

            box = driver.find_element(By.ID, "search-box")
            box.clear()
            box.send_keys(command.arg + Keys.ENTER)
        else:
            button = driver.execute_script(FIND_BUTTON_JS, clean(command.arg).lower())
            if button is None:
                raise BrowserError(f"the page has no button {command.arg!r}, although the env's page model had one")
            button.click()
        return self._await_page(before)

    def _redo(self, command: Command, before: int) -> Page:
        """After a restart: reload the session; if the command never reached the server, play it once more."""
        page = self._open()
        return page if page.seq > before else self._act(command, before)

    def _await_page(self, before: int) -> Page:
        """Poll the DOM until the page that follows action number `before` has rendered."""
        assert self.browser is not None
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while True:
            try:
                data = self.browser.driver.execute_script(READ_PAGE_JS)
            except _browser_errors() as exc:
                if _is_dead(exc):
                    raise
                data = None  # the document is being replaced under us: read again
            if data is not None and int(data["seq"]) > before:
                return page_from_dom(data)
            if time.monotonic() > deadline:
                raise BrowserError(f"the shop page did not update within {PAGE_TIMEOUT_S} s")
            time.sleep(0.01)

    def _guarded(self, work: Callable[[], Page], retry: Callable[[], Page] | None = None) -> Page:
        """Run `work`; if the browser died or hung, restart it once and run `retry` (or `work` again)."""
        try:
            return work()
        except (BrowserError, *_browser_errors()) as first:
            assert self.browser is not None
            try:
                self.browser.restart()
                return (retry or work)()
            except Exception as exc:
                raise BrowserError(f"headless Chromium failed ({_one_line(first, 200)}) and could not be "
                                   f"restarted: {_one_line(exc)}") from exc

    def close(self) -> None:
        if self.browser is not None:
            self.browser.close()
            self.browser = None
        if self.server is not None:
            self.server.close()
            self.server = None


class WebShopBrowserEnv(WebShopEnv):
    """WebShop in headless Chromium: same observations, actions and rewards as `eppo/WebShop-v0`."""

    def _make_frontend(self) -> BrowserFrontend:
        return BrowserFrontend(self.world, self.exact_options)
