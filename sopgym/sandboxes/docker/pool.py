"""Container lifecycle: connect, start, warm pool, escalating cleanup, and the reaper.

* :func:`connect` reaches the daemon over its unix socket (``DOCKER_HOST`` honoured) or raises
  :class:`DaemonUnreachable` within ``timeout`` seconds.
* :class:`SandboxContainer` is one started container plus its :class:`Channel`. It is created with
  ``stdin_once`` and ``AutoRemove``: when its attach stream closes (we close it, or the owning
  process dies) the server reads EOF, the container ends and the daemon removes it.
* :class:`ContainerPool` keeps warm containers for reuse across episodes and backends; a container
  that failed in any way is destroyed, never returned. ``close()`` destroys every container the pool
  ever made that still exists.
* :func:`destroy` escalates stop -> kill -> remove, each step with its own timeout.
* :func:`reap` removes containers whose labels say they expired or whose owner process is gone.
* :func:`memory_events` asks the daemon whether a container hit its memory limit in a time window
  (how the code runner tells a run that exhausted memory from an infrastructure failure), and
  :func:`resource_use` samples its memory and processes (how it tells a server that stopped answering
  because the run filled its container from one that failed on its own).

Fork safety: containers, channels and pools belong to the process that made them. In a forked child
(``os.fork``, multiprocessing's fork context, ``AsyncVectorEnv``) every inherited channel descriptor
is closed at the fork (the parent's stream is untouched), every pool forgets its parent's
containers without touching them and reconnects to the daemon on first use, and the process-wide
pools start empty: a child never drives, returns or destroys its parent's containers.

What it protects against: leaked containers (pool close at exit, self-removal on owner death, the
reaper for the rest), containers started with weaker settings than their hardening (each new container's
``docker inspect`` is audited, and a runner's server must report agent code under another uid,
before use), two processes sharing one container after a fork. What it does not: a daemon that is
itself compromised, or containers created by other tools (only labelled ones are ever touched).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import socket
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from . import hardening
from .channel import Channel
from .errors import DaemonUnreachable, ImageMissing, SandboxError
from .hardening import ContainerHardening, audit

__all__ = ["connect", "SandboxContainer", "ContainerPool", "destroy", "reap", "memory_events", "resource_use",
           "shared_pool", "shutdown", "SESSION_ID"]

log = logging.getLogger(__name__)

#: Labels every container of this process; the reaper and tests select by it.
SESSION_ID = uuid.uuid4().hex[:12]
_NUM_POOLS = 4
SERVER_COMMAND = ["python3", "-u", "/opt/sopgym/server.py", "--container"]


def connect(base_url: str | None = None, timeout: float = 10.0):
    """A ``docker.DockerClient`` that answered a ping.

    Raises:
        DaemonUnreachable: the SDK is missing, or the daemon did not answer within ``timeout``.
    """
    try:
        import docker
    except ImportError as exc:
        raise DaemonUnreachable(f"the docker SDK is missing: pip install 'sopgym[docker]' ({exc})") from exc
    url = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        # types-docker says int seconds; the SDK hands the timeout to requests, which takes a float.
        client = docker.DockerClient(base_url=url, timeout=timeout, max_pool_size=64)  # type: ignore[arg-type]
        _bound_pools(client.api)
        client.ping()
        # the unix socket path, which api.base_url no longer shows: our own attribute on the SDK's client
        client.api.sopgym_url = url  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - requests/urllib3/docker raise many types for "no daemon"
        reason = f"Docker daemon at {url} did not answer a ping within {timeout:.0f} s: {exc}"
        error = DaemonUnreachable(
            f"{reason}. Start it (bash scripts/docker_setup.sh), or do without it: sandbox='inprocess' for stateful "
            "tools, code_runner='inprocess' for the code runner (trusted code only)."
        )
        error.reason = reason  # the daemon's answer without the hint (the pre-flight names the env's own fixes)
        raise error from exc
    return client


def _bound_pools(api) -> None:
    """Keep at most ``_NUM_POOLS`` idle HTTP connection pools on a unix-socket APIClient.

    docker-py keeps one connection pool per distinct URL, and container ids are in URLs, so every
    container leaves sockets behind until 25 pools exist; its ``num_pools`` argument is ignored for
    unix sockets (an operator-precedence slip in docker-py 7). We install the bounded container it
    meant to build, so idle sockets stay at a small constant.
    """
    from urllib3._collections import RecentlyUsedContainer

    adapter = getattr(api, "_custom_adapter", None)
    if adapter is not None and hasattr(adapter, "pools"):
        adapter.pools = RecentlyUsedContainer(_NUM_POOLS, dispose_func=_close_idle_connections)


def _close_idle_connections(pool) -> None:
    """An evicted connection pool's disposal: close its idle sockets but leave it open.

    Another thread may have taken the pool from the container just before it was evicted and be
    about to send its request; ``pool.close()`` made that request fail with urllib3's "Pool is
    closed" (seen with 32 threads and 4 pools). Here its idle connections are closed and their slots
    kept, so such a request opens a fresh connection, and the pool, once unreferenced, is collected.
    """
    taken = []
    while True:
        try:
            taken.append(pool.pool.get(block=False))
        except (queue.Empty, AttributeError):  # AttributeError: already closed (pool.pool is None)
            break
    for conn in taken:
        if conn is not None:
            conn.close()
    for _ in taken:
        try:
            pool.pool.put(None, block=False)
        except (queue.Full, AttributeError):
            break


@dataclass
class SandboxContainer:
    """A started container and its channel. ``programs`` holds the program hashes its server has."""

    client: Any
    id: str
    name: str
    role: str
    channel: Channel
    programs: set = field(default_factory=set)
    broken: bool = False
    created_s: float = 0.0
    pid: int = field(default_factory=os.getpid)  # the process that owns it

    @property
    def inherited(self) -> bool:
        """True in a forked child: the container is its parent's and must not be touched here."""
        return self.pid != os.getpid()

    def request(self, op: str, wait_s: float, **body: Any) -> dict[str, Any]:
        """A request that must succeed; marks the container broken on any infrastructure failure."""
        try:
            response = self.channel.request(op, wait_s, **body)
        except SandboxError:
            self.broken = True
            raise
        return response

    def kill(self) -> None:
        """SIGKILL the container now (used at host-side deadlines). Never a parent's container."""
        self.broken = True
        if self.inherited:
            return
        try:
            self.client.api.kill(self.id)
        except Exception as exc:  # noqa: BLE001
            log.debug("kill %s: %s", self.name, exc)


def start_container(client, image: str, hardening: ContainerHardening, role: str, *, start_timeout: float = 30.0,
                    verify: bool = True) -> SandboxContainer:
    """Create, start and attach one container; wait for the server's hello.

    Raises:
        ImageMissing: ``image`` is not on the daemon.
        ContainerLost / ChannelTimeout: it started but the server did not come up.
        SandboxError: the container's inspect shows weaker hardening than asked for (it is removed).
    """
    import docker.errors

    name = f"sopgym-{role}-{SESSION_ID}-{uuid.uuid4().hex[:8]}"
    options = hardening.container_options(image=image, name=name, role=role, session=SESSION_ID, command=SERVER_COMMAND)
    host_config = client.api.create_host_config(**_host_config_kwargs(options.pop("host_config")))
    started = time.monotonic()
    try:
        stdin_once = options.pop("stdin_once")
        config = client.api.create_container_config(host_config=host_config, **{k: v for k, v in options.items() if k != "name"})
        config["StdinOnce"] = stdin_once  # not a create_container keyword in docker-py
        created = client.api.create_container_from_config(config, name)
    except docker.errors.ImageNotFound as exc:
        raise ImageMissing(
            f"sandbox image {image} is not built on this daemon; expected it after `sopgym sandbox build` "
            f"(or bash scripts/docker_setup.sh)"
        ) from exc
    except docker.errors.APIError as exc:
        if exc.status_code == 404 and "image" in str(exc).lower():
            raise ImageMissing(f"sandbox image {image} is not on this daemon: {exc}") from exc
        raise SandboxError(f"creating {name} failed: {exc}") from exc
    cid = created["Id"]
    try:
        if verify:
            problems = audit(client.api.inspect_container(cid))
            if problems and not hardening.loosenings():
                raise SandboxError(f"container {name} is weaker than its hardening: {'; '.join(problems)}")
        sock = client.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        channel = Channel(sock, name)
        client.api.start(cid)
        box = SandboxContainer(client, cid, name, role, channel)
        hello = box.request("hello", start_timeout)
        if verify and role == "runner" and not hardening.loosenings():
            uid, agent_uid = hello.get("uid"), hello.get("agent_uid")
            if not (isinstance(uid, int) and isinstance(agent_uid, int) and 0 not in (uid, agent_uid) and uid != agent_uid):
                raise SandboxError(
                    f"container {name}: expected the server and agent code under two non-root uids, "
                    f"the server reports uid={uid!r} agent_uid={agent_uid!r}"
                )
        box.created_s = time.monotonic() - started
        return box
    except BaseException:
        destroy(client, cid)
        raise


def _host_config_kwargs(hc: dict[str, Any]) -> dict[str, Any]:
    """Map the hardening's inspect-style HostConfig names to ``create_host_config`` keywords."""
    return {
        "network_mode": hc["NetworkMode"],
        "read_only": hc["ReadonlyRootfs"],
        "cap_drop": hc["CapDrop"],
        "cap_add": hc["CapAdd"],
        "security_opt": hc["SecurityOpt"] or None,
        "pids_limit": hc["PidsLimit"],
        "mem_limit": hc["Memory"],
        "memswap_limit": hc["MemorySwap"],
        "nano_cpus": hc["NanoCpus"],
        "tmpfs": hc["Tmpfs"],
        "init": hc["Init"],
        "ipc_mode": hc["IpcMode"],
        "auto_remove": hc["AutoRemove"],
        "ulimits": [_ulimit(u) for u in hc["Ulimits"]],
        **({"runtime": hc["Runtime"]} if "Runtime" in hc else {}),
    }


def _ulimit(spec: dict[str, Any]):
    from docker.types import Ulimit

    return Ulimit(name=spec["Name"], soft=spec["Soft"], hard=spec["Hard"])


def destroy(client, cid: str, *, stop_timeout: float = 1.0, kill_timeout: float = 5.0) -> bool:
    """Escalating cleanup: stop (SIGTERM, then SIGKILL after ``stop_timeout``) -> kill -> remove (forced).

    Each step has its own deadline (stop: the client's timeout + ``stop_timeout``; kill and remove:
    ``kill_timeout`` each); a failing step does not stop the next. Returns True when the container
    is gone.
    """
    import docker.errors

    api = client.api
    # stop's HTTP timeout is the client's plus stop_timeout; kill and remove get a client of their own.
    steps = (
        ("stop", lambda: api.stop(cid, timeout=max(1, round(stop_timeout)))),
        ("kill", lambda: _api(api, kill_timeout).kill(cid)),
        ("remove", lambda: _api(api, kill_timeout).remove_container(cid, force=True, v=True)),
    )
    for step, action in steps:
        if step == "kill" and not _running(api, cid):
            continue
        try:
            action()
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError as exc:
            if exc.status_code in (304, 409) or "is not running" in str(exc):  # already stopped
                continue
            log.warning("cleanup %s of %s failed: %s", step, cid[:12], exc)
        except Exception as exc:  # noqa: BLE001 - timeouts, broken connections
            log.warning("cleanup %s of %s failed: %s", step, cid[:12], exc)
    # AutoRemove: the daemon may still be removing it; wait for that rather than report a survivor.
    deadline = time.monotonic() + kill_timeout
    while True:
        try:
            api.inspect_container(cid)
        except docker.errors.NotFound:
            return True
        except Exception:  # noqa: BLE001
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    log.warning("container %s survived cleanup; the reaper will remove it", cid[:12])
    return False


def _running(api, cid: str) -> bool:
    try:
        return bool(api.inspect_container(cid)["State"]["Running"])
    except Exception:  # noqa: BLE001
        return False


_apis: dict[tuple, Any] = {}


def _api(api, timeout: float):
    """An APIClient on the same daemon whose HTTP calls time out after ``timeout`` seconds."""
    import docker

    key = (api.base_url, timeout)
    client = _apis.get(key)
    if client is None:
        base = getattr(api, "sopgym_url", None) or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        # types-docker says int seconds; the SDK hands the timeout to requests, which takes a float.
        client = _apis[key] = docker.APIClient(base_url=base, timeout=timeout,  # type: ignore[arg-type]
                                               version=api.api_version)
        _bound_pools(client)
    return client


def reap(client=None, *, now: float | None = None, include_own: bool = False) -> list[str]:
    """Remove labelled containers that expired or whose owner process on this host is gone.

    Args:
        include_own: also remove this process's containers (``sopgym sandbox gc --all`` style).

    Returns:
        Names of the removed containers.
    """
    client = client or connect()
    now = time.time() if now is None else now
    host = socket.gethostname()
    removed = []
    for c in client.api.containers(all=True, filters={"label": f"{hardening.MANAGED}=1"}):
        labels = c.get("Labels") or {}
        name = (c.get("Names") or ["?"])[0].lstrip("/")
        try:
            expires = float(labels.get(hardening.EXPIRES, "0"))
        except ValueError:
            expires = 0.0
        own = labels.get(hardening.OWNER_HOST) == host and labels.get(hardening.OWNER_PID) == str(os.getpid())
        owner_gone = labels.get(hardening.OWNER_HOST) == host and (
            hardening.process_start_time(int(labels.get(hardening.OWNER_PID, "0") or 0)) != labels.get(hardening.OWNER_START)
        )
        if expires < now or owner_gone or (own and include_own):
            if destroy(client, c["Id"]):
                removed.append(name)
    return removed


#: Memory use (of the container's limit) from which a container that stops answering is taken to have
#: been overwhelmed by what runs in it: the kernel is reclaiming and may stall every process in the
#: cgroup for seconds before its OOM killer acts, or never acts (pipe buffers and other kernel memory).
MEMORY_PRESSURE = 0.9


@dataclass(frozen=True)
class ResourceUse:
    """One sample of a container's memory and processes (the daemon's stats, cgroup v1 or v2)."""

    memory: int
    memory_limit: int
    pids: int
    pids_limit: int

    @property
    def exhausted(self) -> str | None:
        """What is at its limit (memory at ``MEMORY_PRESSURE`` of it or more, processes at it), or None."""
        if self.memory_limit and self.memory >= MEMORY_PRESSURE * self.memory_limit:
            return f"memory at {self.memory / self.memory_limit:.0%} of its limit"
        if self.pids_limit and self.pids >= self.pids_limit:
            return f"processes at their limit ({self.pids})"
        return None

    def __str__(self) -> str:
        return (f"memory {self.memory / 2**20:.0f} MiB of {self.memory_limit / 2**20:.0f} MiB, "
                f"{self.pids} of {self.pids_limit or 'unlimited'} processes")


def resource_use(client, cid: str) -> ResourceUse | None:
    """The container's memory and process count now (one stats sample), or None when the daemon does
    not give them (container gone, daemon unreachable: an answer of its own)."""
    try:
        stats = client.api.stats(cid, stream=False, one_shot=True)
        memory, pids = stats.get("memory_stats") or {}, stats.get("pids_stats") or {}
        return ResourceUse(int(memory["usage"]), int(memory.get("limit") or 0), int(pids.get("current") or 0),
                           int(pids.get("limit") or 0))
    except Exception as exc:  # noqa: BLE001 - no sample is the answer
        log.warning("reading the stats of %s failed: %s", cid[:12], exc)
        return None


def memory_events(client, cid: str, since: float, *, settle_s: float = 1.0) -> str | None:
    """What the daemon saw happen to container ``cid`` since ``since`` (epoch seconds): ``"outside"``
    when a ``kill``, ``stop`` or ``pause`` came from outside anywhere in the window, else ``"oom"``
    when it ran out of memory, else None. A container acted on from the host is never put down to what
    ran in it, whichever event the daemon reported first: it reports ``kill`` only once the signal is
    delivered, and under cgroup v1 the dying container's memory cgroup can report an ``oom`` before
    that (seen in a CI rehearsal under load: a container killed from the host during ``sleep`` was
    scored as the run's memory exhaustion).

    The daemon reports events a moment after the kernel, so events are read until ``settle_s`` from
    now (this runs only after a failure, and before the caller's own kill of the container). Any error
    reaching the daemon gives None: an unreachable daemon is an infrastructure failure.
    """
    since_ns = int(since * 1e9)
    seen: set[str] = set()
    events = None
    try:
        events = client.api.events(since=since, until=time.time() + settle_s, filters={"container": cid}, decode=True)
        for event in events:
            if int(event.get("timeNano", since_ns)) >= since_ns:
                seen.add(event.get("status") or event.get("Action") or "")
    except Exception as exc:  # noqa: BLE001 - the daemon's absence is the answer
        log.warning("reading the events of %s failed: %s", cid[:12], exc)
        return None
    finally:
        if events is not None:
            events.close()
    if seen & {"kill", "stop", "pause"}:
        return "outside"
    return "oom" if "oom" in seen else None


class ContainerPool:
    """Warm containers of one (image, hardening, role), reused across episodes and backends. Thread-safe.

    Args:
        client: a connected ``docker.DockerClient``.
        image: image tag.
        hardening: every container gets exactly this (``hardening.py``).
        role: ``"stateful"`` or ``"runner"`` (a label; pools never mix roles).
        max_idle: containers kept warm after release; beyond it released containers are destroyed.
    """

    def __init__(self, client, image: str, hardening: ContainerHardening, role: str, *, max_idle: int = 64,
                 start_timeout: float = 30.0) -> None:
        self._client = client
        self.base_url = getattr(client.api, "sopgym_url", None)
        self.image = image
        self.hardening = hardening
        self.role = role
        self.max_idle = max_idle
        self.start_timeout = start_timeout
        self._closed = False
        self._start_fresh()
        _pools.add(self)

    def _start_fresh(self) -> None:
        """Empty state owned by this process (at construction, and in a forked child)."""
        self._pid = os.getpid()
        self._idle: list[SandboxContainer] = []
        self._all: dict[str, SandboxContainer] = {}
        self._lock = threading.Lock()
        self.num_created = 0
        self.num_destroyed = 0

    def _after_fork_in_child(self) -> None:
        # The parent's containers stay the parent's; its HTTP connections too (reconnect lazily).
        self._start_fresh()
        self._client = None

    def _own(self) -> None:
        if self._pid != os.getpid():  # a fork the at-fork hook did not see (it always does; belt and braces)
            self._after_fork_in_child()

    @property
    def client(self):
        """The docker client of this process (a forked child connects anew on first use)."""
        self._own()
        if self._client is None:
            self._client = connect(self.base_url)
        return self._client

    def acquire(self) -> SandboxContainer:
        self._own()
        with self._lock:
            if self._closed:
                raise SandboxError(f"{self.role} pool is closed; expected an open pool")
            stale = []
            found = None
            while self._idle:
                box = self._idle.pop()
                if not box.broken and box.channel.is_open():
                    found = box
                    break
                stale.append(box)  # killed or died while idle: replace it
        for box in stale:
            self.discard(box)
        if found is not None:
            return found
        box = start_container(self.client, self.image, self.hardening, self.role, start_timeout=self.start_timeout)
        with self._lock:
            self.num_created += 1
            self._all[box.id] = box
            if self._closed:
                self._destroy(box)
                raise SandboxError(f"{self.role} pool closed while a container started")
        return box

    def release(self, box: SandboxContainer) -> None:
        """Return a container; a broken one (or one over ``max_idle``) is destroyed."""
        self._own()
        if box.inherited:  # the parent's: never pooled or destroyed here
            box.channel.forget()
            return
        with self._lock:
            keep = not box.broken and not self._closed and len(self._idle) < self.max_idle
            if keep:
                self._idle.append(box)
                return
        self.discard(box)

    def discard(self, box: SandboxContainer) -> None:
        self._own()
        if box.inherited:
            box.channel.forget()
            return
        box.broken = True
        with self._lock:
            self._all.pop(box.id, None)
        self._destroy(box)

    def _destroy(self, box: SandboxContainer) -> None:
        box.channel.close()
        destroy(self.client, box.id)
        self.num_destroyed += 1

    def __len__(self) -> int:
        self._own()
        return len(self._all)

    def close(self) -> None:
        """Destroy every container this pool made (in this process) that still exists. Safe to call twice."""
        self._own()
        with self._lock:
            self._closed = True
            boxes = list(self._all.values())
            self._all.clear()
            self._idle.clear()
        for box in boxes:
            self._destroy(box)


_pools: weakref.WeakSet[ContainerPool] = weakref.WeakSet()
_shared: dict[tuple, ContainerPool] = {}
_shared_lock = threading.Lock()


def shared_pool(client, base_url: str | None, image: str, hardening: ContainerHardening, role: str) -> ContainerPool:
    """The process-wide pool for these settings (closed at interpreter exit by :func:`shutdown`)."""
    key = (base_url, image, hardening_key(hardening), role)
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool._closed:
            if not _shared:
                _reap_once(client)
            pool = _shared[key] = ContainerPool(client, image, hardening, role)
        return pool


def hardening_key(hardening: ContainerHardening) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in vars(hardening).items()))


_reaped = False


def _reap_once(client) -> None:
    """First pool of the process: clean up after crashed predecessors (best effort, logged)."""
    global _reaped
    if _reaped:
        return
    _reaped = True
    try:
        removed = reap(client)
        if removed:
            log.info("reaped %d leftover sandbox containers: %s", len(removed), ", ".join(removed))
    except Exception as exc:  # noqa: BLE001 - reaping is housekeeping, never fatal
        log.warning("reaping leftover containers failed: %s", exc)


def shutdown() -> None:
    """Close every shared pool of this process (registered with atexit)."""
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.close()


def _after_fork_in_child() -> None:
    """A forked child starts with no shared pools and forgets its parent's containers (see the module doc)."""
    global _shared_lock
    _shared_lock = threading.Lock()
    _shared.clear()
    _apis.clear()
    for pool in list(_pools):
        pool._after_fork_in_child()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_after_fork_in_child)
