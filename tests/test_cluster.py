"""A real multi-node Ray cluster on this machine (separate raylets, nothing leaves the machine): placement by resources, a node
lost mid-iteration, and `eppo-train --ray-address` against a `ray start --head`. All slow (`make test-slow`).

Each test keeps Ray's temp dir (and so its `ray_current_cluster` address file) private: a plain `ray.init()` of
anyone else on the machine must never find, and join, one of these clusters.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
# Small enough for a shared 2-core machine: no SFT, two iterations, two env workers.
QUICK = ["sft.steps=0", "run.iterations=2", "run.tensorboard=false", "run.plots=false", "env.num_workers=2"]
PLACED = ["ray.resources_per_worker={env: 1}", "ray.cpus_per_worker=0.5", "ray.generator_resources={trainer: 1}",
          "ray.learner_resources={trainer: 1}", "ray.torch_threads=2"]
EXPECTED = {"guess_small": 6, "guess_large": 6}  # problems x group_size per task in the tiny config


@pytest.fixture
def ray_tmp(monkeypatch):
    # A short path: Ray's unix sockets live under it (107-character limit).
    path = tempfile.mkdtemp(prefix="eppo-rc-", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", path)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _cluster() -> tuple[Cluster, list]:
    """A head (the generator and the learner: resource `trainer`) and two env nodes (resource `env`).

    The nodes use this machine's own address, not 127.0.0.1: a driver given a loopback address rewrites it to the
    node's address (ray._private.services.resolve_ip_for_localhost), which a loopback-bound GCS does not answer.
    """
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"trainer": 2}, "object_store_memory": 80 * MB, "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=1, resources={"env": 2}, object_store_memory=80 * MB)
               for _ in range(2)]
    cluster.wait_for_nodes()
    return cluster, workers


def _env(ray_tmp: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "RAY_TMPDIR": ray_tmp, "TOKENIZERS_PARALLELISM": "false"}


def _train_cli(address: str, out: Path, extra: list[str], ray_tmp: str, timeout: float = 480):
    sets = [f"run.out_dir={out}", *QUICK, *extra]
    cmd = [sys.executable, "-m", "eppo_train.cli", "--config", "tiny", "--ray-address", address]
    for item in sets:
        cmd += ["--set", item]
    return subprocess.run(cmd, cwd=ROOT, env=_env(ray_tmp), capture_output=True, text=True, timeout=timeout)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _check_counts(rows: list[dict]) -> None:
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert math.isfinite(r["loss"])
        for task, n in EXPECTED.items():
            assert r["tasks"][task]["episodes"] == n and r["tasks"][task]["samples"] == n, (task, r["tasks"][task])


@pytest.mark.timeout(600)
def test_tiny_on_three_nodes_places_env_workers_off_the_head(ray_tmp, tmp_path):
    cluster, env_nodes = _cluster()
    try:
        done = _train_cli(cluster.address, tmp_path, PLACED, ray_tmp)
        assert done.returncode == 0, done.stderr[-3000:]
        run = tmp_path / "tiny"
        where = json.loads((run / "placement.json").read_text())
        head, env_ids = cluster.head_node.node_id, {n.node_id for n in env_nodes}
        assert where["generator"] == head and where["learner"] == head and where["driver"] == head
        assert len(where["env_workers"]) == 2 and set(where["env_workers"]) <= env_ids  # none on the head
        rows = _metrics(run)
        _check_counts(rows)
        for r in rows:  # every kind of traffic was counted, and weights went out once per iteration
            assert r["net_env_bytes"] > 0 and r["net_generate_bytes"] > 0 and r["net_samples_bytes"] > 0
            assert r["net_weights_bytes"] > 1 * MB
        print("bytes per iteration:", {k: v for k, v in rows[-1].items() if k.startswith("net_")})
    finally:
        cluster.shutdown()


@pytest.mark.timeout(600)
def test_losing_an_env_node_mid_iteration_reruns_its_episodes_elsewhere(ray_tmp, tmp_path, monkeypatch):
    from eppo_train.config import load_config
    from eppo_train.learner.workers import RayWorkers
    from eppo_train.rollout import env_pool
    from eppo_train.trainer import train

    cluster, env_nodes = _cluster()
    seen: dict = {"resets": 0, "removed": None, "pools": [], "batches": []}
    original_step, original_reset, original_train = env_pool.RayEnvPool.step, env_pool.RayEnvPool.reset, RayWorkers.train

    def reset(self, jobs):
        seen["resets"] += 1
        if self not in seen["pools"]:
            seen["pools"].append(self)
        return original_reset(self, jobs)

    def step(self, slots, actions):
        # Iteration 2, first env step: take away the node that hosts env worker 0, then step as usual.
        if seen["resets"] == 2 and seen["removed"] is None:
            victim_id = self.placement()[0]
            victim = next(n for n in env_nodes if n.node_id == victim_id)
            cluster.remove_node(victim)
            seen["removed"] = victim_id
        return original_step(self, slots, actions)

    def record_train(self, samples):
        seen["batches"].append(list(samples))
        return original_train(self, samples)

    monkeypatch.setattr(env_pool.RayEnvPool, "reset", reset)
    monkeypatch.setattr(env_pool.RayEnvPool, "step", step)
    monkeypatch.setattr(RayWorkers, "train", record_train)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cfg = load_config("tiny", [f"run.out_dir={tmp_path}", f"ray.address={cluster.address}", *QUICK, *PLACED])
        run = train(cfg)
        pool = seen["pools"][0]
        assert seen["removed"] is not None and pool.restarts >= 1
        survivors = {n.node_id for n in env_nodes} - {seen["removed"]}
        assert set(pool.placement()) <= survivors  # the episodes went on on the node that is left
        _check_counts(_metrics(run))
        for batch in seen["batches"]:  # one sample per episode: none lost, none twice, every group complete
            episodes = [s.episode_id for s in batch]
            assert len(episodes) == len(set(episodes)) == sum(EXPECTED.values())
            groups: dict[str, int] = {}
            for s in batch:
                groups[s.group_id] = groups.get(s.group_id, 0) + 1
            assert set(groups.values()) == {3}
    finally:
        ray.shutdown()
        cluster.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(600)
def test_eppo_train_joins_a_ray_start_head(ray_tmp, tmp_path):
    port = _free_port()
    ports = {f"--{name}": str(_free_port()) for name in (
        "node-manager-port", "object-manager-port", "ray-client-server-port", "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port")}
    ray_bin = str(Path(sys.executable).with_name("ray"))
    head = [ray_bin, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
            "--num-cpus=4", '--resources={"env": 2, "trainer": 2}', f"--temp-dir={ray_tmp}",
            "--include-dashboard=false", f"--object-store-memory={100 * MB}", "--disable-usage-stats",
            *[f"{k}={v}" for k, v in ports.items()]]
    # `--block` keeps `ray start` in the foreground, so this test stops exactly its own head (its process group)
    # instead of `ray stop`, which stops every Ray on the machine, other users' included.
    proc = subprocess.Popen(head, env=_env(ray_tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            probe = subprocess.run([ray_bin, "status", f"--address={address}"], env=_env(ray_tmp),
                                   capture_output=True, text=True, timeout=60)
            if probe.returncode == 0:
                break
            assert proc.poll() is None, proc.stdout.read()[-3000:] if proc.stdout else "ray start exited"
            time.sleep(2)
        else:
            raise AssertionError("the Ray head did not come up within 120 s")
        done = _train_cli(address, tmp_path, PLACED, ray_tmp)
        assert done.returncode == 0, done.stderr[-3000:]
        _check_counts(_metrics(tmp_path / "tiny"))
        assert (tmp_path / "tiny" / "latest").read_text().strip() == "step_000002"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        time.sleep(2)  # its raylet and GCS shut down on SIGTERM; sweep what is left of the group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.timeout(900)
def test_learner_ranks_on_two_nodes_sync_weights_to_an_engine_on_a_third(ray_tmp, tmp_path):
    """learner.world_size=2 with each rank on its own node (resource `rank`) and the engine on a third (`engine`):
    the ranks join one gloo group across nodes, rank 0's weights reach the engine through the object store, and the
    checkpoint comes back to the driver; no path is shared between the actors."""
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "object_store_memory": 80 * MB, "include_dashboard": False})
    ranks = [cluster.add_node(num_cpus=1, resources={"rank": 1}, object_store_memory=80 * MB) for _ in range(2)]
    engine = cluster.add_node(num_cpus=1, resources={"engine": 1}, object_store_memory=80 * MB)
    cluster.wait_for_nodes()
    try:
        extra = ["learner.world_size=2", "learner.resources_per_rank={rank: 1}", "ray.generator_resources={engine: 1}",
                 "model.backend=hf", "env.num_workers=1", "ray.torch_threads=1"]
        done = _train_cli(cluster.address, tmp_path, extra, ray_tmp, timeout=840)
        assert done.returncode == 0, done.stderr[-3000:]
        run = tmp_path / "tiny"
        where = json.loads((run / "placement.json").read_text())
        assert sorted(where["learner_ranks"]) == sorted(n.node_id for n in ranks)
        assert where["generator"] == engine.node_id
        rows = _metrics(run)
        _check_counts(rows)
        for r in rows:  # every trainable fp32 weight of the tiny model, once per sync
            assert r["weight_sync_bytes"] == 4 * 3_219_776 and r["weight_sync_s"] > 0
        print("weight sync per iteration:", [(r["weight_sync_bytes"], round(r["weight_sync_s"], 3)) for r in rows])
        assert (run / "checkpoints" / "step_000002" / "dcp" / ".metadata").is_file()
        assert len(list((run / "checkpoints" / "step_000002" / "dcp").glob("*.distcp"))) == 2  # one per rank
    finally:
        cluster.shutdown()
