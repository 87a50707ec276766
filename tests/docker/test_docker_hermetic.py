"""An episode is hermetic in every process layout: forks, fork-context vector envs, two threads, and
one run after another in a warm container. Each test is named after what it blocks."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from docker_helpers import (
    STATEFUL_ENV,
    VERIFIABLE_ENV,
    make_env,
    oracle_episode,
    owned_containers,
    report,
    run_python_action,
)

HOSTNAME = "import socket, time\nprint(socket.gethostname())\ntime.sleep({sleep})\n"


def _child(fn) -> tuple[int, dict]:
    """Fork; run ``fn()`` in the child and return (child pid, the dict it returned or its error)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(r)
        try:
            out = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    return pid, r


def _collect(pid: int, r: int) -> dict:
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks) or b'{"error": "the child died without a report"}')


def test_forked_child_never_steps_its_parents_stateful_episode(docker_client):
    """The child of a fork cannot drive the container of the parent's episode (it once authenticated
    the parent's customer there); it gets a container of its own at reset; the parent's episode ends
    as if the child never existed."""
    from sopgym.envs.policies import OraclePolicy

    env = make_env(STATEFUL_ENV)
    options = {"split": "test", "task_index": 0}
    policy = OraclePolicy()
    obs, info = env.reset(options=options)
    policy.reset(info)
    first = policy.act(obs, info)
    parent_container = env.unwrapped._toolbox.stateful.container_name

    def child():
        out = {}
        try:  # the whole inherited episode, as a careless caller would step it
            o, i, done = obs, info, False
            p = OraclePolicy()
            p.reset(i)
            while not done:
                o, _, terminated, truncated, i = env.step(p.act(o, i))
                done = terminated or truncated
            out["inherited_step"] = "ran"
        except Exception as exc:  # noqa: BLE001 - the misuse must be refused, by name
            out["inherited_step"] = type(exc).__name__
            out["message"] = str(exc)
        reward, _ = oracle_episode(env, options=options)
        out["own_reward"] = reward
        out["own_container"] = env.unwrapped._toolbox.stateful.container_name
        env.close()
        return out

    pid, r = _child(child)
    out = _collect(pid, r)
    assert out.get("inherited_step") == "SandboxMisuse", f"the child stepped the parent's episode: {out}"
    assert "forked child" in out["message"] and "reset()" in out["message"], out["message"]
    assert out["own_reward"] == 1.0 and out["own_container"] != parent_container, out
    obs, reward, terminated, truncated, info = env.step(first)
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
    env.close()
    assert reward == 1.0 and not info["infrastructure_failure"], (reward, info["episode"]["statuses"])
    report("fork_stateful", parent_reward=reward, child_reward=out["own_reward"])


def test_forked_child_runs_agent_code_in_its_own_container(docker_client):
    """Parent and child run code at the same time after a fork: each in a container of its own (they
    once shared the parent's warm container and broke its channel)."""
    env = make_env(VERIFIABLE_ENV)
    env.reset(options={"split": "test", "task_index": 0})
    _, _, _, _, info = env.step(run_python_action(HOSTNAME.format(sleep=0)))
    assert info["turn_status"] == "OK", info["messages"][-1]
    code = run_python_action(HOSTNAME.format(sleep=1.5))

    def child():
        env.reset(options={"split": "test", "task_index": 1})
        _, _, _, _, i = env.step(code)
        env.close()
        return {"status": i["turn_status"], "host": i["messages"][-1]["content"].strip()}

    pid, r = _child(child)
    _, _, _, _, info = env.step(code)
    out = _collect(pid, r)
    env.close()
    mine = {"status": info["turn_status"], "host": info["messages"][-1]["content"].strip()}
    assert mine["status"] == "OK" and out.get("status") == "OK", (mine, out)
    assert mine["host"] != out["host"], f"parent and child ran in the same container {mine['host']}"
    report("fork_verifiable", parent=mine["status"], child=out["status"])


def _vector_oracle(vec, seeds: list[int]) -> list[tuple[float, dict]]:
    """One oracle episode per sub-env, stepped in lockstep; returns (reward, episode record) each."""
    from sopgym.envs.policies import OraclePolicy

    n = len(seeds)
    obs, infos = vec.reset(seed=seeds, options={"split": "test"})

    def info_of(infos, i):  # one sub-env's info out of the vector's (nested dicts of arrays with "_key" masks)
        return {k: info_of(v, i) if isinstance(v, dict) else v[i]
                for k, v in infos.items() if not k.startswith("_") and infos.get(f"_{k}", [True] * n)[i]}

    policies = [OraclePolicy() for _ in range(n)]
    for i, p in enumerate(policies):
        p.reset(info_of(infos, i))
    results: list = [None] * n
    while any(r is None for r in results):
        actions = [p.act(obs[i], info_of(infos, i)) if results[i] is None else "done" for i, p in enumerate(policies)]
        obs, rewards, terminated, truncated, infos = vec.step(actions)
        for i in range(n):
            if results[i] is None and (terminated[i] or truncated[i]):
                results[i] = (float(rewards[i]), info_of(infos, i)["episode"])
    return results


@pytest.mark.parametrize("spec", [STATEFUL_ENV, VERIFIABLE_ENV], ids=["stateful", "verifiable"])
def test_fork_vector_env_workers_each_get_their_own_container(docker_client, spec):
    """AsyncVectorEnv(context="fork") after the parent warmed the pool: every worker starts containers
    of its own and the oracle scores 1 in each (workers once shared the parent's warm container and
    got ERROR_SANDBOX / broken pipes)."""
    from gymnasium.vector import AsyncVectorEnv

    warm = make_env(spec)
    assert oracle_episode(warm, options={"split": "test", "task_index": 2})[0] == 1.0
    warm.close()  # its container is now idle in this process's pool, as after an evaluation
    vec = AsyncVectorEnv([lambda: make_env(spec)] * 2, context="fork", shared_memory=False)
    try:
        results = _vector_oracle(vec, [21, 22])
        workers = [p.pid for p in vec.processes]
        owned = {pid: owned_containers(docker_client, [pid]) for pid in workers}
    finally:
        vec.close()
    assert [r for r, _ in results] == [1.0, 1.0], [(r, e["statuses"]) for r, e in results]
    assert not any(e["infrastructure_failure"] for _, e in results)
    assert all(owned[pid] for pid in workers), f"workers without a container of their own: {owned}"
    report("fork_vector_env", kind=spec[0], rewards=str([r for r, _ in results]))


def test_fork_vector_env_close_leaves_no_container(docker_client):
    """AsyncVectorEnv.close(): the workers' containers are gone within seconds (they once stayed
    Exited until the next sopgym process started)."""
    from gymnasium.vector import AsyncVectorEnv

    vec = AsyncVectorEnv([lambda: make_env(STATEFUL_ENV)] * 2, context="fork", shared_memory=False)
    vec.reset(seed=[1, 2], options={"split": "test"})
    workers = [p.pid for p in vec.processes]
    before = owned_containers(docker_client, workers)
    vec.close()
    assert len(before) == 2, f"expected one container per worker, found {before}"
    started = time.monotonic()
    while (left := owned_containers(docker_client, workers)) and time.monotonic() - started < 10:
        time.sleep(0.2)
    assert left == [], f"containers still present 10 s after AsyncVectorEnv.close(): {left}"
    report("vector_close_cleanup", seconds=time.monotonic() - started)


def test_env_stepped_from_two_threads_refuses_the_second(docker_client):
    """Two threads stepping one Docker-backed env at once: the second step is refused at once with an
    error that names the misuse; the first completes and the container survives (they once
    corrupted its channel: "container survived cleanup")."""
    from sopgym.envs.policies import OraclePolicy

    env = make_env(STATEFUL_ENV)
    policy = OraclePolicy()
    obs, info = env.reset(options={"split": "test", "task_index": 3})
    policy.reset(info)
    action = policy.act(obs, info)
    container = env.unwrapped._toolbox.stateful.container_name
    outcome: dict = {}

    def step(key):
        try:
            outcome[key] = env.step(action)[4]["turn_status"]
        except Exception as exc:  # noqa: BLE001 - recorded for the assertions
            outcome[key] = exc

    docker_client.api.pause(container)  # hold the first call in flight
    first = threading.Thread(target=step, args=("first",))
    first.start()
    time.sleep(0.5)
    second = threading.Thread(target=step, args=("second",))
    started = time.monotonic()
    second.start()
    second.join(timeout=3)
    refused_after = time.monotonic() - started
    docker_client.api.unpause(container)
    first.join(timeout=30)
    try:
        assert "second" in outcome, "the second thread's step neither returned nor raised within 3 s"
        err = outcome["second"]
        assert type(err).__name__ == "SandboxMisuse", f"expected SandboxMisuse, got {err!r}"
        assert "thread" in str(err) and "one thread at a time" in str(err), str(err)
        assert outcome.get("first") == "OK", outcome.get("first")
        assert env.unwrapped._toolbox.stateful.container_name == container, "the container was replaced"
        assert oracle_episode(env, options={"split": "test", "task_index": 3})[0] == 1.0
    finally:
        env.close()
    report("two_threads", refused_after_s=refused_after)


# -- one run after another in a warm runner container ------------------------------------------------
WRITE_EVERYWHERE = r"""
import ctypes, json, os, subprocess, sys
marker = sys.stdin.read().strip()
writable, written = [], []
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys") and not os.path.islink(os.path.join(root, d))]
    if not os.access(root, os.W_OK):
        continue
    writable.append(root)
    try:
        with open(os.path.join(root, marker), "w") as fh:
            fh.write(marker)
        written.append(root)
    except OSError:
        pass
sub = os.path.join("/tmp", marker + "-dir", "deeper")
os.makedirs(sub)
open(os.path.join(sub, "f"), "w").write(marker)
os.chmod(os.path.dirname(sub), 0o000)  # a directory its owner must open up before removing
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, 1 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
if shmid >= 0:
    addr = libc.shmat(shmid, None, 0)
    ctypes.memmove(addr, marker.encode(), len(marker))
    libc.shmdt(ctypes.c_void_p(addr))
semid = libc.semget(0, 1, 0o1600)
msqid = libc.msgget(0, 0o1600)
msg = ctypes.create_string_buffer(8 + 64)
ctypes.memmove(msg, (1).to_bytes(8, "little") + marker.encode()[:64], 8 + min(64, len(marker)))
sent = libc.msgsnd(msqid, msg, 64, 0) if msqid >= 0 else -1
fd = os.open("/dev/mqueue/" + marker, os.O_CREAT | os.O_RDWR, 0o600)
os.close(fd)
subprocess.Popen(["sleep", "600"], start_new_session=True)  # a daemon that outlives the run
if os.fork() == 0:  # a process whose main thread exits: a zombie leader with a live thread
    import threading, time
    threading.Thread(target=time.sleep, args=(600,)).start()
    time.sleep(0.2)
    libc.pthread_exit(None)
print(json.dumps({"writable": writable, "written": written, "shm": shmid, "sem": semid, "msg": msqid, "sent": sent}))
"""

LOOK_FOR_TRACES = r"""
import json, os, sys
marker = sys.stdin.read().strip()
found = []
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys") and not os.path.islink(os.path.join(root, d))]
    if os.access(root, os.W_OK):
        found += [os.path.join(root, e) for e in os.listdir(root)]
    for f in files + dirs:
        if marker in f:
            found.append(os.path.join(root, f))
for kind in ("shm", "sem", "msg"):
    found += [kind + ": " + line for line in open("/proc/sysvipc/" + kind).read().splitlines()[1:] if line.strip()]
me = os.getpid()
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me]:
    try:
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    except OSError:
        continue
    if status["State"].strip().startswith("Z") and status["Threads"].strip() == "1":
        continue  # a dead process its parent has not reaped yet
    if int(status["Uid"].split()[0]) == os.getuid():
        found.append("process " + pid + ": " + open(f"/proc/{pid}/cmdline").read().replace("\0", " "))
used = {}
for mount in ("/tmp", "/dev/shm"):
    st = os.statvfs(mount)
    used[mount] = (st.f_blocks - st.f_bfree) * st.f_frsize
print(json.dumps({"found": found, "used": used}))
"""


def test_every_writable_place_is_empty_for_the_next_run(make_pool):
    """Agent code writes everywhere it can (every writable directory, System V shared memory,
    semaphores and message queues, a POSIX message queue, a daemon process); the next run, even
    through a new runner (a new env), finds none of it (/dev/shm and /dev/mqueue once kept files
    across episodes and envs)."""
    from sopgym.sandboxes.docker import DockerCodeRunner

    pool = make_pool("runner")
    marker = f"sopgym-trace-{os.getpid()}-{time.monotonic_ns()}"
    first = DockerCodeRunner(pool=pool)
    wrote = first.run_python(WRITE_EVERYWHERE, stdin=marker, timeout_s=20)
    assert wrote.ok, wrote.stderr[-2000:]
    out = json.loads(wrote.stdout)
    # positive control (a queue is created in /dev/mqueue below; write() on it is not how queues are used)
    assert {"/tmp", "/dev/shm"} <= set(out["written"]) and "/dev/mqueue" in out["writable"], out
    assert min(out["shm"], out["sem"], out["msg"]) >= 0 and out["sent"] == 0, f"positive control: System V objects {out}"
    first.close()
    second = DockerCodeRunner(pool=pool)  # a new env drawing the same warm container
    looked = second.run_python(LOOK_FOR_TRACES, stdin=marker, timeout_s=20)
    second.close()
    assert looked.ok, looked.stderr[-2000:]
    seen = json.loads(looked.stdout)
    assert pool.num_created == 1, f"expected the same warm container for both runs, created {pool.num_created}"
    assert seen["found"] == [], f"the next run sees the previous run's traces: {seen['found'][:10]}"
    assert seen["used"] == {"/tmp": 0, "/dev/shm": 0}, f"tmpfs space still charged: {seen['used']}"
    from sopgym.sandboxes.docker.server import WRITABLE  # the list the server empties is complete

    assert set(out["writable"]) <= set(WRITABLE), f"writable places the server does not empty: {set(out['writable']) - set(WRITABLE)}"
    report("writable_emptied", places=len(out["written"]), writable=",".join(sorted(out["writable"])))


FILL = r"""
import os
for top in ("/tmp", "/dev/shm"):
    try:
        with open(os.path.join(top, "fill"), "wb") as fh:
            while True:
                fh.write(b"x" * (1 << 20))
                fh.flush()
    except OSError:
        pass
st = os.statvfs("/dev/shm")
print((st.f_blocks - st.f_bfree) * st.f_frsize)
"""

ALLOCATE_SHM = r"""
import os
st = os.statvfs("/dev/shm")
used = (st.f_blocks - st.f_bfree) * st.f_frsize
with open("/dev/shm/again", "wb") as fh:
    fh.write(b"y" * (60 << 20))
print(used)
"""


def test_filled_shared_memory_is_not_charged_to_the_next_run(make_pool):
    """64 MB of /dev/shm filled by one run is free again for the next (it once stayed charged)."""
    from sopgym.sandboxes.docker import DockerCodeRunner

    runner = DockerCodeRunner(pool=make_pool("runner"))
    try:
        filled = runner.run_python(FILL, timeout_s=20)
        assert filled.ok and int(filled.stdout) >= 60 << 20, f"positive control: /dev/shm filled to {filled.stdout!r}"
        again = runner.run_python(ALLOCATE_SHM, timeout_s=20)
    finally:
        runner.close()
    assert again.ok, f"the next run could not use /dev/shm: {again.stderr[-500:]}"
    assert int(again.stdout) == 0, f"/dev/shm still held {int(again.stdout) >> 20} MiB of the previous run"
    report("shm_charge", filled_mib=int(filled.stdout) >> 20, next_run_used_mib=int(again.stdout) >> 20)


# -- agent code against the server's process ---------------------------------------------------------
ATTACK_OTHERS = r"""
import ctypes, json, os, sys
attack = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read().strip()
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
results = {}
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me):
    try:
        if attack == "proc_mem_read":
            with open(f"/proc/{pid}/mem", "rb") as fh:
                start = int(open(f"/proc/{pid}/maps").readline().split("-")[0], 16)
                fh.seek(start)
                fh.read(16)
        elif attack == "proc_mem_write":
            os.close(os.open(f"/proc/{pid}/mem", os.O_RDWR))
        elif attack == "ptrace_attach":
            if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            os.waitpid(pid, 0x40000000)  # __WALL
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
        elif attack == "process_vm_readv":
            class iovec(ctypes.Structure):
                _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
            buf = ctypes.create_string_buffer(16)
            local, remote = iovec(ctypes.addressof(buf), 16), iovec(0x10000, 16)
            if libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) < 0:
                err = ctypes.get_errno()
                if err in (1, 13):  # EPERM, EACCES: refused; EFAULT would mean allowed but unmapped
                    raise OSError(err, os.strerror(err))
        elif attack == "proc_fd_write":
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    os.close(os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY))
                except OSError as exc:
                    if exc.errno in (1, 13):
                        raise
        elif attack == "proc_environ":
            open(f"/proc/{pid}/environ", "rb").read()
        elif attack == "signal":
            os.kill(pid, 0)
        results[pid] = "allowed"
    except OSError as exc:
        results[pid] = exc.errno
print(json.dumps(results))
"""


@pytest.mark.parametrize(
    "attack", ["proc_mem_read", "proc_mem_write", "ptrace_attach", "process_vm_readv", "proc_fd_write", "proc_environ", "signal"]
)
def test_agent_code_cannot_reach_the_server_or_any_process_but_its_own(make_pool, attack):
    """Agent code tries one attack on every process of the container that is not itself (init, the
    supervisor, the tool server): each is refused (they once shared a uid: /proc/<pid>/mem opened for
    writing, ptrace attach returned 0)."""
    from sopgym.sandboxes.docker import DockerCodeRunner

    runner = DockerCodeRunner(pool=make_pool("runner"))
    try:
        result = runner.run_python(ATTACK_OTHERS, stdin=attack, timeout_s=10)
    finally:
        runner.close()
    assert result.ok, result.stderr[-1000:]
    outcome = json.loads(result.stdout)
    assert len(outcome) >= 2, f"positive control: expected init and the server among the targets, got {outcome}"
    allowed = {pid: r for pid, r in outcome.items() if r == "allowed"}
    assert allowed == {}, f"{attack} succeeded on pids {sorted(allowed)} (all outcomes: {outcome})"
    report("agent_vs_server", attack=attack, targets=len(outcome), errnos=",".join(sorted({str(v) for v in outcome.values()})))


SCAN_MEMORY = r"""
import json, os, re, sys
needle = sys.stdin.read().strip().encode()

def scan(pid):
    hits = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            addr, perms = line.split()[:2]
            if "r" not in perms:
                continue
            lo, hi = (int(x, 16) for x in addr.split("-"))
            try:
                mem.seek(lo)
                hits += mem.read(hi - lo).count(needle)
            except (OSError, OverflowError, ValueError):
                pass
    return hits

own = scan("self")
others, refused = {}, {}
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        others[pid] = scan(pid)
    except OSError as exc:
        refused[pid] = exc.errno
files = []
for top in ("/tmp", "/dev/shm", "/dev/mqueue"):
    for root, _, names in os.walk(top):
        for n in names:
            try:
                if needle in open(os.path.join(root, n), "rb").read():
                    files.append(os.path.join(root, n))
            except OSError:
                pass
print(json.dumps({"own": own, "others": others, "refused": refused, "files": files}))
"""


def test_no_earlier_episode_data_is_reachable_from_agent_code(make_pool):
    """An earlier episode's task data (here a ``run_sql`` state, which passes through the server) is
    nowhere agent code can read: not in any process's memory it can open, not in any file (it was
    once found in the tool server's memory)."""
    import ledger_program as lp

    from sopgym.sandboxes.base import StatefulProgram
    from sopgym.sandboxes.docker import DockerCodeRunner

    secret = f"EARLIER-EPISODE-{os.getpid()}-{time.monotonic_ns()}"
    state = lp.initial_state()
    state["accounts"][0]["owner"] = secret
    state["tokens"] = [{"account": "A0", "token": f"{secret}-{i}"} for i in range(200)]
    runner = DockerCodeRunner(pool=make_pool("runner"))
    try:
        rows = runner.run_sql("SELECT count(*) FROM tokens", program=StatefulProgram("ledger_program"), initial_state=state)
        assert rows.ok and rows.stdout == "[[200]]", rows
        scan = runner.run_python(SCAN_MEMORY, stdin=secret, timeout_s=60)
    finally:
        runner.close()
    assert scan.ok, scan.stderr[-1000:]
    out = json.loads(scan.stdout)
    assert out["own"] >= 1, f"positive control: the scanner should find the needle in its own memory: {out}"
    found = {pid: n for pid, n in out["others"].items() if n}
    assert found == {} and out["files"] == [], f"earlier episode data readable: memory of {found}, files {out['files']}"
    report("earlier_episode_memory", processes_scanned=len(out["others"]), processes_refused=len(out["refused"]))
