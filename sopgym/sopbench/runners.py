"""Tool runners: where a SOP-Bench domain's own ``tools.py`` executes.

* :class:`DockerToolRunner` (default): in a hardened runner container of
  :mod:`sopgym.sandboxes.docker` (no network, read-only root, limits), as its agent uid under its
  supervisor, like agent code, with the image's pinned pandas. Nothing is mounted: the domain's files
  (a few hundred KB) travel once, when the runner's warm worker starts in its container.
* :class:`SubprocessToolRunner` (``trust_tools_code=True``): the same warm worker as a local process
  with this Python; the code runs with your rights.
* :class:`InProcessToolRunner` (``trust_tools_code=True``): imports ``tools.py`` into this process
  (what upstream does); no isolation at all.

The Docker and subprocess runners keep one warm worker per runner (:mod:`.tool_server`): it imports
pandas and ``tools.py`` once, and every episode runs in a fresh fork of it with a fresh manager, so
a live call costs milliseconds (benchmarks/sopbench_tools.py) and nothing an episode does reaches
the next: memory dies with the fork, the worker's folder is put back (details in
:mod:`.tool_server`), and in Docker the supervisor empties every other place the agent uid can write.
:meth:`ToolRunner.new_episode` ends the current episode; calls before the next one run in the same
manager (as upstream keeps one manager across a task's calls).

pandas: SOP-Bench declares ``pandas>=2.0.0``. The sandbox image pins it (sopgym/sandboxes/docker/
requirements.txt); the unsandboxed runners use this interpreter's. Every runner checks its pandas is
inside upstream's range and reports the version (:attr:`ToolRunner.pandas_version`); envs put it in
``info["sopbench"]`` and recordings store it (a change is drift).

All three produce the same texts (tests hold them to it). Infrastructure failures raise
:class:`~sopgym.sandboxes.base.SandboxError`; a tool's own failure is a result, never an exception.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.resources
import json
import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sopgym.sandboxes.base import SandboxError, SandboxTimeout

from . import tool_server
from .loader import SopBenchDomain

if TYPE_CHECKING:  # the docker SDK is an optional dependency (extra `docker`)
    from sopgym.sandboxes.docker.pool import SandboxContainer

__all__ = [
    "ToolRunner", "DockerToolRunner", "SubprocessToolRunner", "InProcessToolRunner", "make_runner", "RUNNERS",
    "UPSTREAM_PANDAS", "check_pandas_version", "runner_pandas_version", "image_pandas_version", "host_pandas_version",
]

log = logging.getLogger(__name__)

RUNNERS = ("docker", "subprocess", "inprocess")
#: SOP-Bench's declared pandas requirement (its requirements.txt).
UPSTREAM_PANDAS = ">=2.0.0"
_SERVER = Path(tool_server.__file__)
#: Files larger than this are not shipped into the sandbox (tools read CSV/JSON beside them).
MAX_FILE_BYTES = 32 * 1024 * 1024
#: A tool answer longer than this is an infrastructure failure (the sandbox's output cap).
MAX_ANSWER_BYTES = 8 * 1024 * 1024


def check_pandas_version(version: str | None, where: str) -> str:
    """``version`` when it is inside SOP-Bench's declared range, else SandboxError.

    Raises:
        SandboxError: no pandas, or a version outside ``pandas>=2.0.0``.
    """
    match = re.match(r"(\d+)\.", version or "")
    if version is None or match is None or int(match.group(1)) < 2:
        raise SandboxError(
            f"{where} has pandas {version!r}; SOP-Bench's tools need pandas{UPSTREAM_PANDAS} (before 2.0 a CSV cell "
            "'None' is the string 'None', not a missing value)"
        )
    return version


def host_pandas_version() -> str | None:
    """This interpreter's pandas version (None when it is not installed)."""
    try:
        return importlib.metadata.version("pandas")
    except importlib.metadata.PackageNotFoundError:
        return None


def image_pandas_version() -> str:
    """The pandas version the sandbox image pins (``sopgym/sandboxes/docker/requirements.txt``)."""
    text = importlib.resources.files("sopgym.sandboxes").joinpath("docker").joinpath("requirements.txt").read_text("utf-8")
    match = re.search(r"^pandas==(\S+)", text, re.MULTILINE)
    assert match is not None, "sopgym/sandboxes/docker/requirements.txt must pin pandas"
    return match.group(1)


def runner_pandas_version(kind: str) -> str | None:
    """The pandas version that runner ``kind`` runs tools with (known without starting it)."""
    if kind not in RUNNERS:
        raise ValueError(f"tools runner must be one of {RUNNERS}, got {kind!r}")
    return image_pandas_version() if kind == "docker" else host_pandas_version()


class ToolRunner(ABC):
    """Runs calls against one domain's tools. Results are ``{"kind", "text", "exc_type"}`` dicts.

    Attributes:
        pandas_version: the pandas the tools run with (set when the runner has started).
    """

    def __init__(self, domain: SopBenchDomain) -> None:
        if not domain.has_tools:
            raise SandboxError(f"sopbench/{domain.name}: tools.py is missing from {domain.path}; only recorded calls can be answered")
        self.domain = domain
        self.tool_names = domain.tool_names
        self.pandas_version: str | None = None

    def call(self, name: str, args: Any) -> dict[str, Any]:
        return self.call_many([(name, args)])[0]

    @abstractmethod
    def call_many(self, calls: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
        """Run ``calls`` in order in the current episode's tools instance (one is started if needed)."""

    @abstractmethod
    def new_episode(self) -> None:
        """End the current episode: the next call runs in a fresh tools instance and fresh state."""

    def close(self) -> None:  # noqa: B027 - optional hook: the in-process runner holds nothing
        """Release resources. Safe to call twice."""


class InProcessToolRunner(ToolRunner):
    """Imports the domain's ``tools.py`` into this process. Only with ``trust_tools_code=True``.

    Each episode re-imports the module and builds a new manager, so module globals and the manager
    start fresh; but files the tools write (in your checkout) and process-wide changes they make
    (pandas options, other modules) persist: there is no isolation here.
    """

    def __init__(self, domain: SopBenchDomain) -> None:
        super().__init__(domain)
        self.pandas_version = check_pandas_version(host_pandas_version(), "this interpreter")
        self._manager = None

    def call_many(self, calls):
        if self._manager is None:
            try:
                self._manager = tool_server.load_manager(str(self.domain.path))
            except Exception as exc:  # noqa: BLE001 - any import failure of third-party code
                raise SandboxError(f"loading {self.domain.path}/tools.py failed: {type(exc).__name__}: {exc}") from exc
        return [tool_server.call_tool(self._manager, self.tool_names, n, a) for n, a in calls]

    def new_episode(self) -> None:
        self._manager = None


def domain_files(domain: SopBenchDomain) -> dict[str, str]:
    """The domain folder's regular files, base64-encoded (what the worker receives)."""
    files = {}
    for path in sorted(domain.path.iterdir()):
        if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
            files[path.name] = base64.b64encode(path.read_bytes()).decode("ascii")
    return files


class _WorkerRunner(ToolRunner):
    """A warm :func:`.tool_server.worker_main` process; subclasses provide the transport.

    Any infrastructure failure drops the worker (the next call starts a fresh one) and raises.
    """

    def __init__(self, domain: SopBenchDomain, *, timeout_s: float) -> None:
        super().__init__(domain)
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._ready = False
        self._in_episode = False
        #: Workers started over this runner's life (1 while nothing failed).
        self.num_workers_started = 0

    # -- transport -----------------------------------------------------------------------------
    @abstractmethod
    def _spawn(self) -> None:
        """Start the worker process."""

    @abstractmethod
    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request line, return the worker's answer (raises SandboxError/SandboxTimeout)."""

    @abstractmethod
    def _kill(self) -> None:
        """Stop the worker (its episode process too). Safe when none runs."""

    @property
    @abstractmethod
    def _expected_pandas(self) -> str | None:
        """The pandas version the worker must report (None: any inside upstream's range)."""

    def _between_episodes(self) -> None:  # noqa: B027 - optional hook: the Docker runner cleans
        """After an episode process ended (raise SandboxError when the next one cannot start clean)."""

    # -- protocol ------------------------------------------------------------------------------
    def _start(self) -> None:
        self._spawn()
        self.num_workers_started += 1
        ready = self._exchange({"domain": self.domain.path.name, "files": domain_files(self.domain),
                                "tool_names": self.tool_names})
        if not ready.get("ready"):
            raise SandboxError(f"loading tools.py of {self.domain.name} failed: {ready.get('error')}")
        where = f"the tools worker of {self.domain.name} ({type(self).__name__})"
        version = check_pandas_version(ready.get("pandas"), where)
        if self._expected_pandas is not None and version != self._expected_pandas:
            raise SandboxError(f"{where} has pandas {version}, expected {self._expected_pandas}; rebuild the sandbox image")
        self.pandas_version = version
        self._ready = True

    def call_many(self, calls):
        try:
            if not self._ready:
                self._start()
            if not self._in_episode:
                began = self._exchange({"op": "begin"})
                if not began.get("ready"):
                    raise SandboxError(f"instantiating the tools manager of {self.domain.name} failed: "
                                       f"{began.get('error') or began}")
                self._in_episode = True
            out = []
            for name, args in calls:
                answer = self._exchange({"op": "call", "name": name, "args": args})
                if "kind" not in answer:
                    raise SandboxError(self._unexpected(answer, name))
                out.append(answer)
            return out
        except SandboxError:
            self._drop()
            raise

    def _unexpected(self, answer: dict[str, Any], name: str) -> str:
        if answer.get("ended"):
            return (f"the tools process of {self.domain.name} exited with code {answer.get('exit_code')} during "
                    f"{name!r} (the tool called sys.exit, crashed or was killed)")
        return f"the tools worker of {self.domain.name} answered {answer!r} to {name!r}; expected a result"

    def new_episode(self) -> None:
        if not self._in_episode:
            return
        try:
            ended = self._exchange({"op": "end"})
            if not ended.get("ended") or ended.get("exit_code") != 0:
                raise SandboxError(f"ending an episode of {self.domain.name}: the worker answered {ended!r}")
            self._in_episode = False
            self._between_episodes()
        except SandboxError as exc:  # a fresh worker is a fresh episode too
            log.warning("tools worker of %s replaced: %s", self.domain.name, exc)
            self._drop()

    def _drop(self) -> None:
        self._ready = self._in_episode = False
        self._kill()

    def close(self) -> None:
        self._drop()


class SubprocessToolRunner(_WorkerRunner):
    """The warm worker as a local process (own session, own temporary folder). ``trust_tools_code=True`` only.

    Args:
        timeout_s: a request with no answer by then kills the worker and raises SandboxTimeout.
        python: interpreter (default: this one, whose pandas version is then required).
    """

    def __init__(self, domain: SopBenchDomain, *, timeout_s: float = 30.0, python: str | None = None) -> None:
        super().__init__(domain, timeout_s=timeout_s)
        self.python = python or sys.executable
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._workdir: str | None = None

    @property
    def _expected_pandas(self) -> str | None:
        return host_pandas_version() if self.python == sys.executable else None

    def _spawn(self) -> None:
        self._workdir = tempfile.mkdtemp(prefix=f"sopgym-tools-{self.domain.name}-")
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [self.python, "-I", str(_SERVER), "worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=self._workdir,
            start_new_session=True,
        )

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 2000))
        return self._stderr.read().decode("utf-8", "replace")

    def _exchange(self, message):
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        except BrokenPipeError as exc:
            raise SandboxError(f"the tools worker of {self.domain.name} died: {exc}; stderr: {self._stderr_tail()}") from exc
        deadline = time.monotonic() + self.timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SandboxTimeout(f"the tools worker of {self.domain.name} did not answer within {self.timeout_s} s")
                if not sel.select(timeout=remaining):
                    continue
                line = proc.stdout.readline().decode("utf-8")
                if not line:
                    raise SandboxError(f"the tools worker of {self.domain.name} exited (code {proc.poll()}) without "
                                       f"answering; stderr: {self._stderr_tail()}")
                if line.startswith(tool_server.MARKER):
                    return json.loads(line[len(tool_server.MARKER):])

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and its episode process
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def _tools_pool(image: str | None, hardening: Any):
    from sopgym.sandboxes.docker import ContainerHardening
    from sopgym.sandboxes.docker.errors import ImageMissing
    from sopgym.sandboxes.docker.image import image_exists, image_tag
    from sopgym.sandboxes.docker.pool import connect, shared_pool

    client = connect()
    image = image or image_tag()
    if not image_exists(image, client):
        raise ImageMissing(f"sandbox image {image} is not built on this daemon (expected the tag for this code's "
                           "content hash); run `sopgym sandbox build` or `bash scripts/docker_setup.sh`")
    return shared_pool(client, None, image, hardening or ContainerHardening(), "runner")


class DockerToolRunner(_WorkerRunner):
    """The warm worker inside a sandbox container (default). Needs the docker SDK, a daemon and the image.

    The runner holds one runner container while it lives; the container's supervisor starts the
    worker as the agent uid (``worker_*`` ops of sopgym/sandboxes/docker/server.py), enforces each
    request's deadline and, between episodes, empties every place the agent uid can write; the host
    kills the container if the server itself does not answer in time. A container that cannot be
    left clean (``tainted``) is replaced.

    Args:
        timeout_s: deadline of one request (the first one imports pandas and tools.py).
        pool: a runner-role :class:`sopgym.sandboxes.docker.ContainerPool` (default: the
            process-wide runner pool of the current image, fully hardened).
        grace_s: the server must answer within ``timeout_s + grace_s``.
    """

    def __init__(self, domain: SopBenchDomain, *, timeout_s: float = 60.0, pool: Any = None,
                 grace_s: float = 5.0) -> None:
        super().__init__(domain, timeout_s=timeout_s)
        try:
            self.pool = pool if pool is not None else _tools_pool(None, None)
        except ImportError as exc:
            raise SandboxError(f"the Docker tool runner needs the docker SDK: pip install 'sopgym[docker]' ({exc})") from exc
        if self.pool.role != "runner":
            raise ValueError(f"the tools worker runs third-party code: expected a pool of role 'runner', got {self.pool.role!r}")
        self.grace_s = grace_s
        self._box: SandboxContainer | None = None
        self._code = _SERVER.read_text(encoding="utf-8") + "\nsys.exit(worker_main())\n"

    @property
    def _expected_pandas(self) -> str | None:
        return image_pandas_version()

    @property
    def container_name(self) -> str | None:
        return self._box.name if self._box is not None else None

    def _request(self, op: str, **body: Any) -> dict[str, Any]:
        from sopgym.sandboxes.docker.errors import ChannelTimeout

        assert self._box is not None
        try:
            response = self._box.request(op, self.timeout_s + self.grace_s, **body)
        except ChannelTimeout:
            self._box.kill()
            raise
        if not response["ok"]:
            raise SandboxError(f"{op} failed inside the sandbox server of {self._box.name}: {response['error']}")
        return response

    def _spawn(self) -> None:
        for _ in range(2):  # a container that cannot be cleaned is replaced once
            if self._box is None or self._box.broken:
                self._release(discard=True)
                self._box = self.pool.acquire()
            if not self._request("worker_start", code=self._code)["tainted"]:
                return
            self._release(discard=True)
        raise SandboxError(f"no clean sandbox container for the tools of {self.domain.name}: two were tainted")

    def _between_episodes(self) -> None:
        cleaned = self._request("worker_clean")
        if cleaned["tainted"]:
            raise SandboxError(f"the sandbox of {self.domain.name} could not be emptied between episodes: {cleaned['left']}")

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        response = self._request("worker_call", line=json.dumps(message), timeout=self.timeout_s, cap=MAX_ANSWER_BYTES)
        line = response["line"]
        if response.get("tainted"):
            assert self._box is not None  # _request ran in it
            self._box.broken = True  # the worker is gone and the container could not be emptied
        if response["timed_out"]:
            raise SandboxTimeout(f"tools of {self.domain.name} did not answer within {self.timeout_s} s in the sandbox")
        if response["truncated"]:
            raise SandboxError(f"a tool answer of {self.domain.name} exceeded {MAX_ANSWER_BYTES} bytes")
        if line is None:
            raise SandboxError(f"the sandboxed tools worker of {self.domain.name} exited with code "
                               f"{response['exit_code']} without an answer; stderr: {response.get('stderr', '')[-2000:]}")
        if not line.startswith(tool_server.MARKER):
            raise SandboxError(f"the sandboxed tools worker of {self.domain.name} wrote {line[:200]!r}; expected a marked line")
        return json.loads(line[len(tool_server.MARKER):])

    def _kill(self) -> None:
        if self._box is None:
            return
        if self._box.broken:
            self._release(discard=True)
            return
        try:
            if self._request("worker_stop")["tainted"]:
                self._release(discard=True)
        except SandboxError:
            self._release(discard=True)

    def _release(self, *, discard: bool) -> None:
        box, self._box = self._box, None
        if box is None:
            return
        if discard or box.broken:
            self.pool.discard(box)
        else:
            self.pool.release(box)

    def close(self) -> None:
        super().close()  # stops the worker; the container stays warm in the pool
        self._release(discard=False)


def make_runner(kind: str, domain: SopBenchDomain, *, trust_tools_code: bool = False, **options: Any) -> ToolRunner:
    """A runner by name. ``subprocess`` and ``inprocess`` run third-party code unsandboxed and need
    ``trust_tools_code=True``.

    Raises:
        ValueError: unknown kind, or an unsandboxed kind without ``trust_tools_code=True``.
    """
    if kind not in RUNNERS:
        raise ValueError(f"tools runner must be one of {RUNNERS}, got {kind!r}")
    if kind != "docker" and not trust_tools_code:
        raise ValueError(
            f"tools runner {kind!r} runs the checkout's tools.py unsandboxed; pass trust_tools_code=True "
            "to allow it, or use the default 'docker'"
        )
    if kind == "docker":
        return DockerToolRunner(domain, **options)
    if kind == "subprocess":
        return SubprocessToolRunner(domain, **options)
    if options:
        raise ValueError(f"the in-process runner takes no options, got {sorted(options)}")
    return InProcessToolRunner(domain)
