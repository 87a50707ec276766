"""Docker stateful backend and Docker code runner (the stateful and verifiable tiers in containers).

:class:`DockerStatefulBackend` holds one warm container per env slot for its lifetime: an episode
reset sends the program (once per container) and the initial state over the container's channel,
and the server rebuilds its in-memory SQLite database: no container is recreated. Results equal
:class:`~sopgym.sandboxes.inprocess.InProcessBackend`'s on the same episode and calls.

:class:`DockerCodeRunner` runs agent Python or read-only SQL in pooled containers with a hard
deadline (enforced inside by the server, and outside by killing the container if the server itself
does not answer by ``timeout + grace_s``).

What this protects against: tool code and agent code touching the host, the network or other
episodes (see ``hardening.py`` for the container settings, ``server.py`` for what happens inside);
a dead or hung container stalling an env (typed :class:`SandboxError` subclasses within the call's
timeout; the container is replaced); agent code passing its own failure off as the infrastructure's
(it cannot reach the server; a run during which the container ran out of memory is the run's
result, ``exit_code=-9``, and so is a run that held the container's memory or processes at their
limit when the server stopped answering, ``timed_out``: not a :class:`SandboxError`); misuse (a backend driven from two threads at
once, or a forked child stepping its parent's episode) raising
:class:`~sopgym.sandboxes.base.SandboxMisuse` instead of corrupting a channel. The container only
ever receives a program's source and the initial state, never a task's answer. What it does not: a
tool's own bugs (they are the program's, and equal to in-process behaviour).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ..base import (
    CodeRunner,
    ExecResult,
    Outcome,
    SandboxMisuse,
    StatefulBackend,
    StatefulProgram,
    ToolResult,
    run_time,
)
from .errors import ChannelTimeout, ImageMissing, ProgramError, SandboxError
from .hardening import ContainerHardening
from .image import image_exists, image_tag
from .pool import ContainerPool, ResourceUse, SandboxContainer, connect, memory_events, resource_use, shared_pool

__all__ = ["DockerStatefulBackend", "DockerCodeRunner", "program_source"]

log = logging.getLogger(__name__)

_sources: dict[str, tuple[str, str]] = {}
_sources_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _sources_lock
    _sources_lock = threading.Lock()  # another thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def program_source(program: StatefulProgram) -> tuple[str, str]:
    """``(sha, source)`` of a stateful program's module, read from its file on the host."""
    with _sources_lock:
        hit = _sources.get(program.module)
        if hit is not None:
            return hit
    spec = importlib.util.find_spec(program.module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError(f"stateful program {program.module!r}: expected an importable .py module, found {spec}")
    with open(spec.origin, encoding="utf-8") as fh:
        source = fh.read()
    sha = hashlib.sha256(f"{program.module}\n{source}".encode()).hexdigest()[:16]
    with _sources_lock:
        _sources[program.module] = (sha, source)
    return sha, source


def _ensure_program(box: SandboxContainer, program: StatefulProgram, timeout: float) -> str:
    sha, source = program_source(program)
    if sha not in box.programs:
        response = box.request("program", timeout, sha=sha, module=program.module, source=source)
        if not response["ok"]:
            raise ProgramError(f"loading {program.module} in {box.name} failed: {response['error']}")
        box.programs.add(sha)
    return sha


def _pool_for(role: str, image: str | None, hardening: ContainerHardening | None, pool: ContainerPool | None,
              base_url: str | None, check_image: bool) -> ContainerPool:
    if pool is not None:
        if pool.role != role:  # a runner runs agent code under a supervisor; a stateful container has none
            raise ValueError(f"expected a pool of role {role!r} here, got one of role {pool.role!r}")
        return pool
    client = connect(base_url)
    image = image or image_tag()
    if check_image and not image_exists(image, client):
        raise ImageMissing(
            f"sandbox image {image} is not built on this daemon (expected the tag for this code's content hash); "
            "run `sopgym sandbox build` or `bash scripts/docker_setup.sh`"
        )
    return shared_pool(client, base_url, image, hardening or ContainerHardening(), role)


class DockerStatefulBackend(StatefulBackend):
    """Stateful tools in a hardened container (one per env slot, reused across episodes).

    One thread at a time: a call while another thread's call is in flight raises
    :class:`~sopgym.sandboxes.base.SandboxMisuse` (``close`` waits for it instead). After a fork, the
    child's copy forgets the parent's container: its ``start_episode`` starts a container of its own,
    and stepping the parent's episode raises :class:`~sopgym.sandboxes.base.SandboxMisuse`.

    Args:
        image: image tag (default: :func:`~sopgym.sandboxes.docker.image.image_tag`).
        hardening: container hardening and limits (default: fully hardened; ``hardening.py``).
        pool: container pool to draw from (default: the process-wide pool for these settings).
        base_url: Docker daemon URL (default: ``DOCKER_HOST`` or the local unix socket).
        call_timeout_s: a tool call with no answer by then raises :class:`ChannelTimeout`.
        load_timeout_s: deadline for an episode reset (program load + database build).
        keep_warm: on ``close`` return the container to the pool (True) or destroy it (False).

    Raises:
        DaemonUnreachable: the daemon did not answer.
        ImageMissing: the image is not built.
    """

    def __init__(self, *, image: str | None = None, hardening: ContainerHardening | None = None,
                 pool: ContainerPool | None = None, base_url: str | None = None, call_timeout_s: float = 5.0,
                 load_timeout_s: float = 30.0, keep_warm: bool = True) -> None:
        self.pool = _pool_for("stateful", image, hardening, pool, base_url, check_image=pool is None)
        self.call_timeout_s = call_timeout_s
        self.load_timeout_s = load_timeout_s
        self.keep_warm = keep_warm
        self._box: SandboxContainer | None = None
        self._loaded = False
        self._pid = os.getpid()
        self._busy = threading.Lock()
        self._busy_with = ""

    @property
    def container_name(self) -> str | None:
        return self._box.name if self._box is not None else None

    @contextlib.contextmanager
    def _exclusive(self, op: str, wait_s: float = 0.0) -> Iterator[None]:
        """Hold the backend for one operation; refuse (or, for ``wait_s`` > 0, wait for) another thread's."""
        if self._pid != os.getpid():  # a forked child: the parent's threads are not here
            self._pid, self._busy = os.getpid(), threading.Lock()
        acquired = self._busy.acquire(timeout=wait_s) if wait_s > 0 else self._busy.acquire(blocking=False)
        if not acquired:
            raise SandboxMisuse(
                f"DockerStatefulBackend ({self.container_name}): {op} from thread {threading.current_thread().name!r} "
                f"while {self._busy_with} is still running; one env's sandbox is driven by one thread at a time: "
                "give each thread its own env"
            )
        self._busy_with = f"{op} of thread {threading.current_thread().name!r}"
        try:
            yield
        finally:
            self._busy_with = ""
            self._busy.release()

    def _check_owned(self, op: str) -> None:
        if self._box is not None and self._box.inherited:
            raise SandboxMisuse(
                f"{op}: this episode was started in process {self._box.pid} and this is its forked child "
                f"{os.getpid()}; a forked process never drives its parent's container: call reset() in the child "
                "(it gets a container of its own)"
            )

    def _forget_inherited(self) -> None:
        if self._box is not None and self._box.inherited:
            self._box.channel.forget()
            self._box, self._loaded = None, False

    def start_episode(self, program: StatefulProgram, initial_state: Mapping[str, list]) -> None:
        with self._exclusive("start_episode"):
            self._forget_inherited()
            self._start_episode(program, initial_state)

    def _start_episode(self, program: StatefulProgram, initial_state: Mapping[str, list]) -> None:
        # A broken container is replaced; one retry covers a container that died while idle.
        for attempt in (0, 1):
            if self._box is None or self._box.broken:
                self._drop_box()
                self._box = self.pool.acquire()
            try:
                self._loaded = False
                sha = _ensure_program(self._box, program, self.load_timeout_s)
                response = self._box.request("load", self.load_timeout_s, sha=sha, state=initial_state)
                if not response["ok"]:
                    raise ProgramError(f"building the database of {program.module} failed: {response['error']}")
                self._loaded = True
                return
            except ProgramError:
                raise
            except SandboxError:
                if attempt == 1:
                    self._drop_box()
                    raise
                log.warning("sandbox container failed at reset; replacing it")

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        with self._exclusive(f"call {name!r}"):
            self._check_owned(f"call {name!r}")
            assert self._box is not None and self._loaded, "call before start_episode"
            try:
                response = self._box.request("call", self.call_timeout_s, name=name, args=dict(arguments))
            except SandboxError:
                self._drop_box()
                raise
        if not response["ok"]:
            raise ProgramError(f"tool {name!r} failed outside the tool itself: {response['error']}")
        return ToolResult(Outcome(response["outcome"]), content=response["content"], error=response["error"])

    def snapshot(self) -> dict[str, Any]:
        with self._exclusive("snapshot"):
            self._check_owned("snapshot")
            assert self._box is not None and self._loaded, "snapshot before start_episode"
            try:
                response = self._box.request("snapshot", self.call_timeout_s)
            except SandboxError:
                self._drop_box()
                raise
        if not response["ok"]:
            raise ProgramError(f"snapshot failed: {response['error']}")
        return response["snapshot"]

    def _drop_box(self) -> None:
        if self._box is not None:
            self.pool.discard(self._box)
        self._box = None
        self._loaded = False

    def close(self) -> None:
        with self._exclusive("close", wait_s=self.call_timeout_s + self.load_timeout_s):
            self._forget_inherited()
            self._close()

    def _close(self) -> None:
        box, self._box, self._loaded = self._box, None, False
        if box is None:
            return
        if not self.keep_warm or box.broken:
            self.pool.discard(box)
            return
        try:  # drop the episode's state before anyone else gets the container
            response = box.request("unload", self.call_timeout_s)
            if not response["ok"]:
                box.broken = True
        except SandboxError:
            pass
        self.pool.release(box)


class DockerCodeRunner(CodeRunner):
    """Runs agent Python / read-only SQL in pooled hardened containers with a hard deadline.

    Safe to use from several threads and after a fork: every run draws a container of its own from
    this process's pool. A run's own failures (its exit code, its deadline, the container running out
    of memory during it) are results; only the infrastructure's raise :class:`SandboxError`.

    Args:
        image, hardening, pool, base_url: as for :class:`DockerStatefulBackend`.
        output_cap_bytes: stdout and stderr are each cut at this many bytes (``truncated`` is set).
        grace_s: the server must answer within ``timeout_s + grace_s``, else the container is killed
            and :class:`ChannelTimeout` raised (the server's own deadline normally fires first).
    """

    def __init__(self, *, image: str | None = None, hardening: ContainerHardening | None = None,
                 pool: ContainerPool | None = None, base_url: str | None = None,
                 output_cap_bytes: int = 64 * 1024, grace_s: float = 5.0) -> None:
        self.pool = _pool_for("runner", image, hardening, pool, base_url, check_image=pool is None)
        self.output_cap_bytes = output_cap_bytes
        self.grace_s = grace_s
        self._closed = False

    def _run(self, op: str, timeout_s: float, deadline: float | None, program: StatefulProgram | None = None,
             **body: Any) -> ExecResult:
        if self._closed:
            raise SandboxError("DockerCodeRunner is closed; expected an open runner")
        run_time(timeout_s, None)  # a bad timeout_s is refused before a container is drawn
        box = self.pool.acquire()
        started = time.time()
        try:
            if program is not None:
                body["sha"] = _ensure_program(box, program, 30.0)
            budget_s = run_time(timeout_s, deadline)  # drawing the container and loading the program took from it
            if budget_s is None:
                self.pool.release(box)
                return ExecResult.not_started()
            response = box.request(op, budget_s + self.grace_s, timeout=budget_s, cap=self.output_cap_bytes, **body)
        except ChannelTimeout as exc:
            # Asked before our own kill: what the run left the container with, then the daemon's events.
            use = resource_use(box.client, box.id)
            result = self._exhausted_by_the_run(box, started, timed_out=True, use=use)
            box.kill()
            self.pool.discard(box)
            if result is not None:
                return result
            raise ChannelTimeout(f"{exc}; the container then held {use or 'no stats (the daemon gave none)'}") from exc
        except SandboxError:
            result = self._exhausted_by_the_run(box, started)
            self.pool.discard(box)
            if result is not None:
                return result
            raise
        if not response["ok"]:
            result = self._exhausted_by_the_run(box, started)
            self.pool.discard(box)
            if result is not None:
                return result
            raise SandboxError(f"{op} failed inside the sandbox server: {response['error']}")
        if response.get("tainted"):  # the run's result stands; the container does not serve another
            log.warning("%s: the run left something that could not be emptied; replacing the container", box.name)
            self.pool.discard(box)
        else:
            self.pool.release(box)
        return ExecResult.from_dict(response)

    def _exhausted_by_the_run(self, box: SandboxContainer, since: float, *, timed_out: bool = False,
                       use: ResourceUse | None = None) -> ExecResult | None:
        """The run's own result when the container ran out of memory during it, or (``timed_out``) its
        server stopped answering while the run held the container's memory or processes at their limit
        (``use``, sampled at the timeout): the agent's doing, since nothing else in a runner container
        grows. In the second case the kernel stalls every process there reclaiming, the supervisor and
        the server included, and may never call its OOM killer (pipe buffers and other kernel memory).
        None (an infrastructure failure) otherwise, and whenever the daemon saw the container killed,
        stopped or paused from outside."""
        seen = memory_events(box.client, box.id, since)
        if seen == "outside":
            return None
        limit = self.pool.hardening.mem_limit
        if seen == "oom":
            log.info("%s ran out of memory during a run: the run's fault, not the infrastructure's", box.name)
            return ExecResult(
                exit_code=None if timed_out else -9,
                stdout="",
                stderr=f"MemoryError: the program exhausted the sandbox's memory ({limit}); it was killed and the sandbox reset",
                timed_out=timed_out,
            )
        why = use.exhausted if use is not None else None
        if why is None:
            return None
        log.info("%s stopped answering with its %s: the run's fault, not the infrastructure's", box.name, why)
        return ExecResult(
            exit_code=None,
            stdout="",
            stderr=f"TimeoutError: the program overwhelmed the sandbox ({why}: {use}); it was killed and the sandbox reset",
            timed_out=True,
        )

    def run_python(self, code: str, *, timeout_s: float = 5.0, stdin: str = "", deadline: float | None = None) -> ExecResult:
        return self._run("run_python", timeout_s, deadline, code=code, stdin=stdin)

    def run_sql(self, query: str, *, program: StatefulProgram, initial_state: Mapping[str, list],
                timeout_s: float = 5.0, deadline: float | None = None) -> ExecResult:
        return self._run("run_sql", timeout_s, deadline, program=program, query=query, state=dict(initial_state))

    def close(self) -> None:
        self._closed = True
