"""Agent code cannot turn its own failure into an infrastructure failure; genuine infrastructure
failures still are. Each attack runs through a Docker-backed env's ``run_python`` (or ``run_sql``)
tool: the turn is scored as the policy's (OK, ERROR_TOOL or ERROR_TIMEOUT, never ERROR_SANDBOX, and
``infrastructure_failure`` stays False, so neither the trainer nor the evaluator can drop the
episode), and the sandbox keeps serving the same episode."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from docker_helpers import VERIFIABLE_ENV, make_env, report, run_python_action, session_containers

POLICY_STATUSES = {"OK", "ERROR_TOOL", "ERROR_TIMEOUT"}

ATTACKS = {
    "sigkill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "sigstop_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n",
    "sigkill_every_other_process": (
        "import os, signal\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit() and int(p) != os.getpid():\n"
        "        try:\n"
        "            os.kill(int(p), signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
    ),
    "sigstop_every_other_process": (
        "import os, signal\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit() and int(p) != os.getpid():\n"
        "        try:\n"
        "            os.kill(int(p), signal.SIGSTOP)\n"
        "        except OSError:\n"
        "            pass\n"
    ),
    "sigkill_pid_1": "import os, signal\nos.kill(1, signal.SIGKILL)\n",
    "sigterm_pid_1": "import os, signal\nos.kill(1, signal.SIGTERM)\n",
    "kill_minus_one": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory_bomb": "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
    # Many mid-sized processes that lower their OOM priority as far as the host lets them (agent code
    # starts at oom_score_adj 1000): the OOM killer may then pick the sandbox's own processes.
    "memory_bomb_spread": (
        "import os\n"
        "def exempt():\n"
        "    for adj in (b'-1000', b'-500', b'0'):\n"
        "        try:\n"
        "            fd = os.open('/proc/self/oom_score_adj', os.O_WRONLY)\n"
        "            os.write(fd, adj)\n"
        "            os.close(fd)\n"
        "            return\n"
        "        except OSError:\n"
        "            pass\n"
        "exempt()\n"
        "for _ in range(60):\n"
        "    if os.fork() == 0:\n"
        "        exempt()\n"
        "        block = bytearray(12 << 20)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        import time\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "import time\n"
        "time.sleep(60)\n"
    ),
    # Kernel memory (pipe buffers) held by processes with almost no RSS: the OOM killer's choice
    # (largest RSS) falls on the sandbox's own processes.
    "kernel_memory_in_pipes": (
        "import fcntl, os\n"
        "for adj in (b'-1000', b'-500', b'0'):\n"
        "    try:\n"
        "        fd = os.open('/proc/self/oom_score_adj', os.O_WRONLY)\n"
        "        os.write(fd, adj)\n"
        "        os.close(fd)\n"
        "        break\n"
        "    except OSError:\n"
        "        pass\n"
        "for _ in range(40):\n"
        "    if os.fork() == 0:\n"
        "        break\n"
        "held = []\n"
        "while True:\n"
        "    try:\n"
        "        r, w = os.pipe()\n"
        "    except OSError:\n"
        "        break\n"
        "    try:\n"
        "        fcntl.fcntl(w, 1031, 1 << 20)\n"  # F_SETPIPE_SZ
        "    except OSError:\n"
        "        pass\n"
        "    os.set_blocking(w, False)\n"
        "    try:\n"
        "        while True:\n"
        "            os.write(w, b'x' * 65536)\n"
        "    except OSError:\n"
        "        pass\n"
        "    held.append((r, w))\n"
        "import time\n"
        "time.sleep(60)\n"
    ),
    "write_garbage_into_every_fd_and_close_own": (
        "import os\n"
        "junk = b'{\"id\": 1, \"ok\": true}\\n' * 100\n"
        "for p in os.listdir('/proc'):\n"
        "    if not p.isdigit() or int(p) == os.getpid():\n"
        "        continue\n"
        "    for fd in ('0', '1', '2'):\n"
        "        try:\n"
        "            f = os.open(f'/proc/{p}/fd/{fd}', os.O_WRONLY)\n"
        "            os.write(f, junk)\n"
        "            os.close(f)\n"
        "        except OSError:\n"
        "            pass\n"
        "os.write(1, junk)\n"
        "for fd in (0, 1, 2):\n"
        "    os.close(fd)\n"
    ),
    "sigstop_self": "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n",
    "nul_byte_in_code": "print('a')\x00\n",
    "lone_surrogate_in_code": "print('\ud800')\n",
}


@pytest.fixture
def env(docker_client):
    e = make_env(VERIFIABLE_ENV)
    e.reset(options={"split": "test", "task_index": 0})
    yield e
    e.close()


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_agent_code_attack_is_scored_as_the_policys_and_the_episode_goes_on(env, attack):
    started = time.perf_counter()
    _, _, terminated, truncated, info = env.step(run_python_action(ATTACKS[attack]))
    elapsed = time.perf_counter() - started
    result = info["messages"][-1]["content"][-300:]
    status = info["turn_status"]
    assert status in POLICY_STATUSES, f"{attack}: turn status {status} ({result})"
    assert not info["infrastructure_failure"] and not (terminated or truncated), f"{attack}: {info['status']} ({result})"
    _, _, _, _, info = env.step(run_python_action("print('alive')"))
    assert info["turn_status"] == "OK" and info["messages"][-1]["content"].strip() == "alive", info["messages"][-1]
    report("agent_attack", attack=attack, status=status, seconds=elapsed, result=repr(result.splitlines()[-1][:90] if result else ""))


# Memory the OOM killer cannot see: tmpfs files and detached System V shared memory belong to no
# process, and the agent keeps its own RSS below the sandbox processes' (it can lower the
# oom_score_adj of 1000 it starts with down to theirs). The kernel then kills the supervisor or the
# server, and the container dies mid-run: only the daemon's OOM event says whose doing that was.
MEMORY_NO_PROCESS_HOLDS = r"""
import ctypes, os
fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
os.write(fd, b"0")
os.close(fd)
for top in ("/tmp", "/dev/shm"):
    try:
        with open(os.path.join(top, "fill"), "wb") as fh:
            while True:
                fh.write(b"x" * (1 << 20))
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
while True:
    shmid = libc.shmget(0, 1 << 20, 0o1600)
    if shmid < 0:
        break
    addr = libc.shmat(shmid, None, 0)
    ctypes.memset(addr, 1, 1 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
print("memory never ran out")
"""


def test_out_of_memory_that_kills_the_sandbox_mid_run_is_the_runs(env):
    """The container dies during the run because the run exhausted its memory: the turn is the
    policy's (exit -9 with a MemoryError), not ERROR_SANDBOX, and the next call gets a new sandbox."""
    _, _, terminated, truncated, info = env.step(run_python_action(MEMORY_NO_PROCESS_HOLDS))
    text = info["messages"][-1]["content"]
    assert info["turn_status"] == "ERROR_TOOL" and not info["infrastructure_failure"], (info["turn_status"], text[-300:])
    assert "exit code -9" in text and "exhausted the sandbox's memory" in text, text[-300:]
    _, _, _, _, info = env.step(run_python_action("print('alive')"))
    assert info["turn_status"] == "OK" and info["messages"][-1]["content"].strip() == "alive", info["messages"][-1]


def test_code_beyond_the_argument_limit_runs(make_pool):
    """Agent code larger than the kernel's single-argument limit (128 KiB) is run, not an
    infrastructure failure (it once went into argv: E2BIG). Domains cap code lower; other callers
    of the runner (SOP-Bench tools) do not."""
    from sopgym.sandboxes.docker import DockerCodeRunner

    runner = DockerCodeRunner(pool=make_pool("runner"))
    try:
        result = runner.run_python("# " + "x" * 300_000 + "\nprint('big')\n")
    finally:
        runner.close()
    assert result.ok and result.stdout == "big\n", result


def test_sql_memory_exhaustion_is_scored_as_the_policys(docker_client):
    env = make_env(("sopgym/AdTrafficSpoofing-v0", {"sandbox": "docker", "code_runner": "docker"}))
    from sopgym.envs.policies import format_call

    try:
        env.reset(options={"split": "test", "task_index": 0})
        query = ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                 "SELECT length(group_concat(hex(zeroblob(100000)))) FROM r")
        _, _, _, _, info = env.step(format_call("run_sql", {"query": query}))
        assert info["turn_status"] in POLICY_STATUSES and not info["infrastructure_failure"], info["messages"][-1]
        _, _, _, _, info = env.step(format_call("run_sql", {"query": "SELECT 1"}))
        assert info["turn_status"] == "OK", info["messages"][-1]
    finally:
        env.close()


# -- genuine infrastructure failures stay infrastructure failures ------------------------------------
def test_runner_container_killed_from_the_host_is_a_sandbox_error(docker_client, env):
    """Regression guard for the attribution above: a host-side kill during a run is ERROR_SANDBOX."""
    from sopgym.sandboxes.docker import hardening

    def kill_runners():
        time.sleep(1.0)
        for c in session_containers(docker_client, **{hardening.ROLE: "runner", hardening.OWNER_PID: str(os.getpid())}):
            docker_client.api.kill(c["Id"])

    killer = threading.Thread(target=kill_runners)
    killer.start()
    _, _, terminated, truncated, info = env.step(run_python_action("import time\ntime.sleep(5)\nprint('done')\n"))
    killer.join()
    assert info["turn_status"] == "ERROR_SANDBOX" and info["infrastructure_failure"], info["messages"][-1]
    assert truncated and info["truncation_cause"] == "sandbox"


def test_runner_container_killed_from_the_host_during_a_memory_heavy_run_is_a_sandbox_error(docker_client, env):
    """A host-side kill is never put down to the run, even when the run used much memory."""
    from sopgym.sandboxes.docker import hardening

    def kill_runners():
        time.sleep(1.5)
        for c in session_containers(docker_client, **{hardening.ROLE: "runner", hardening.OWNER_PID: str(os.getpid())}):
            docker_client.api.kill(c["Id"])

    killer = threading.Thread(target=kill_runners)
    killer.start()
    code = "import time\nblock = bytearray(300 << 20)\ntime.sleep(5)\n"
    _, _, _, _, info = env.step(run_python_action(code))
    killer.join()
    assert info["turn_status"] == "ERROR_SANDBOX" and info["infrastructure_failure"], info["messages"][-1]


def test_unreachable_daemon_is_a_sandbox_error(docker_client, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix:///tmp/no-docker-{uuid.uuid4().hex}.sock")
    env = make_env(VERIFIABLE_ENV)
    try:
        env.reset(options={"split": "test", "task_index": 0})
        _, _, _, truncated, info = env.step(run_python_action("print(1)"))
    finally:
        env.close()
    assert info["turn_status"] == "ERROR_SANDBOX" and info["infrastructure_failure"] and truncated, info["messages"][-1]


# -- a server that stops answering: the run's when the run filled the container, else the infrastructure's
# The channel gives up before the server's own deadline (grace_s < 0), as it does when a loaded kernel
# stalls every process of a container reclaiming memory the run holds (seen in CI with
# kernel_memory_in_pipes: no answer within timeout + grace, and no OOM event ever came).
FILL_MEMORY_THEN_SLEEP = (
    "import sys, time\n"
    "block = bytearray(465 << 20)\n"
    "for i in range(0, len(block), 4096):\n"
    "    block[i] = 1\n"
    "print('filled', file=sys.stderr, flush=True)\n"
    "time.sleep(30)\n"
)


@pytest.fixture
def impatient_runner(make_pool):
    """A code runner whose channel waits 4 s for a 10 s run: the server 'stops answering' mid-run."""
    from sopgym.sandboxes.docker import DockerCodeRunner

    runner = DockerCodeRunner(pool=make_pool("runner"), grace_s=-6.0)
    yield runner
    runner.close()


def test_server_silent_while_the_run_fills_memory_is_the_runs(impatient_runner):
    result = impatient_runner.run_python(FILL_MEMORY_THEN_SLEEP, timeout_s=10.0)
    assert result.timed_out and result.exit_code is None, result
    assert "overwhelmed the sandbox" in result.stderr and "memory at" in result.stderr, result.stderr
    assert impatient_runner.run_python("print('alive')", timeout_s=10.0).stdout == "alive\n"


def test_server_silent_while_the_run_is_small_is_a_sandbox_error(impatient_runner):
    from sopgym.sandboxes.docker.errors import ChannelTimeout

    with pytest.raises(ChannelTimeout, match=r"no answer to 'run_python'.*the container then held memory \d+ MiB of 512 MiB"):
        impatient_runner.run_python("import time\ntime.sleep(30)\n", timeout_s=10.0)


def test_paused_container_during_a_memory_heavy_run_is_a_sandbox_error(docker_client, impatient_runner):
    """The host paused the container (nothing the run did): never put down to the run, even with the
    container's memory at its limit."""
    from sopgym.sandboxes.docker import hardening
    from sopgym.sandboxes.docker.errors import ChannelTimeout

    def pause_runners():
        time.sleep(2.5)
        for c in session_containers(docker_client, **{hardening.ROLE: "runner", hardening.OWNER_PID: str(os.getpid())}):
            if c["State"] == "running":
                docker_client.api.pause(c["Id"])

    pauser = threading.Thread(target=pause_runners)
    pauser.start()
    try:
        with pytest.raises(ChannelTimeout, match="memory"):
            impatient_runner.run_python(FILL_MEMORY_THEN_SLEEP, timeout_s=10.0)
    finally:
        pauser.join()
