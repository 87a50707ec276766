"""Lifecycle and fault handling of the Docker sandboxes: leaks, reaper, isolation, typed failures."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import ledger_program as lp
import pytest
from docker_helpers import report

from sopgym.sandboxes.base import (
    Outcome,
    SandboxEpisode,
    SandboxError,
    SandboxUnavailable,
    StatefulProgram,
    Tier,
    ToolSpec,
)

LEDGER = StatefulProgram("ledger_program")
HERE = Path(__file__).resolve().parent


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _exists(client, names) -> list[str]:
    import docker.errors

    alive = []
    for name in names:
        try:
            client.api.inspect_container(name)
            alive.append(name)
        except docker.errors.NotFound:
            pass
    return alive


def test_500_create_reset_close_cycles_leave_nothing(docker_client, make_pool):
    """Warm pool: 500 backend lifetimes reuse one container; close leaves no container and no fd."""
    from sopgym.sandboxes.docker import DockerStatefulBackend

    pool = make_pool()
    names = set()

    def cycle(i: int) -> None:
        backend = DockerStatefulBackend(pool=pool)
        backend.start_episode(LEDGER, lp.initial_state())
        assert backend.call("add_token", {"account": "A0", "token": f"c{i}"}).ok
        assert backend.call("list_tokens", {}).content == [f"c{i}"], "a previous cycle's token is visible"
        names.add(backend.container_name)
        backend.close()
        backend.close()  # twice is fine

    for i in range(5):  # warm up lazily allocated fds (the pool's connections)
        cycle(i)
    fds_before = _fds()
    started = time.perf_counter()
    for i in range(500):
        cycle(i)
    elapsed = time.perf_counter() - started
    fds_after = _fds()
    assert fds_after <= fds_before, f"fd count grew from {fds_before} to {fds_after} over 500 cycles"
    assert pool.num_created == 1, f"expected one warm container reused, created {pool.num_created}"
    pool.close()
    assert _exists(docker_client, names) == [], "containers left after pool close"
    report("cycles_warm", cycles=500, seconds=elapsed, containers_created=pool.num_created, fds_before=fds_before,
           fds_after=fds_after)


def test_cold_cycles_remove_every_container(docker_client, make_pool):
    """keep_warm=False: each cycle creates and destroys a container; none remain, no fd growth."""
    from sopgym.sandboxes.docker import DockerStatefulBackend

    pool = make_pool()
    names = []
    DockerStatefulBackend(pool=pool, keep_warm=False).close()  # close before any episode

    def cycle():
        backend = DockerStatefulBackend(pool=pool, keep_warm=False)
        backend.start_episode(LEDGER, lp.initial_state())
        names.append(backend.container_name)
        backend.close()

    for _ in range(6):  # docker-py's per-URL connection pools fill up to a fixed bound first
        cycle()
    fds_before = _fds()
    started = time.perf_counter()
    num = 15
    for _ in range(num):
        backend = DockerStatefulBackend(pool=pool, keep_warm=False)
        backend.start_episode(LEDGER, lp.initial_state())
        names.append(backend.container_name)
        backend.close()
    elapsed = time.perf_counter() - started
    assert len(set(names)) == num + 6
    assert _exists(docker_client, names) == [], "close(keep_warm=False) left containers behind"
    assert _fds() <= fds_before + 2, f"fd count grew from {fds_before} to {_fds()}"
    report("cycles_cold", cycles=num, seconds_per_cycle=elapsed / num)


def _owner(script: str) -> tuple[subprocess.Popen, list[str]]:
    """A separate sopgym process running ``script``; returns it and the first line it prints, split."""
    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True)
    try:
        line = owner.stdout.readline().split()
    except BaseException:
        owner.kill()
        raise
    if not line:
        owner.kill()
        raise AssertionError(f"the owner process printed nothing (exit {owner.wait()})")
    return owner, line


def test_containers_of_a_sigkilled_owner_are_gone_within_seconds(docker_client):
    """kill -9 of the owner (which had forked a long-lived child, as multiprocessing does): its
    stateful and runner containers end and are removed by themselves within seconds (they once
    stayed Exited until the next sopgym process reaped them)."""
    owner, line = _owner(f"""
        import os, sys, time
        sys.path.insert(0, {str(HERE)!r})
        from sopgym.sandboxes.base import StatefulProgram
        from sopgym.sandboxes.docker import DockerStatefulBackend, DockerCodeRunner
        import ledger_program as lp
        backend = DockerStatefulBackend()
        backend.start_episode(StatefulProgram("ledger_program"), lp.initial_state())
        runner = DockerCodeRunner()
        runner.run_python("pass")
        (box,) = runner.pool._idle
        child = os.fork()
        if child == 0:
            time.sleep(600)  # outlives the owner holding whatever it inherited
            os._exit(0)
        print(backend.container_name, box.name, child, flush=True)
        time.sleep(600)
    """)
    *names, child = line
    try:
        assert all(n.startswith("sopgym-") for n in names), line
        assert _exists(docker_client, names) == names, "positive control: the containers run before the kill"
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        started = time.perf_counter()
        while (left := _exists(docker_client, names)) and time.perf_counter() - started < 10:
            time.sleep(0.1)
        elapsed = time.perf_counter() - started
    finally:
        owner.kill()
        os.kill(int(child), signal.SIGKILL)
    assert left == [], f"containers of the SIGKILLed owner still exist after {elapsed:.1f} s: {left}"
    report("owner_kill_cleanup", containers=len(names), seconds=elapsed)


def test_reaper_removes_containers_of_a_sigkilled_owner(docker_client):
    """The backstop: a container whose channel another process still holds (so it cannot end by
    itself) is removed by the reaper once its owner is dead."""
    from sopgym.sandboxes.docker import reap

    owner, line = _owner(f"""
        import subprocess, sys, time
        sys.path.insert(0, {str(HERE)!r})
        from sopgym.sandboxes.base import StatefulProgram
        from sopgym.sandboxes.docker import DockerStatefulBackend
        import ledger_program as lp
        backend = DockerStatefulBackend()
        backend.start_episode(StatefulProgram("ledger_program"), lp.initial_state())
        fd = backend._box.channel._sock.fileno()
        holder = subprocess.Popen(["sleep", "600"], pass_fds=[fd])  # keeps the stream open
        print(backend.container_name, holder.pid, flush=True)
        time.sleep(600)
    """)
    name, holder = line
    try:
        assert name.startswith("sopgym-stateful-"), f"expected a container name from the owner, got {name!r}"
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        time.sleep(1.0)
        assert _exists(docker_client, [name]) == [name], "positive control: the held container should outlive its owner"
        started = time.perf_counter()
        removed = reap(docker_client)
        elapsed = time.perf_counter() - started
    finally:
        owner.kill()
        os.kill(int(holder), signal.SIGKILL)
    assert name in removed, f"reaper removed {removed}, expected {name}"
    assert _exists(docker_client, [name]) == []
    report("reaper", removed=len(removed), seconds=elapsed)


def test_reaper_spares_live_owners_and_removes_expired(docker_client, make_pool):
    from sopgym.sandboxes.docker import DockerStatefulBackend, reap

    backend = DockerStatefulBackend(pool=make_pool())
    backend.start_episode(LEDGER, lp.initial_state())
    name = backend.container_name
    try:
        assert name not in reap(docker_client), "the reaper removed a live owner's container"
        assert backend.call("list_tokens", {}).ok
        far_future = time.time() + 10 * 365 * 86400
        assert name in reap(docker_client, now=far_future), "an expired container should be reaped"
        from sopgym.sandboxes.docker import ContainerLost

        with pytest.raises(ContainerLost):  # its container is gone: a typed infrastructure error
            backend.call("list_tokens", {})
    finally:
        backend.close()


def test_32_concurrent_backends_never_see_each_others_tokens(docker_client, make_pool):
    from sopgym.sandboxes.docker import DockerStatefulBackend

    pool = make_pool()
    num_envs, num_episodes = 32, 3
    errors: list[str] = []
    barrier = threading.Barrier(num_envs)

    def env(slot: int) -> None:
        backend = DockerStatefulBackend(pool=pool)
        try:
            for episode in range(num_episodes):
                backend.start_episode(LEDGER, lp.initial_state())
                if episode == 0:
                    barrier.wait(timeout=120)  # all 32 hold their own container at once
                seen = backend.call("list_tokens", {}).content
                if seen != []:
                    errors.append(f"slot {slot} episode {episode}: fresh state shows {seen}")
                token = f"{slot}-{episode}-{uuid.uuid4().hex}"
                backend.call("add_token", {"account": "A0", "token": token})
                time.sleep(0.01)  # let the others write in between
                seen = backend.call("list_tokens", {}).content
                if seen != [token]:
                    errors.append(f"slot {slot} episode {episode}: expected only {token}, saw {seen}")
        except Exception as exc:  # noqa: BLE001 - reported below with the slot
            errors.append(f"slot {slot}: {type(exc).__name__}: {exc}")
        finally:
            backend.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=env, args=(i,)) for i in range(num_envs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    assert errors == [], errors[:5]
    assert pool.num_created == num_envs, f"expected {num_envs} containers (one per env), got {pool.num_created}"
    report("isolation_32", envs=num_envs, episodes=num_envs * num_episodes, seconds=elapsed)


def test_daemon_unreachable_is_a_typed_error_within_seconds():
    from sopgym.sandboxes.docker import DaemonUnreachable, DockerStatefulBackend

    started = time.perf_counter()
    with pytest.raises(DaemonUnreachable) as info:
        DockerStatefulBackend(base_url=f"unix:///tmp/no-docker-{uuid.uuid4().hex}.sock")
    elapsed = time.perf_counter() - started
    assert isinstance(info.value, SandboxUnavailable) and elapsed < 5, elapsed
    report("fault_daemon_unreachable", seconds=elapsed)


def test_missing_image_is_a_typed_error(docker_client, make_pool):
    from sopgym.sandboxes.docker import DockerStatefulBackend, ImageMissing
    from sopgym.sandboxes.docker.hardening import ContainerHardening
    from sopgym.sandboxes.docker.pool import ContainerPool

    started = time.perf_counter()
    with pytest.raises(ImageMissing):
        DockerStatefulBackend(image="sopgym-sandbox:does-not-exist")
    pool = ContainerPool(docker_client, "sopgym-sandbox:does-not-exist", ContainerHardening(), "stateful")
    with pytest.raises(ImageMissing):
        pool.acquire()
    pool.close()
    report("fault_image_missing", seconds=time.perf_counter() - started)


def _toolbox(backend):
    from sopgym.sandboxes.toolbox import ToolBox

    specs = [ToolSpec("list_tokens", "read", {"type": "object", "properties": {}}, tier=Tier.STATEFUL)]
    return ToolBox(specs, stateful=backend)


def test_container_killed_from_outside_becomes_sandbox_error_and_is_replaced(docker_client, make_pool):
    from sopgym.sandboxes.docker import ContainerLost, DockerStatefulBackend

    pool = make_pool()
    backend = DockerStatefulBackend(pool=pool)
    box = _toolbox(backend)
    episode = SandboxEpisode(key="t/kill", program=LEDGER, initial_state=lp.initial_state())
    try:
        box.start_episode(episode)
        first = backend.container_name
        docker_client.api.kill(first)
        started = time.perf_counter()
        result = box.call("list_tokens", {})
        elapsed = time.perf_counter() - started
        assert result.outcome is Outcome.SANDBOX_ERROR and result.is_infrastructure_failure, result
        with pytest.raises(ContainerLost):  # typed at the backend level too
            backend._box = None
            backend.start_episode(LEDGER, lp.initial_state())
            docker_client.api.kill(backend.container_name)
            backend.call("list_tokens", {})
        box.start_episode(episode)  # the pool replaces the broken container
        assert box.call("list_tokens", {}).ok and backend.container_name != first
        assert elapsed < 3, f"the failure took {elapsed:.2f} s to surface"
        report("fault_container_killed", seconds_to_error=elapsed)
    finally:
        box.close()


def test_hanging_channel_times_out_and_is_replaced(docker_client, make_pool):
    from sopgym.sandboxes.docker import ChannelTimeout, DockerStatefulBackend

    pool = make_pool()
    backend = DockerStatefulBackend(pool=pool, call_timeout_s=1.0)
    try:
        backend.start_episode(LEDGER, lp.initial_state())
        hung = backend.container_name
        docker_client.api.pause(hung)  # the server stops answering mid-episode
        started = time.perf_counter()
        with pytest.raises(ChannelTimeout):
            backend.call("list_tokens", {})
        elapsed = time.perf_counter() - started
        assert 1.0 <= elapsed < 3.0, f"expected the timeout after ~1 s, took {elapsed:.2f} s"
        backend.start_episode(LEDGER, lp.initial_state())
        assert backend.call("list_tokens", {}).ok and backend.container_name != hung
        assert _exists(docker_client, [hung]) == [], "the hung (paused) container should have been destroyed"
        report("fault_hang", seconds_to_error=elapsed)
    finally:
        backend.close()


def test_runner_hang_beyond_grace_kills_the_container(docker_client, make_pool):
    """If the server itself stops answering, the host kills the container at timeout + grace."""
    from sopgym.sandboxes.docker import ChannelTimeout, DockerCodeRunner

    runner = DockerCodeRunner(pool=make_pool("runner"), grace_s=0.5)
    runner.run_python("pass")
    (box,) = runner.pool._all.values()
    docker_client.api.pause(box.id)
    started = time.perf_counter()
    with pytest.raises(ChannelTimeout):
        runner.run_python("print(1)", timeout_s=0.5)
    elapsed = time.perf_counter() - started
    # The server's answer is awaited timeout + grace (1 s), then the container is killed; without the
    # grace deadline the read would block as long as the container stays paused (forever). The upper
    # bound leaves room for the kill on a loaded CI host (2.54 s was seen there).
    assert 1.0 <= elapsed < 10.0, f"expected ChannelTimeout after timeout + grace (1 s), took {elapsed:.2f} s"
    assert _exists(docker_client, [box.name]) == []
    assert runner.run_python("print(1)").stdout == "1\n"
    report("fault_runner_hang", seconds_to_error=elapsed)


def test_sandbox_error_is_infrastructure_not_policy():
    """The typed errors are SandboxErrors, which the ToolBox classifies as infrastructure failures."""
    from sopgym.sandboxes.docker import errors

    for cls in (errors.DaemonUnreachable, errors.ImageMissing, errors.ContainerLost, errors.ChannelTimeout,
                errors.ProgramError):
        assert issubclass(cls, SandboxError), cls


def test_warm_container_killed_while_idle_is_replaced_without_an_error(docker_client, make_pool):
    import docker.errors

    from sopgym.sandboxes.docker import DockerCodeRunner

    pool = make_pool("runner")
    runner = DockerCodeRunner(pool=pool)
    try:
        assert runner.run_python("print(1)").stdout.strip() == "1"
        (idle,) = pool._idle
        docker_client.api.kill(idle.id)
        with contextlib.suppress(docker.errors.NotFound):  # auto-removed on exit: may be gone already
            docker_client.api.wait(idle.id, timeout=10)
        started = time.perf_counter()
        result = runner.run_python("print(2)")  # the dead warm container is noticed at acquire
        elapsed = time.perf_counter() - started
        assert result.ok and result.stdout.strip() == "2", result
        assert idle.id not in pool._all and pool.num_created == 2
        report("fault_idle_container_killed", seconds_to_replace=elapsed)
    finally:
        runner.close()
        pool.close()
