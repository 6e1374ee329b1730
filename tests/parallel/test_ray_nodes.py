"""A 2-node Ray cluster on 127.0.0.1 whose nodes share no output disk: renders and an index build on it.

The head node (``ray start --head --num-cpus 1``) runs in this machine's mount
namespace. The second node (``ray start --address ... --num-cpus 1``) runs
under ``unshare -m`` with a private tmpfs mounted over the render's output
folder and over its own TMPDIR: what its tasks write there, nobody else
sees, as on a real cluster. Sources and URL outputs live on moto's S3 server
(127.0.0.1). Drivers are separate ``audiotree`` processes joining by address.

Both nodes run ``ray start --block`` as children of this test, each with a
private ``--temp-dir``; the fixture stops them by their process ids (never
``ray stop``, which would stop every Ray on the machine), waits for every
process of theirs to exit, and removes their session folders.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_same_render
from servers import free_port, moto_s3

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'audiotree[ray]')")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).with_name("ray"))


def _node_ports() -> list[str]:
    """Every port a node listens on, free ones (other clusters may run on this machine)."""
    return ["--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
            "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
            "--metrics-export-port", str(free_port()), "--runtime-env-agent-port", str(free_port()),
            "--min-worker-port", "0", "--max-worker-port", "0"]


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt && umount /mnt"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


def _descendants(procs) -> list:
    found = []
    for popen in procs:
        try:
            root = psutil.Process(popen.pid)
            found += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture(scope="module")
def s3_store(tmp_path_factory):
    """moto on 127.0.0.1 holding a small corpus under s3://corpus/audio; the AWS variables for every process."""
    import soundfile

    with moto_s3() as server:
        fs = server.fs
        fs.mkdir("corpus")
        rng = np.random.default_rng(3)
        local = tmp_path_factory.mktemp("wav")
        for i in range(6):
            soundfile.write(local / f"f{i}.wav", rng.standard_normal(16000 * (2 + i % 3)).astype(np.float32) * 0.1,
                            16000)
            fs.put_file(str(local / f"f{i}.wav"), f"corpus/audio/f{i}.wav")
        yield {"fs": fs, "env": server.env}


@pytest.fixture(scope="module")
def two_nodes(s3_store, tmp_path_factory):
    if not _can_unshare():
        pytest.skip("needs unshare -m and tmpfs mounts (root) for a node with a private disk")
    home = Path.home()
    before = {name: sorted(os.listdir(home / name)) if (home / name).is_dir() else None for name in (".ray",)}
    root = tmp_path_factory.mktemp("cluster")
    private = root / "out"  # the driver's output folder; the second node sees its own tmpfs here
    private.mkdir()
    node_tmp = root / "node2-tmp"  # the second node's TMPDIR: a tmpfs of its own
    node_tmp.mkdir()
    # Short folders: Ray's Unix sockets live under them and their paths have a length limit.
    head_dir = tempfile.mkdtemp(prefix="atrh", dir="/tmp")
    node_dir = tempfile.mkdtemp(prefix="atrw", dir="/tmp")
    port = free_port()
    address = f"127.0.0.1:{port}"
    # tests/conftest.py turns multi-node clusters off (Ray's one-node mode binds 127.0.0.1); here every node is
    # given --node-ip-address 127.0.0.1 instead.
    env = {**os.environ, **s3_store["env"], "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": os.pathsep.join(sys.path),
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    assert env.get("RAY_AUTH_TOKEN") and env.get("RAY_AUTH_MODE") == "token"
    procs = []
    logs = []
    try:
        head_log = open(root / "head.log", "wb")  # noqa: SIM115 - closed below
        logs.append(head_log)
        procs.append(subprocess.Popen(
            [RAY, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus",
             "1", "--temp-dir", head_dir, "--include-dashboard", "false", "--disable-usage-stats",
             "--ray-client-server-port", str(free_port()), *_node_ports()],
            env=env, stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_nodes(address, 1, env)
        node_log = open(root / "node2.log", "wb")  # noqa: SIM115 - closed below
        logs.append(node_log)
        script = (f"mount -t tmpfs tmpfs {private} && mount -t tmpfs tmpfs {node_tmp} && "
                  f"exec {RAY} start --block --address {address} --node-ip-address 127.0.0.1 --num-cpus 1 "
                  f"--temp-dir {node_dir} --disable-usage-stats {' '.join(_node_ports())}")
        procs.append(subprocess.Popen(["unshare", "-m", "sh", "-c", script], env={**env, "TMPDIR": str(node_tmp)},
                                      stdout=node_log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_nodes(address, 2, env)
        yield {"address": address, "private": private, "env": env, "procs": procs, "root": root}
    finally:
        ours = _descendants(procs)
        for popen in reversed(procs):  # the worker node first, then the head
            if popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(timeout=30)
        _, alive = psutil.wait_procs(ours, timeout=60)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for proc in alive:  # only what these two nodes started; reported below as a failure
            proc.kill()
        for log in logs:
            log.close()
        shutil.rmtree(head_dir, ignore_errors=True)
        shutil.rmtree(node_dir, ignore_errors=True)
    assert not alive, f"Ray processes left behind: {alive}"
    after = {name: sorted(os.listdir(home / name)) if (home / name).is_dir() else None for name in (".ray",)}
    assert after == before, "the cluster wrote under the home folder"


def _wait_nodes(address: str, count: int, env: dict, timeout: float = 180) -> None:
    code = ("import ray, sys, time\n"
            f"ray.init(address={address!r}, log_to_driver=False)\n"
            f"deadline = time.monotonic() + {timeout}\n"
            f"while sum(n['Alive'] for n in ray.nodes()) < {count} and time.monotonic() < deadline:\n"
            "    time.sleep(0.5)\n"
            f"sys.exit(0 if sum(n['Alive'] for n in ray.nodes()) >= {count} else 1)\n")
    deadline = time.monotonic() + timeout
    while True:  # the head may not accept connections yet
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                timeout=timeout + 60)
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the cluster did not reach {count} node(s): {result.stderr[-2000:]}")
        time.sleep(1)


def _cli(env: dict, *args, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "audiotree.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


RENDER = ["s3://corpus/audio", "-n", "24", "--part-size", "4", "--batch-size", "1", "--duration", "0.5",
          "--sample-rate", "16000"]


@pytest.fixture(scope="module")
def local_render(two_nodes, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "render"
    result = _cli(two_nodes["env"], "render", *RENDER, "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _fetch(fs, url: str, into: Path) -> Path:
    fs.invalidate_cache()
    fs.get(url.removeprefix("s3://"), str(into), recursive=True)
    return into


def test_render_to_s3_on_two_nodes_equals_the_local_render(two_nodes, s3_store, local_render, tmp_path):
    result = _cli(two_nodes["env"], "render", *RENDER, "--out", "s3://corpus/renders/ray", "--executor", "ray",
                  "--ray-address", two_nodes["address"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_render(local_render, _fetch(s3_store["fs"], "s3://corpus/renders/ray", tmp_path / "copy"))


def test_render_to_a_path_only_one_node_sees_is_refused_clearly(two_nodes, local_render):
    out = two_nodes["private"] / "render"
    result = _cli(two_nodes["env"], "render", *RENDER, "--out", out, "--executor", "ray", "--ray-address",
                  two_nodes["address"])
    if result.returncode == 0:  # every task ran on the driver's node: then it must be the local render
        assert_same_render(local_render, out)
        pytest.fail("no task ran on the second node; the test did not exercise a private disk")
    assert "must be on storage every node shares" in result.stderr and "s3://" in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert (out / "render.json").exists()  # what was committed stays; a re-run with a shared --out resumes


def _task_workers(procs) -> list:
    from audiotree.parallel._ray import TASK_NAME

    found = []
    for proc in _descendants(procs):
        try:
            if proc.name().startswith(f"ray::{TASK_NAME}") or " ".join(proc.cmdline()).startswith(f"ray::{TASK_NAME}"):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_killed_worker_mid_render_to_s3_gives_the_identical_render(two_nodes, s3_store, local_render, tmp_path):
    url = "s3://corpus/renders/killed"
    popen = subprocess.Popen([sys.executable, "-m", "audiotree.cli", "render", *RENDER, "--out", url, "--executor",
                              "ray", "--ray-address", two_nodes["address"]], env=two_nodes["env"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 300
    try:
        while killed is None and popen.poll() is None and time.monotonic() < deadline:
            for proc in _task_workers(two_nodes["procs"]):
                try:
                    proc.send_signal(signal.SIGKILL)
                    killed = proc.pid
                    break
                except psutil.Error:
                    continue
            time.sleep(0.01)
        out, err = popen.communicate(timeout=600)
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()
    assert killed is not None, "no worker was caught running a render task"
    assert popen.returncode == 0, err[-3000:]
    assert_same_render(local_render, _fetch(s3_store["fs"], url, tmp_path / "copy"))


def test_index_build_on_two_nodes_equals_a_local_build(two_nodes, s3_store, tmp_path):
    from audiotree.index import open_index

    env = two_nodes["env"]
    ray_build = _cli(env, "index", "s3://corpus/audio", "--out", "s3://corpus/index/ray.parquet", "--executor", "ray",
                     "--ray-address", two_nodes["address"], "--chunk-size", "1")
    assert ray_build.returncode == 0, ray_build.stderr[-3000:]
    serial = _cli(env, "index", "s3://corpus/audio", "--out", tmp_path / "serial.parquet", "--executor", "serial")
    assert serial.returncode == 0, serial.stderr[-3000:]
    a = open_index("s3://corpus/index/ray.parquet", columns="all")
    b = open_index(tmp_path / "serial.parquet", columns="all")
    assert a.paths() == b.paths() and len(a.paths()) == 6
    for name in ("size", "mtime_ns", "duration", "readable"):
        np.testing.assert_array_equal(np.asarray(a.column(name)), np.asarray(b.column(name)))
    for i in range(6):
        np.testing.assert_array_equal(a.profile(i), b.profile(i))
    assert not s3_store["fs"].exists("corpus/index/.ray.parquet.parts")
