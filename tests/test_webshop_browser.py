"""WebShop in headless Chromium: same text and rewards as text mode, isolated sessions, no orphan browsers."""

import gc
import os
from pathlib import Path

import pytest

import eppo_envs
import eppo_envs.webshop  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="Debian chromium is not installed"),
]


def _norm(text: str) -> str:
    return " ".join(text.split())


def _chromium_pids(profile_dir: str) -> list[int]:
    """Processes whose command line names this profile dir (Chromium and all its helpers)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if profile_dir.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


@pytest.fixture(scope="module")
def pair():
    browser, text = eppo_envs.make("eppo/WebShop-Browser-v0"), eppo_envs.make("eppo/WebShop-v0")
    yield browser, text
    browser.close()
    text.close()


def _scripted(seed: int) -> list[str]:
    """A detour through every page kind before the expert takes over (None = ask the expert)."""
    detours = [
        ["search[wireless earbuds]", "click[next >]", "click[< prev]", "click[back to search]"],
        ["click[buy now]", "search[shampoo sulfate free]", "search[again]", "click[back to search]"],
        [None, "click[next >]", "click[< prev]"],
        [None, None, "click[description]", "click[< prev]", "click[features]", "click[reviews]", "click[< prev]"],
        [None, None, "click[reviews]", "click[< prev]", "click[nonsense]", "<action>oops"],
    ]
    return detours[seed % len(detours)]


def _act(env, action):
    return env.unwrapped.expert_action() if action is None else action


@pytest.mark.parametrize("seed", range(5))
def test_same_actions_same_observations_and_rewards(pair, seed):
    browser, text = pair
    obs_b, info_b = browser.reset(seed=seed, options={"split": "test"})
    obs_t, info_t = text.reset(seed=seed, options={"split": "test"})
    assert _norm(obs_b) == _norm(obs_t) and info_b["instruction"] == info_t["instruction"]
    plan = _scripted(seed) + [None] * 15
    for step, planned in enumerate(plan):
        action = _act(text, planned)
        assert planned is not None or action == browser.unwrapped.expert_action()
        obs_b, r_b, term_b, trunc_b, info_b = browser.step(action)
        obs_t, r_t, term_t, trunc_t, info_t = text.step(action)
        assert _norm(obs_b) == _norm(obs_t), f"step {step} {action!r}"
        assert (r_b, term_b, trunc_b) == (r_t, term_t, trunc_t)
        assert info_b["action_valid"] == info_t["action_valid"]
        assert info_b["admissible_actions"] == info_t["admissible_actions"]
        if term_t or trunc_t:
            break
    assert term_t and info_b["won"] == info_t["won"]


def test_two_browser_envs_do_not_see_each_other(pair):
    _, text = pair
    a, b = eppo_envs.make("eppo/WebShop-Browser-v0"), eppo_envs.make("eppo/WebShop-Browser-v0")
    try:
        obs_a, _ = a.reset(seed=10, options={"split": "test"})
        obs_b, _ = b.reset(seed=11, options={"split": "test"})
        assert obs_a != obs_b
        a.step("<action>search[bluetooth speaker waterproof]</action>")
        a.step("<action>click[next >]</action>")
        # b is still on its own search page, with its own instruction
        obs_b, _, _, _, info_b = b.step("<action>click[next >]</action>")
        assert not info_b["action_valid"] and "search[<your query>]" in obs_b
        obs_b, _, _, _, info_b = b.step("<action>search[coffee beans]</action>")
        text.reset(seed=11, options={"split": "test"})
        obs_t, *_ = text.step("<action>search[coffee beans]</action>")
        assert _norm(obs_b) == _norm(obs_t) and "Page 1 of" in obs_b
        obs_a, *_ = a.step("<action>click[< prev]</action>")
        assert "Page 1 of" in obs_a and "Instruction: " + a.unwrapped.goal.instruction in obs_a
        assert a.unwrapped.frontend.browser.profile_dir != b.unwrapped.frontend.browser.profile_dir
    finally:
        a.close()
        b.close()


def test_dead_browser_is_restarted_and_the_session_goes_on(pair):
    browser, text = pair
    browser.reset(seed=4, options={"split": "test"})
    text.reset(seed=4, options={"split": "test"})
    for _ in range(2):
        action = text.unwrapped.expert_action()
        browser.step(action)
        text.step(action)
    browser.unwrapped.frontend.browser.driver.quit()  # Chromium is gone; the server keeps the session
    action = text.unwrapped.expert_action()
    obs_b, *_ = browser.step(action)
    obs_t, *_ = text.step(action)
    assert _norm(obs_b) == _norm(obs_t)


def test_close_and_garbage_collection_leave_no_chromium():
    env = eppo_envs.make("eppo/WebShop-Browser-v0")
    env.reset(seed=0)
    profile = env.unwrapped.frontend.browser.profile_dir
    assert _chromium_pids(profile)
    env.close()
    assert not _chromium_pids(profile) and not os.path.exists(profile)
    env.close()  # closing twice is fine

    env = eppo_envs.make("eppo/WebShop-Browser-v0")
    env.reset(seed=0)
    profile = env.unwrapped.frontend.browser.profile_dir
    port = env.unwrapped.frontend.server.port
    del env
    gc.collect()
    assert not _chromium_pids(profile)
    import socket

    with socket.socket() as s:  # the server's port was released
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_browser_that_cannot_restart_gives_a_clear_error(monkeypatch):
    from eppo_envs.webshop.browser import BrowserError, HeadlessChromium

    env = eppo_envs.make("eppo/WebShop-Browser-v0")
    try:
        env.reset(seed=0)
        env.unwrapped.frontend.browser.driver.quit()

        def broken_launch(self):
            raise BrowserError("chromium would not start")

        monkeypatch.setattr(HeadlessChromium, "_launch", broken_launch)
        with pytest.raises(BrowserError, match="could not be restarted: BrowserError: chromium would not start"):
            env.step("<action>search[tea]</action>")
    finally:
        env.close()


def _dying_chromium(tmp_path: Path, starts_that_die: int) -> str:
    """A Chromium binary whose first `starts_that_die` starts are SIGKILLed before it is up (as the OOM killer or
    a `kill -9` would), then the real one: chromedriver starts it as it starts Chromium."""
    script = tmp_path / "chromium"
    count = tmp_path / "starts"
    script.write_text(f"""#!/bin/sh
echo x >> {count}
if [ "$(wc -l < {count})" -le {starts_that_die} ]; then kill -9 $$; fi
exec /usr/bin/chromium "$@"
""")
    script.chmod(0o755)
    return str(script)


def test_a_chromium_killed_while_starting_is_started_again(tmp_path, monkeypatch):
    """A browser that dies in a session is restarted once, and so is one that dies while chromedriver starts it
    (killed at start-up, e.g. out of memory while many envs start their browsers): it must not end the whole
    evaluation or rollout."""
    from eppo_envs.webshop import browser

    monkeypatch.setattr(browser, "CHROMIUM", _dying_chromium(tmp_path, 1))
    env = eppo_envs.make("eppo/WebShop-Browser-v0")
    try:
        obs, _ = env.reset(seed=0)
        assert "search" in obs.lower()
        assert (tmp_path / "starts").read_text().count("x") == 2
    finally:
        env.close()


def test_a_chromium_that_keeps_dying_at_start_is_one_line(tmp_path, monkeypatch):
    """The error names what failed in one line, without chromedriver's native stack trace (18 lines of
    '#N 0x... <unknown>') under eppo-eval's error line."""
    from eppo_envs.webshop import browser

    monkeypatch.setattr(browser, "CHROMIUM", _dying_chromium(tmp_path, 99))
    env = eppo_envs.make("eppo/WebShop-Browser-v0")
    try:
        with pytest.raises(browser.BrowserError) as err:
            env.reset(seed=0)
    finally:
        env.close()
    message = str(err.value)
    assert "\n" not in message and "Stacktrace" not in message and "<unknown>" not in message, message
    assert message.startswith("could not start headless Chromium: SessionNotCreatedException: session not created")


_OWNER = """
import os, sys, time
import eppo_envs, eppo_envs.webshop
env = eppo_envs.make("eppo/WebShop-Browser-v0")
env.reset(seed=0)
browser = env.unwrapped.frontend.browser
driver_pid = browser.driver.service.process.pid
print(browser.profile_dir, driver_pid, browser._reaper.process.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_sigkill_of_the_owner_leaves_no_browser_process():
    import signal
    import subprocess
    import sys
    import time

    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        profile, driver_pid, reaper_pid = owner.stdout.readline().split()
        before = _chromium_pids(profile)
        assert len(before) >= 3 and _alive(int(driver_pid)), before  # Chromium's processes and chromedriver
        assert list(Path(profile, "tmp").glob("org.chromium.*"))  # its temp folders are inside the profile
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 5.0  # "nothing survives the owner by more than a few seconds"
        while time.monotonic() < deadline and (_chromium_pids(profile) or _alive(int(driver_pid))):
            time.sleep(0.1)
        assert _chromium_pids(profile) == [] and not _alive(int(driver_pid))
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _alive(int(reaper_pid)):
            time.sleep(0.1)
        assert not _alive(int(reaper_pid))  # the reaper itself is gone too
        assert not os.path.exists(profile)  # and so is the profile folder the owner never removed
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_sigterm_to_the_reaper_sweeps_the_browser_and_its_profile():
    """A command's cleanup (interrupt.guard, the command's watchdog) sends SIGTERM to every descendant, the
    browser's reaper included, before the owner exits: the reaper must then sweep at once, not die leaving the
    profile folder in /tmp (an interrupted `eppo-eval` on WebShop-Browser left one per env)."""
    import signal
    import time

    env = eppo_envs.make("eppo/WebShop-Browser-v0")
    try:
        env.reset(seed=0)
        browser = env.unwrapped.frontend.browser
        profile, reaper = browser.profile_dir, browser._reaper.process
        assert _chromium_pids(profile)
        reaper.send_signal(signal.SIGTERM)
        reaper.wait(timeout=10)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and (_chromium_pids(profile) or os.path.exists(profile)):
            time.sleep(0.1)
        assert not _chromium_pids(profile) and not os.path.exists(profile)
    finally:
        env.close()


def test_the_profile_folder_carries_the_commands_watchdog_marker(monkeypatch):
    """eppo-eval killed with -9 mid-episode: its watchdog SIGTERMs Chromium and the browser's own reaper together,
    and a Chromium still shutting down may write its profile again after that reaper has removed it. Named with the
    command's marker, the profile folder is removed by the watchdog once everything has ended."""
    from eppo_envs.tools.teardown.watchdog import remove_owned_temp
    from eppo_envs.webshop.browser import HeadlessChromium

    monkeypatch.setenv("EPPO_OWNER_TAG", "0123456789abcdef fedcba9876543210")
    browser = HeadlessChromium()
    try:
        assert os.path.basename(browser.profile_dir).startswith("eppo-webshop-chromium-fedcba9876543210-")
    finally:
        browser.close()
    os.makedirs(browser.profile_dir)  # what a dying Chromium writes after the browser's reaper removed it
    assert remove_owned_temp("fedcba9876543210") == [os.path.basename(browser.profile_dir)]


def test_a_frozen_chromium_is_replaced_within_a_bounded_time(monkeypatch):
    """A Chromium that stops answering (SIGSTOP: alive, silent) is restarted after the command timeout, and the
    frozen processes are killed rather than quit: urllib3 retries quit() of a frozen browser at the command timeout
    each time, which would hold one step for ~5 min (with the 60 s timeout)."""
    import signal
    import time

    import psutil

    import eppo_envs.webshop.browser as browser_module

    monkeypatch.setattr(browser_module, "COMMAND_TIMEOUT_S", 10)
    monkeypatch.setattr(browser_module, "QUIT_TIMEOUT_S", 1)
    env = eppo_envs.make("eppo/WebShop-Browser-v0")
    try:
        env.reset(seed=0, options={"split": "test"})
        driver = env.unwrapped.frontend.browser.driver
        frozen = [p for p in psutil.Process(driver.service.process.pid).children() if p.name() == "chromium"]
        assert frozen
        for proc in frozen:
            proc.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        obs, reward, *_ = env.step("search[shoes]")
        took = time.monotonic() - start
        assert "shoes" in obs.lower() and reward == 0.0
        assert took < 35, took  # the 10 s timeout, then the restart (quit alone would take ~4 x the timeout)
        time.sleep(0.5)
        assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in frozen)
    finally:
        env.close()


def test_chromium_keeps_the_niceness_of_its_owner(tmp_path):
    """Run as root, Chromium raises its display threads to nice -8 (and resets others to 0): a niced run would then
    compete at full priority with what it was niced for. Every thread of chromedriver and Chromium keeps its owner's
    niceness."""
    import subprocess
    import sys

    script = tmp_path / "niced.py"
    script.write_text(
        "import os, psutil\n"
        "mine = os.nice(5)\n"
        "from eppo_envs.webshop.browser import HeadlessChromium\n"
        "b = HeadlessChromium()\n"
        "b.driver.get('about:blank')\n"
        "seen = set()\n"
        "for p in psutil.Process().children(recursive=True):\n"
        "    try:\n"
        "        seen |= {os.getpriority(os.PRIO_PROCESS, t.id) for t in p.threads()}\n"
        "    except (psutil.Error, OSError):\n"
        "        pass\n"
        "b.close()\n"
        "print(mine, sorted(seen))\n")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(root)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    mine, _, listed = out.stdout.strip().splitlines()[-1].partition(" ")
    seen = [int(x) for x in listed.strip("[]").split(",")]
    assert seen and min(seen) >= int(mine) >= 5, (mine, seen)
