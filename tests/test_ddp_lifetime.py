"""Chapter 11's torchrun jobs never outlive the process that launched them (Ctrl-C, SIGTERM, SIGKILL, a
launcher that is stuck), and the chapter runs across nodes (two "nodes" on this machine, gloo on the CPU)."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from datajourney.chapters.c11_gpu_to_gpu import experiment as ddp
from datajourney.chapters.c11_gpu_to_gpu import reading
from datajourney.core.paths import REPO_ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

#: A 2-process gloo job whose rank 1 hangs after two steps: it runs until something stops it.
HANGING = {"backend": "gloo", "model": "small_vit", "batch_size": 2, "image_size": 16, "classes": 10,
           "warmup_steps": 1, "steps": 2, "windows": 2, "profile_steps": 0, "powersgd_rank": 1,
           "powersgd_start_iter": 2, "bench_sizes": [65536], "bench_iters": 1, "bench_repeats": 1, "threads": 1,
           "rungs": [ddp.parse_rung("ddp", 25)] * 50, "bench_ops": [], "pg_timeout_s": 600,
           "fail": {"rank": 1, "after_steps": 2, "how": "hang"}}


def _job_processes(out: Path) -> list[psutil.Process]:
    """torchrun and its ranks: the processes whose command line names the job's config file."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if str(out / "config.json") in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def _start_launcher(out: Path, timeout_s: float = 300, kill_after_s: float = 10) -> subprocess.Popen:
    """A Python process that launches the hanging job (as a notebook kernel would) and waits for it. It sets what a
    kernel sets for Ctrl-C (SIGINT unblocked, raising KeyboardInterrupt) rather than inherit the test process's
    disposition and mask, which exec keeps."""
    code = textwrap.dedent(f"""
        import json, signal, sys
        from pathlib import Path
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from datajourney.chapters.c11_gpu_to_gpu import experiment as ddp
        ddp.launch(json.loads(sys.argv[1]), 2, Path(sys.argv[2]), timeout_s={timeout_s}, kill_after_s={kill_after_s})
    """)
    return subprocess.Popen([sys.executable, "-c", code, json.dumps(HANGING), str(out)], cwd=REPO_ROOT,
                            start_new_session=True)


def _wait_for_ranks(out: Path, launcher: subprocess.Popen) -> None:
    """Until both ranks are in the process group (rank 0 wrote its start record) and hang there."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 90:
        assert launcher.poll() is None, "the launcher ended early"
        recs = ddp.read_records(out)
        if any(r["kind"] == "start" for r in recs) and len(_job_processes(out)) >= 3:
            return
        time.sleep(0.2)
    pytest.fail("the job did not start within 90 s")


def _left_after(out: Path, seconds: float) -> list[str]:
    """The job's processes still running ``seconds`` from now (sooner, once there are none)."""
    deadline = time.monotonic() + seconds
    while True:
        left = []
        for p in _job_processes(out):
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    left.append(" ".join(p.cmdline()[:6]))
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_process_of_the_job_outlives_its_launcher(tmp_path, sig):
    """Ctrl-C (SIGINT), SIGTERM or SIGKILL to the launching process: within 15 s (a loaded 2-core machine) no
    process of the job is left (torchrun and both ranks, found by their command lines, were running before)."""
    launcher = _start_launcher(tmp_path)
    try:
        _wait_for_ranks(tmp_path, launcher)
        assert len(_job_processes(tmp_path)) >= 3  # torchrun and two ranks
        os.kill(launcher.pid, sig)
        left = _left_after(tmp_path, 15)
        assert left == [], (left, f"the launcher's exit status: {launcher.poll()}")
    finally:
        launcher.kill()
        launcher.wait()
        for p in _job_processes(tmp_path):
            p.kill()


def test_a_stuck_launcher_cannot_keep_the_job_alive(tmp_path):
    """A launcher that is alive but stopped (SIGSTOP, a frozen kernel) does not keep its job: torchrun is
    killed ``kill_after_s`` past the job's timeout, and the ranks it started with it."""
    launcher = _start_launcher(tmp_path, timeout_s=10, kill_after_s=1)
    try:
        while not _job_processes(tmp_path):  # torchrun is there: its hard limit counts from now
            assert launcher.poll() is None, "the launcher ended early"
            time.sleep(0.05)
        os.kill(launcher.pid, signal.SIGSTOP)  # before its own timeout: only the hard limit can end the job
        t0 = time.monotonic()
        assert _left_after(tmp_path, 5) != []  # the job runs on while its launcher is stopped
        assert _left_after(tmp_path, t0 + 10 + 1 + 10 - time.monotonic()) == []   # 10 s: a loaded machine
        assert launcher.poll() is None  # the launcher itself is still there, stopped
    finally:
        launcher.kill()
        launcher.wait()
        for p in _job_processes(tmp_path):
            p.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_emulated_on_this_machine(tmp_path):
    """An emulation of two nodes on one machine: the chapter started twice (node_rank 0 and 1, nnodes 2,
    rendezvous at 127.0.0.1, gloo, one process per node), as one would start it on each of two hosts.
    Both runs finish, their N-process job has world size 2 across 2 nodes, and both record the same
    timings."""
    endpoint = f"127.0.0.1:{_free_port()}"
    code = textwrap.dedent("""
        import sys
        from datajourney.book import harness
        from datajourney.chapters.c11_gpu_to_gpu import experiment as ddp
        harness.run("11_gpu_to_gpu",
                    model="small_vit", batch_size=2, image_size=16, warmup_steps=2, steps=2, windows=2, profile_steps=0,
                cpu_procs=1, ladder=["ddp"], bucket_sweep=[], bench_sizes=[65536], bench_ops=["all_reduce"],
                bench_iters=2, bench_repeats=2, job_timeout_s=240, nnodes=2, node_rank=int(sys.argv[1]),
                rdzv_endpoint=sys.argv[2], run_dir=sys.argv[3], progress=False)
    """)
    nodes = [subprocess.Popen([sys.executable, "-c", code, str(r), endpoint, str(tmp_path / f"node{r}")],
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    outs = [n.communicate(timeout=300)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], outs
    from datajourney.core import results

    res = [results.Result.load(next((tmp_path / f"node{r}").rglob(f"{'11_gpu_to_gpu'}.json"))) for r in (0, 1)]
    rates = []
    for r, node in zip(res, (0, 1)):
        assert r.metadata["world"] == 2 and r.metadata["nnodes"] == 2 and r.metadata["node_rank"] == node
        jobs = {j["job"]: j for j in r.metadata["jobs"]}
        assert jobs["n"]["status"] == "ok" and jobs["n"]["nodes"] == 2 and jobs["n"]["nproc"] == 2
        assert jobs["one"]["status"] == "ok" and jobs["one"]["nproc"] == 1
        rungs = r.table("rungs").set_index(["job", "rung"])
        assert rungs.loc[("n", "ddp"), "world"] == 2 and rungs.loc[("n", "ddp"), "replica_spread"] == 0
        start = ddp.read_records(Path(r.path).parent / "ddp" / "n")[0]
        assert start["kind"] == "start" and start["world"] == 2 and start["nodes"] == 2
        rates.append(r.table("windows").query("job == 'n'")["steps_per_s"].tolist())
    assert rates[0] == rates[1] and len(rates[0]) == 2  # the slowest rank's time, recorded on both nodes


@pytest.mark.parametrize("name,value", [("nnodes", 0), ("node_rank", 2), ("node_rank", -1),
                                        ("rdzv_endpoint", "node0"), ("rdzv_endpoint", None),
                                        ("rdzv_endpoint", "node0:99999"), ("node_path", "nvlink")])
def test_bad_node_parameters_fail_before_any_work(name, value):
    p = {"nnodes": 2, "node_rank": 1, "rdzv_endpoint": "node0:29400", "node_path": "direct", name: value}
    with pytest.raises(ddp.ParameterError) as e:
        ddp._node_params(p)
    assert repr(name) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ddp.ParameterError, match="'rdzv_endpoint'"):
        ddp._node_params({"nnodes": 1, "rdzv_endpoint": "node0:29400"})


def test_jobs_across_nodes_use_torchrun_rendezvous():
    one = ddp.torchrun_command(2, Path("c.json"))
    assert "--standalone" in one and not any(a.startswith("--rdzv") for a in one)
    cmd = ddp.torchrun_command(4, Path("c.json"), ddp.Rendezvous(2, 1, "node0:29400", "run-x", 60))
    assert "--standalone" not in cmd and {"--nnodes=2", "--node-rank=1", "--rdzv-backend=c10d",
                                          "--rdzv-endpoint=node0:29400", "--rdzv-id=run-x",
                                          "--nproc-per-node=4"} <= set(cmd)
    base = {"bucket_cap_mb": 25, "ladder": ["ddp"], "bucket_sweep": [], "bench_ops": ["all_reduce"],
            "host_paths": ["p2p_off"], "host_ladder": ["ddp"], "scale_worlds": "auto", "scale_ladder": ["ddp"],
            "scale_host_paths": ["p2p_off"], "nnodes": 2, "node_path": "p2p_shm_off"}
    jobs = {j.name: j for j in ddp.plan_jobs(base, "nccl", 4)}
    assert jobs["one"].nodes == 1 and jobs["n"].nodes == 2 and jobs["p2p_off"].nodes == 2
    # the forced path of an emulated second node reaches every job across nodes, on top of its own
    assert jobs["n"].env == reading.HOST_PATHS["p2p_shm_off"]
    assert jobs["p2p_off"].env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    # the scaling curve stays on one node, up to its own 4 GPUs
    assert [(j.name, j.nodes) for j in jobs.values() if ddp.is_scale_job(j.name)] == [
        ("scale2", 1), ("scale4", 1), ("p2p_off@2", 1), ("p2p_off@4", 1)]
    assert all(ddp.job_env(j.env)["NCCL_NVLS_ENABLE"] == "0" for j in jobs.values())
    assert [j.name for j in ddp.plan_jobs({**base, "nnodes": 1}, "gloo", 1)] == ["one"]
    assert [(j.name, j.nodes) for j in ddp.plan_jobs(base, "gloo", 1)] == [("one", 1), ("n", 2)]
