"""The one place where sandbox containers' Docker settings are built (hardening lives here only).

Every container sopgym starts gets its options from :meth:`ContainerHardening.container_options`;
nothing else in the code base passes raw Docker options.

What the default policy protects against:

* **network access**: ``network_mode="none"`` (only a loopback interface; connecting to any address,
  DNS and ``pip install`` fail at once). There is deliberately no option to loosen this: the tools
  never need a network, and the host is reached only through the Docker API socket (attach).
* **writing outside scratch**: read-only root filesystem; ``/tmp`` is a tmpfs capped at
  ``tmpfs_size`` (``noexec,nosuid,nodev``), which counts against the memory limit.
* **privilege escalation**: every capability dropped, ``no-new-privileges`` (setuid binaries do not
  raise privileges), Docker's default seccomp profile, and no process that runs tool or agent code is
  root: the tool server runs as ``user`` (``65534:65534``, "nobody") with no capabilities at all.
* **agent code attacking the tool server** (runner containers): agent code runs as its own uid
  (``agent_user``, ``65533:65533``), so it cannot signal, ptrace, or read the memory and file
  descriptors of the server, of the supervisor that starts it, or of init. Giving each its own uid
  needs one process allowed to switch uids: a runner container's main process is a small root
  *supervisor* with exactly :data:`SUPERVISOR_CAPS` (switch uid/gid, signal the agent's processes,
  clear the bounding set of what it starts). It never runs tool or agent code; the server and every
  agent process drop all capabilities, bounding set included. Stateful containers run no agent code
  and start directly as ``user`` with no capabilities.
* **resource exhaustion of the host**: ``pids_limit`` (fork bombs), ``mem_limit`` with no swap
  (memory bombs are OOM-killed inside the container), ``nano_cpus`` (CPU share), an init process
  (zombies are reaped), output caps and hard deadlines (enforced by the server and the pool).
* **leaks**: ``AutoRemove`` (a container that ends, for instance because its owner died and its
  channel closed, is removed by the daemon), and labels naming the owner (host, pid, process start
  time, session) and an expiry time, so :func:`sopgym.sandboxes.docker.pool.reap` can remove the rest.

What it does not protect against:

* kernel exploits and container escapes through kernel bugs: containers share the host kernel
  (use gVisor/Kata via ``runtime=`` for that);
* denial of service through disk I/O bandwidth or the Docker daemon itself;
* anyone with access to the Docker socket on the host (that is root-equivalent by design).

Loosening a default (``read_only=False``, ``user="0:0"``, larger limits, ``cap_add``...) is an
explicit keyword of :class:`ContainerHardening` and is logged at WARNING level when the policy is built.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ContainerHardening", "LABEL_PREFIX", "SUPERVISOR_CAPS", "owner_labels", "audit", "process_start_time"]

log = logging.getLogger(__name__)

LABEL_PREFIX = "org.sopgym"
MANAGED = f"{LABEL_PREFIX}.managed"
OWNER_HOST = f"{LABEL_PREFIX}.owner.host"
OWNER_PID = f"{LABEL_PREFIX}.owner.pid"
OWNER_START = f"{LABEL_PREFIX}.owner.start"
SESSION = f"{LABEL_PREFIX}.session"
EXPIRES = f"{LABEL_PREFIX}.expires"
ROLE = f"{LABEL_PREFIX}.role"

_NON_ROOT = "65534:65534"
_AGENT = "65533:65533"
#: The capabilities of a runner container's root supervisor (and of nothing else in it): start the
#: server and agent code under their own uids, SIGKILL the agent's processes, clear the capability
#: bounding set of what it starts. CAP_SYS_RESOURCE is deliberately absent (not every daemon grants it).
SUPERVISOR_CAPS = ("SETUID", "SETGID", "KILL", "SETPCAP")
#: Environment variables that tell the server in a runner container which uids to use.
SERVER_USER_ENV = "SOPGYM_SERVER_USER"
AGENT_USER_ENV = "SOPGYM_AGENT_USER"


def process_start_time(pid: int) -> str:
    """Start time of a process in clock ticks since boot ('' if it does not exist): tells a live
    owner from a recycled pid."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


@dataclass(frozen=True)
class ContainerHardening:
    """Hardening and limits of one sandbox container.

    Args:
        mem_limit: memory limit (swap included: no swap). A memory bomb is OOM-killed inside.
            Larger values allow bigger pandas frames; smaller ones pack more containers per host.
        pids_limit: max processes+threads in the container. Bounds a fork bomb; too low breaks
            multi-threaded libraries (numpy/BLAS start one thread per core).
        cpus: CPU share (fractional cores). A spinning agent slows itself, not the host.
        tmpfs_size: size of the writable ``/tmp`` (counts against ``mem_limit``).
        user: ``uid:gid`` of the tool server inside the container. Non-root by default.
        agent_user: ``uid:gid`` that agent code (``run_python``/``run_sql``) runs as in runner
            containers. Must differ from ``user``: agent code sharing the server's uid could signal,
            trace and read it.
        read_only: read-only root filesystem.
        no_new_privileges: forbid privilege gain through setuid/setcap binaries.
        cap_add: capabilities to give back after dropping all (loosening; logged).
        ttl_s: expiry written into the labels; the reaper removes containers past it even when the
            owner still lives. Long training runs should set it above their duration.
        runtime: OCI runtime (``None`` = daemon default; ``"runsc"`` for gVisor).
    """

    mem_limit: str = "512m"
    pids_limit: int = 128
    cpus: float = 1.0
    tmpfs_size: str = "64m"
    user: str = _NON_ROOT
    agent_user: str = _AGENT
    read_only: bool = True
    no_new_privileges: bool = True
    cap_add: tuple[str, ...] = ()
    ttl_s: float = 24 * 3600.0
    runtime: str | None = None
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pids_limit < 8:
            raise ValueError(f"pids_limit must be >= 8 (server + child + init), got {self.pids_limit}")
        if not 0 < self.cpus <= (os.cpu_count() or 1):
            raise ValueError(f"cpus must be in (0, {os.cpu_count()}], got {self.cpus}")
        if self.ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {self.ttl_s}")
        for name in ("user", "agent_user"):
            value = getattr(self, name)
            if not _is_ids(value):
                raise ValueError(f"{name} must be numeric 'uid:gid' like '65534:65534', got {value!r}")
        if self.agent_user.split(":")[0] == self.user.split(":")[0]:
            raise ValueError(
                f"agent_user must have another uid than user (got {self.agent_user!r} and {self.user!r}): "
                "agent code running as the tool server's uid could signal, trace and read it"
            )
        for warning in self.loosenings():
            log.warning("sandbox policy loosened: %s", warning)

    def loosenings(self) -> list[str]:
        """Human-readable list of every default that this policy loosens (empty = fully hardened)."""
        out = []
        if self.user.split(":")[0] == "0":
            out.append(f"user={self.user!r} runs the tool server as root inside the container")
        if self.agent_user.split(":")[0] == "0":
            out.append(f"agent_user={self.agent_user!r} runs agent code as root inside the container")
        if not self.read_only:
            out.append("read_only=False: the root filesystem is writable")
        if not self.no_new_privileges:
            out.append("no_new_privileges=False: setuid binaries can gain privileges")
        if self.cap_add:
            out.append(f"cap_add={list(self.cap_add)}: capabilities given back (to the processes that start as root)")
        if _bytes(self.mem_limit) > _bytes(ContainerHardening.mem_limit):
            out.append(f"mem_limit={self.mem_limit} above the default {ContainerHardening.mem_limit}")
        if self.pids_limit > ContainerHardening.pids_limit:
            out.append(f"pids_limit={self.pids_limit} above the default {ContainerHardening.pids_limit}")
        if _bytes(self.tmpfs_size) > _bytes(ContainerHardening.tmpfs_size):
            out.append(f"tmpfs_size={self.tmpfs_size} above the default {ContainerHardening.tmpfs_size}")
        return out

    def labels(self, role: str, session: str) -> dict[str, str]:
        labels = dict(self.extra_labels)
        labels.update(owner_labels(session))
        labels[ROLE] = role
        labels[EXPIRES] = str(int(time.time() + self.ttl_s))
        return labels

    def container_options(self, *, image: str, name: str, role: str, session: str, command: list[str]) -> dict[str, Any]:
        """Keyword arguments for ``docker.APIClient.create_container`` (host config included).

        A ``"runner"`` container starts as root with only :data:`SUPERVISOR_CAPS` (its supervisor
        drops to ``user`` for the server and to ``agent_user`` for agent code); any other role starts
        directly as ``user`` with no capabilities.
        """
        environment = {"PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp", "LANG": "C.UTF-8"}
        if role == "runner":
            user = "0:0"
            cap_add = [*SUPERVISOR_CAPS, *(c for c in self.cap_add if c not in SUPERVISOR_CAPS)]
            environment[SERVER_USER_ENV] = self.user
            environment[AGENT_USER_ENV] = self.agent_user
        else:
            user = self.user
            cap_add = list(self.cap_add)
        host_config = {
            "NetworkMode": "none",
            "ReadonlyRootfs": self.read_only,
            "CapDrop": ["ALL"],
            "CapAdd": cap_add or None,
            "SecurityOpt": ["no-new-privileges:true"] if self.no_new_privileges else [],
            "PidsLimit": self.pids_limit,
            "Memory": _bytes(self.mem_limit),
            "MemorySwap": _bytes(self.mem_limit),  # equal to Memory: no swap
            "NanoCpus": int(self.cpus * 1e9),
            "Tmpfs": {"/tmp": f"rw,noexec,nosuid,nodev,size={self.tmpfs_size},mode=1777"},
            "Init": True,
            "IpcMode": "private",
            # A container that ends (its channel closed: we closed it or its owner died) is removed by
            # the daemon at once, not left Exited for the reaper.
            "AutoRemove": True,
            "Ulimits": [{"Name": "core", "Soft": 0, "Hard": 0}],
        }
        if self.runtime:
            host_config["Runtime"] = self.runtime
        return {
            "image": image,
            "name": name,
            "command": command,
            "user": user,
            "labels": self.labels(role, session),
            "stdin_open": True,
            # Closing our attach stream (or our process dying) gives the server EOF: it exits and
            # the container stops by itself.
            "stdin_once": True,
            "tty": False,
            "network_disabled": True,
            "working_dir": "/tmp",
            "environment": environment,
            "host_config": host_config,
        }


def owner_labels(session: str) -> dict[str, str]:
    pid = os.getpid()
    return {
        MANAGED: "1",
        OWNER_HOST: socket.gethostname(),
        OWNER_PID: str(pid),
        OWNER_START: process_start_time(pid),
        SESSION: session,
    }


def audit(inspect: Mapping[str, Any]) -> list[str]:
    """Problems with a container's ``docker inspect`` against the hardened defaults ([] = passes).

    Checks every hardening field that :meth:`ContainerHardening.container_options` sets, as the daemon
    reports it (so a daemon that silently ignored an option is caught).
    """
    hc = inspect.get("HostConfig", {})
    cfg = inspect.get("Config", {})
    problems = []

    def expect(what: str, ok: bool, actual: Any) -> None:
        if not ok:
            problems.append(f"{what}: got {actual!r}")

    expect("NetworkMode expected 'none'", hc.get("NetworkMode") == "none", hc.get("NetworkMode"))
    nets = (inspect.get("NetworkSettings") or {}).get("Networks") or {}
    expect("networks expected only 'none'", set(nets) <= {"none"}, sorted(nets))
    expect("ReadonlyRootfs expected True", hc.get("ReadonlyRootfs") is True, hc.get("ReadonlyRootfs"))
    expect("CapDrop expected ['ALL']", [c.upper() for c in hc.get("CapDrop") or []] == ["ALL"], hc.get("CapDrop"))
    expect(
        "SecurityOpt expected no-new-privileges",
        any(o.startswith("no-new-privileges") and not o.endswith("false") for o in hc.get("SecurityOpt") or []),
        hc.get("SecurityOpt"),
    )
    expect("Privileged expected False", hc.get("Privileged") is False, hc.get("Privileged"))
    labels = cfg.get("Labels") or {}
    user = cfg.get("User") or ""
    cap_add = sorted(c.upper().removeprefix("CAP_") for c in hc.get("CapAdd") or [])
    if labels.get(ROLE) == "runner":
        env = dict(item.split("=", 1) for item in cfg.get("Env") or [] if "=" in item)
        server, agent = env.get(SERVER_USER_ENV, ""), env.get(AGENT_USER_ENV, "")
        expect("User expected '0:0' (the supervisor drops to the server's and the agent's uids)", user == "0:0", user)
        expect(f"CapAdd expected exactly {sorted(SUPERVISOR_CAPS)}", cap_add == sorted(SUPERVISOR_CAPS), hc.get("CapAdd"))
        expect(f"{SERVER_USER_ENV} expected a non-root uid:gid", _is_ids(server) and not server.startswith("0:"), server)
        expect(
            f"{AGENT_USER_ENV} expected a non-root uid:gid other than the server's",
            _is_ids(agent) and not agent.startswith("0:") and agent.split(":")[0] != server.split(":")[0],
            agent,
        )
    else:
        expect("User expected non-root", _is_ids(user) and not user.startswith("0:"), user)
        expect("CapAdd expected empty", not cap_add, hc.get("CapAdd"))
    expect("PidsLimit expected > 0", (hc.get("PidsLimit") or 0) > 0, hc.get("PidsLimit"))
    expect("Memory expected > 0", (hc.get("Memory") or 0) > 0, hc.get("Memory"))
    expect("MemorySwap expected == Memory", hc.get("MemorySwap") == hc.get("Memory"), hc.get("MemorySwap"))
    expect("NanoCpus expected > 0", (hc.get("NanoCpus") or 0) > 0, hc.get("NanoCpus"))
    tmpfs = (hc.get("Tmpfs") or {}).get("/tmp", "")
    expect("Tmpfs /tmp expected size-capped", "size=" in tmpfs, hc.get("Tmpfs"))
    expect("Init expected True", hc.get("Init") is True, hc.get("Init"))
    expect("AutoRemove expected True", hc.get("AutoRemove") is True, hc.get("AutoRemove"))
    expect("no bind mounts expected", not hc.get("Binds") and not inspect.get("Mounts"), hc.get("Binds") or inspect.get("Mounts"))
    for key in (MANAGED, OWNER_HOST, OWNER_PID, OWNER_START, SESSION, EXPIRES, ROLE):
        expect(f"label {key} expected", bool(labels.get(key)), labels.get(key))
    return problems


def _is_ids(text: str) -> bool:
    """True for a numeric ``uid:gid``."""
    parts = text.split(":")
    return len(parts) == 2 and all(p.isdigit() for p in parts)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _bytes(size: str | int) -> int:
    if isinstance(size, int):
        return size
    text = size.strip().lower()
    unit = text[-1] if text[-1] in "bkmg" else ""
    number = text[: -1] if unit else text
    if not number.isdigit():
        raise ValueError(f"size must look like '512m', got {size!r}")
    return int(number) * _UNITS[unit]
