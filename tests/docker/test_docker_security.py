"""Security properties of the Docker sandboxes. Each test blocks one attack and reports a figure."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import ledger_program as lp
import pytest
from docker_helpers import report, session_containers

from sopgym.sandboxes.base import SandboxEpisode, StatefulProgram, Tier, ToolSpec

LEDGER = StatefulProgram("ledger_program")


@pytest.fixture
def runner(make_pool):
    from sopgym.sandboxes.docker import DockerCodeRunner

    r = DockerCodeRunner(pool=make_pool("runner"))
    yield r
    r.close()


def _host_process_count() -> int:
    return sum(1 for entry in os.listdir("/proc") if entry.isdigit())


def _container_pids(runner) -> int | None:
    """pids.current of the runner's (single) container cgroup, read on the host (cgroup v1 or v2)."""
    boxes = list(runner.pool._all.values())
    if len(boxes) != 1:
        return None
    cid = boxes[0].id
    for path in (f"/sys/fs/cgroup/pids/docker/{cid}/pids.current", f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/pids.current"):
        try:
            return int(Path(path).read_text())
        except OSError:
            continue
    return None


def test_fork_bomb_is_contained_by_the_pids_limit(runner):
    runner.run_python("pass")  # start the container before taking the baseline
    baseline = _host_process_count()
    peak = {"pids": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak["pids"] = max(peak["pids"], _container_pids(runner) or 0)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = runner.run_python(
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", timeout_s=3
        )
    finally:
        stop.set()
        sampler.join()
    after = _container_pids(runner)
    assert result.timed_out, result
    limit = runner.pool.hardening.pids_limit
    assert peak["pids"] <= limit, f"container pids peaked at {peak['pids']}, expected <= pids_limit {limit}"
    assert after is not None and after <= 3, f"expected only init+server left in the container, got {after} pids"
    host_after = _host_process_count()
    # other engineers' processes come and go on this host: allow a small slack, not a bomb's worth
    assert host_after <= baseline + 20, f"host processes: baseline {baseline}, after {host_after}"
    assert runner.run_python("print('alive')").stdout == "alive\n"
    report("fork_bomb", container_peak_pids=peak["pids"], pids_limit=limit, host_before=baseline, host_after=host_after,
           container_after=after)


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("MemAvailable missing from /proc/meminfo")


def test_memory_bomb_is_oom_killed_inside_the_container(make_pool):
    from sopgym.sandboxes.docker import DockerCodeRunner
    from sopgym.sandboxes.docker.hardening import ContainerHardening

    runner = DockerCodeRunner(pool=make_pool("runner", ContainerHardening(mem_limit="256m")))
    before = _mem_available()
    started = time.perf_counter()
    result = runner.run_python("chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n", timeout_s=20)
    elapsed = time.perf_counter() - started
    assert not result.timed_out and result.exit_code == -9, f"expected the child SIGKILLed by the OOM killer, got {result}"
    assert runner.run_python("print('alive')").stdout == "alive\n", "the server should survive its child's OOM"
    after = _mem_available()
    assert after > before - (512 << 20), f"host MemAvailable fell from {before >> 20} MiB to {after >> 20} MiB"
    report("memory_bomb", exit_code=result.exit_code, seconds=elapsed, host_mem_available_delta_mib=(after - before) >> 20)


def test_sigterm_trapping_spin_is_killed_at_the_deadline(runner):
    code = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    runner.run_python("pass")  # warm container: measure the deadline, not the start
    timeout_s = 1.0
    started = time.perf_counter()
    result = runner.run_python(code, timeout_s=timeout_s)
    overrun = time.perf_counter() - started - timeout_s
    assert result.timed_out and result.exit_code is None, result
    assert 0 <= overrun < 1.0, f"overrun {overrun:.3f} s, expected under 1 s"
    report("deadline_kill", overrun_s=overrun)


def test_tmpfs_fill_stops_at_its_size_and_usr_is_read_only(runner):
    code = """
import errno, json, os
written, err = 0, None
try:
    with open('/tmp/fill', 'wb') as fh:
        while True:
            fh.write(b'x' * (1 << 20)); fh.flush(); written += 1 << 20
except OSError as exc:
    err = exc.errno
usr = None
try:
    open('/usr/sopgym-probe', 'w')
except OSError as exc:
    usr = exc.errno
root_ro = any(l.split()[1] == '/' and 'ro' in l.split()[3].split(',') for l in open('/proc/mounts'))
print(json.dumps({"written": written, "err": err, "usr": usr, "root_ro": root_ro, "ENOSPC": errno.ENOSPC,
                  "EROFS": errno.EROFS, "EACCES": errno.EACCES}))
"""
    out = json.loads(runner.run_python(code, timeout_s=20).stdout)
    cap = 64 << 20
    assert out["err"] == out["ENOSPC"] and out["written"] <= cap, f"expected ENOSPC at <= {cap} bytes, got {out}"
    assert out["usr"] in (out["EROFS"], out["EACCES"]) and out["root_ro"], f"expected /usr unwritable on a ro root, got {out}"
    leftover = runner.run_python("import os; print(os.listdir('/tmp'))").stdout.strip()
    assert leftover == "[]", f"scratch should be emptied after each run, found {leftover}"
    report("tmpfs_fill", written_mib=out["written"] >> 20, tmpfs_cap_mib=cap >> 20, usr_errno=out["usr"])


def test_network_egress_fails_fast(runner):
    code = r"""
import json, os, socket, subprocess, sys, time, urllib.request
res = {}
def probe(name, fn):
    t = time.monotonic()
    try:
        fn(); res[name] = ["succeeded", time.monotonic() - t]
    except BaseException as exc:
        res[name] = [type(exc).__name__ + ": " + str(exc)[:80], time.monotonic() - t]
probe("connect_ip", lambda: socket.create_connection(("192.0.2.1", 80), timeout=5))
probe("dns", lambda: socket.getaddrinfo("deb.debian.org", 443))
probe("raw_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
probe("http", lambda: urllib.request.urlopen("http://192.0.2.1/", timeout=5))
def pip():
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--index-url", "http://192.0.2.1/simple", "six"],
                       capture_output=True, text=True, timeout=10)
    if p.returncode == 0:
        return
    raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-60:]}")
probe("pip_install", pip)
res["interfaces"] = sorted(os.listdir("/sys/class/net"))
print(json.dumps(res))
"""
    out = json.loads(runner.run_python(code, timeout_s=30).stdout)
    assert out.pop("interfaces") == ["lo"], "expected only the loopback interface"
    for name, (what, seconds) in out.items():
        assert what != "succeeded", f"{name} reached the network"
        assert seconds < 1.0, f"{name} took {seconds:.2f} s to fail, expected under 1 s ({what})"
    report("network_egress", **{f"{k}_ms": v[1] * 1e3 for k, v in out.items()})


def test_privilege_probes_fail(make_pool, monkeypatch):
    from sopgym.sandboxes.docker import DockerCodeRunner

    secret = f"host-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("SOPGYM_HOST_SECRET", secret)  # set before the container exists
    runner = DockerCodeRunner(pool=make_pool("runner"))
    code = r"""
import ctypes, json, os, subprocess
res = {"uid": os.getuid(), "euid": os.geteuid()}
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
res["CapEff"] = status["CapEff"].strip(); res["CapBnd"] = status["CapBnd"].strip()
res["NoNewPrivs"] = status["NoNewPrivs"].strip()
try:
    os.setuid(0); res["setuid"] = "succeeded"
except OSError as exc:
    res["setuid"] = exc.errno
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
res["mount"] = "succeeded" if rc == 0 else ctypes.get_errno()
p = subprocess.run(["/bin/su", "root", "-c", "id -u"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
res["su"] = p.stdout.strip() if p.returncode == 0 else p.returncode
res["docker_sock"] = [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.exists(p)]
envs = []
for pid in [d for d in os.listdir("/proc") if d.isdigit()]:
    try:
        envs.append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
    except OSError:
        pass
res["environ"] = "\n".join(envs + ["\n".join(f"{k}={v}" for k, v in os.environ.items())])
print(json.dumps(res))
"""
    try:
        out = json.loads(runner.run_python(code, timeout_s=10).stdout)
    finally:
        runner.close()
    assert out["uid"] != 0 and out["euid"] != 0, out
    assert int(out["CapEff"], 16) == 0 and int(out["CapBnd"], 16) == 0, (out["CapEff"], out["CapBnd"])
    assert out["NoNewPrivs"] == "1", out["NoNewPrivs"]
    assert out["setuid"] != "succeeded" and out["mount"] != "succeeded", (out["setuid"], out["mount"])
    assert out["su"] != "0", f"su became root: {out['su']}"
    assert out["docker_sock"] == [], out["docker_sock"]
    assert secret not in out["environ"] and "SOPGYM_HOST_SECRET" not in out["environ"], "host environment leaked"
    report("privilege_probes", uid=out["uid"], cap_eff=out["CapEff"], setuid_errno=out["setuid"],
           mount_errno=out["mount"], su=out["su"])


def test_docker_inspect_audit_of_every_container(docker_client, make_pool):
    """Every container this test session has running shows every hardening field."""
    from sopgym.sandboxes.docker import DockerCodeRunner, DockerStatefulBackend
    from sopgym.sandboxes.docker.hardening import SUPERVISOR_CAPS

    backend = DockerStatefulBackend(pool=make_pool())
    runner = DockerCodeRunner(pool=make_pool("runner"))
    try:
        backend.start_episode(LEDGER, lp.initial_state())
        runner.run_python("pass")
        audited = 0
        for c in session_containers(docker_client):
            info = docker_client.api.inspect_container(c["Id"])
            hc, cfg = info["HostConfig"], info["Config"]
            name = info["Name"]
            assert hc["NetworkMode"] == "none" and set(info["NetworkSettings"]["Networks"]) <= {"none"}, name
            assert hc["ReadonlyRootfs"] is True, name
            assert hc["CapDrop"] == ["ALL"], (name, hc["CapDrop"])
            if cfg["Labels"]["org.sopgym.role"] == "runner":  # a root supervisor that only switches uids
                assert cfg["User"] == "0:0" and sorted(hc["CapAdd"]) == sorted(SUPERVISOR_CAPS), (name, hc["CapAdd"])
                env = dict(e.split("=", 1) for e in cfg["Env"])
                server, agent = env["SOPGYM_SERVER_USER"], env["SOPGYM_AGENT_USER"]
                assert not server.startswith("0:") and not agent.startswith("0:") and server != agent, (server, agent)
            else:
                assert not hc["CapAdd"], (name, hc["CapAdd"])
                assert cfg["User"] and not cfg["User"].startswith(("0", "root")), (name, cfg["User"])
            assert "no-new-privileges:true" in hc["SecurityOpt"], (name, hc["SecurityOpt"])
            assert hc["Privileged"] is False and hc["AutoRemove"] is True, name
            assert 0 < hc["PidsLimit"] <= 4096 and hc["Memory"] > 0 and hc["MemorySwap"] == hc["Memory"], name
            assert hc["NanoCpus"] > 0 and hc["Init"] is True, name
            assert "size=" in hc["Tmpfs"]["/tmp"], (name, hc["Tmpfs"])
            assert not info["Mounts"] and not hc["Binds"], (name, info["Mounts"])
            labels = cfg["Labels"]
            assert labels["org.sopgym.owner.pid"] and float(labels["org.sopgym.expires"]) > time.time(), (name, labels)
            audited += 1
        assert audited >= 2, f"expected at least the 2 containers just started, audited {audited}"
        report("inspect_audit", containers_audited=audited)
    finally:
        backend.close()
        runner.close()


class _Recorder:
    """Socket proxy that records every byte sent into the container."""

    def __init__(self, sock, sink: bytearray) -> None:
        self._sock, self._sink = sock, sink

    def sendall(self, data):
        self._sink.extend(data)
        return self._sock.sendall(data)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def test_hidden_answer_never_reaches_the_sandbox(docker_client, make_pool):
    """The env holds the answer; everything that enters the container is the program and the state."""
    from sopgym.sandboxes.docker import DockerCodeRunner, DockerStatefulBackend
    from sopgym.sandboxes.toolbox import ToolBox

    answer = f"ANSWER-{uuid.uuid4().hex}"
    state_token = f"STATE-{uuid.uuid4().hex}"
    task = {"answer": {"token": answer}, "initial_state": lp.initial_state()}  # what an env holds
    task["initial_state"]["accounts"][0]["owner"] = state_token
    specs = [
        ToolSpec("get_account", "read", {"type": "object", "properties": {"account": {"type": "string"}}}, tier=Tier.STATEFUL),
        ToolSpec("list_tokens", "read", {"type": "object", "properties": {}}, tier=Tier.STATEFUL),
    ]
    sent = bytearray()
    pools = [make_pool(), make_pool("runner")]
    for pool in pools:  # record from the very first byte each container receives
        def acquire(original=pool.acquire):
            container = original()
            if not isinstance(container.channel._sock, _Recorder):
                container.channel._sock = _Recorder(container.channel._sock, sent)
            return container
        pool.acquire = acquire
    backend = DockerStatefulBackend(pool=pools[0])
    runner = DockerCodeRunner(pool=pools[1])
    box = ToolBox(specs, stateful=backend)
    try:
        box.start_episode(SandboxEpisode(key="t/1", program=LEDGER, initial_state=task["initial_state"]))
        assert box.call("get_account", {"account": "A0"}).content["owner"] == state_token
        box.call("list_tokens", {})
        box.snapshot()
        box.start_episode(SandboxEpisode(key="t/1", program=LEDGER, initial_state=task["initial_state"]))
        runner.run_sql("SELECT owner FROM accounts", program=LEDGER, initial_state=task["initial_state"])
        scan = r"""
import os, sys
needle = sys.stdin.read().strip().encode()
hits, scanned = [], 0
for top in ("/etc", "/opt", "/tmp", "/root", "/home", "/var", "/run"):
    for d, _, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            try:
                with open(p, "rb") as fh:
                    scanned += 1
                    if needle in fh.read(1 << 20):
                        hits.append(p)
            except OSError:
                pass
for pid in [x for x in os.listdir("/proc") if x.isdigit()]:
    for part in ("environ", "cmdline"):
        try:
            if needle in open(f"/proc/{pid}/{part}", "rb").read():
                hits.append(f"/proc/{pid}/{part}")
        except OSError:
            pass
print(scanned, hits)
"""
        episode_bytes = bytes(sent)  # the scan below is our probe: it is handed the needle itself
        inside = runner.run_python(scan, stdin=answer + "\n", timeout_s=20)
        configs = [json.dumps(docker_client.api.inspect_container(c["Id"])["Config"]) for c in session_containers(docker_client)]
    finally:
        box.close()
        runner.close()
    sent = episode_bytes
    assert b"def transfer" in sent and state_token.encode() in sent, "positive control: the initial state should have been sent (recording broken?)"
    assert answer.encode() not in sent, "the task answer was sent into the stateful container"
    assert not any(answer in cfg for cfg in configs), "the task answer appears in a container's configuration"
    scanned, hits = inside.stdout.split(" ", 1)
    assert hits.strip() == "[]", f"answer readable inside the sandbox at {hits}"
    report("hidden_answer", bytes_sent_to_container=len(sent), files_scanned_inside=int(scanned))


def test_policy_refuses_agent_code_under_the_servers_uid():
    """Agent code sharing the tool server's uid could signal, trace and read it: not a loosening a
    policy can ask for. Root for either is a logged loosening."""
    from sopgym.sandboxes.docker.hardening import ContainerHardening

    with pytest.raises(ValueError, match="agent_user must have another uid"):
        ContainerHardening(user="1000:1000", agent_user="1000:1001")
    with pytest.raises(ValueError, match="numeric 'uid:gid'"):
        ContainerHardening(agent_user="nobody")
    assert any("agent code as root" in w for w in ContainerHardening(agent_user="0:0").loosenings())
    assert ContainerHardening().loosenings() == []
