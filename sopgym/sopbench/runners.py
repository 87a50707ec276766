"""Tool runners: where a SOP-Bench domain's own ``tools.py`` executes.

* :class:`DockerToolRunner` (default): in the hardened sandbox container of
  :mod:`sopgym.sandboxes.docker` (no network, read-only root, no capabilities, limits). Nothing is
  mounted: each request ships the domain's files (a few hundred KB) and the calls to
  ``tool_server.batch_main`` through the sandbox's ``run_python``, which runs them in one child
  process with a hard deadline. A call costs one process start plus pandas' import (about a second),
  which is why recordings exist; a batch of calls costs the same.
* :class:`SubprocessToolRunner` (``trust_tools_code=True``): a persistent local worker process with
  this Python; fast, but the code runs with your rights.
* :class:`InProcessToolRunner` (``trust_tools_code=True``): imports ``tools.py`` into this process
  (what upstream does); fastest, no isolation at all.

All three produce the same texts (tests hold them to it). Infrastructure failures raise
:class:`~sopgym.sandboxes.base.SandboxError`; a tool's own failure is a result, never an exception.
"""

from __future__ import annotations

import base64
import json
import selectors
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sopgym.sandboxes.base import SandboxError, SandboxTimeout

from . import tool_server
from .loader import SopBenchDomain

__all__ = ["ToolRunner", "DockerToolRunner", "SubprocessToolRunner", "InProcessToolRunner", "make_runner", "RUNNERS"]

RUNNERS = ("docker", "subprocess", "inprocess")
_SERVER = Path(tool_server.__file__)
#: Files larger than this are not shipped into the sandbox (tools read CSV/JSON beside them).
MAX_FILE_BYTES = 32 * 1024 * 1024


class ToolRunner(ABC):
    """Runs calls against one domain's tools. Results are ``{"kind", "text", "exc_type"}`` dicts."""

    def __init__(self, domain: SopBenchDomain) -> None:
        if not domain.has_tools:
            raise SandboxError(f"sopbench/{domain.name}: tools.py is missing from {domain.path}; only recorded calls can be answered")
        self.domain = domain
        self.tool_names = domain.tool_names

    def call(self, name: str, args: Any) -> dict[str, Any]:
        return self.call_many([(name, args)])[0]

    @abstractmethod
    def call_many(self, calls: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
        """Run ``calls`` in order in one tools instance."""

    def close(self) -> None:  # noqa: B027 - optional hook: most runners hold nothing
        """Release resources. Safe to call twice."""


class InProcessToolRunner(ToolRunner):
    """Imports the domain's ``tools.py`` into this process. Only with ``trust_tools_code=True``."""

    def __init__(self, domain: SopBenchDomain) -> None:
        super().__init__(domain)
        self._manager = None

    def call_many(self, calls):
        if self._manager is None:
            try:
                self._manager = tool_server.load_manager(str(self.domain.path))
            except Exception as exc:  # noqa: BLE001 - any import failure of third-party code
                raise SandboxError(f"loading {self.domain.path}/tools.py failed: {type(exc).__name__}: {exc}") from exc
        return [tool_server.call_tool(self._manager, self.tool_names, n, a) for n, a in calls]


class SubprocessToolRunner(ToolRunner):
    """A persistent worker (``tool_server.py serve``) with this interpreter. ``trust_tools_code=True`` only.

    Args:
        timeout_s: a call with no answer by then kills the worker and raises SandboxTimeout.
    """

    def __init__(self, domain: SopBenchDomain, *, timeout_s: float = 30.0, python: str | None = None) -> None:
        super().__init__(domain)
        self.timeout_s = timeout_s
        self.python = python or sys.executable
        self._proc: subprocess.Popen | None = None
        self._stderr = None

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [self.python, "-I", str(_SERVER), "serve", str(self.domain.path), json.dumps(self.tool_names)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=str(self.domain.path),
        )
        ready = self._read()
        if not ready.get("ready"):
            self.close()
            raise SandboxError(f"loading {self.domain.path}/tools.py failed: {ready.get('error')}")

    def _read(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + self.timeout_s
        sel = selectors.DefaultSelector()
        sel.register(self._proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.close()
                    raise SandboxTimeout(f"the tools worker for {self.domain.name} did not answer within {self.timeout_s} s")
                if not sel.select(timeout=remaining):
                    continue
                line = self._proc.stdout.readline().decode("utf-8")
                if not line:
                    code = self._proc.poll()
                    self.close()
                    raise SandboxError(f"the tools worker for {self.domain.name} exited (code {code}) without answering")
                if line.startswith(tool_server.MARKER):
                    return json.loads(line[len(tool_server.MARKER):])
        finally:
            sel.close()

    def call_many(self, calls):
        out = []
        for name, args in calls:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write((json.dumps({"name": name, "args": args}) + "\n").encode())
                self._proc.stdin.flush()
            except BrokenPipeError as exc:
                self.close()
                raise SandboxError(f"the tools worker for {self.domain.name} died: {exc}") from exc
            out.append(self._read())
        return out

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def domain_files(domain: SopBenchDomain) -> dict[str, str]:
    """The domain folder's regular files, base64-encoded (what the sandbox receives)."""
    files = {}
    for path in sorted(domain.path.iterdir()):
        if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
            files[path.name] = base64.b64encode(path.read_bytes()).decode("ascii")
    return files


class DockerToolRunner(ToolRunner):
    """Runs the tools inside the Docker sandbox (default). Needs the docker SDK, a daemon and the image.

    Args:
        timeout_s: deadline of one request (process start, pandas import, the calls).
        code_runner: a :class:`sopgym.sandboxes.docker.DockerCodeRunner` (default: a new one with
            an output cap large enough for tool results).
    """

    def __init__(self, domain: SopBenchDomain, *, timeout_s: float = 60.0, code_runner: Any = None) -> None:
        super().__init__(domain)
        self.timeout_s = timeout_s
        if code_runner is None:
            try:
                from sopgym.sandboxes.docker import DockerCodeRunner
            except ImportError as exc:
                raise SandboxError(f"the Docker tool runner needs the docker SDK: pip install 'sopgym[docker]' ({exc})") from exc
            code_runner = DockerCodeRunner(output_cap_bytes=8 * 1024 * 1024)
        self._runner = code_runner
        self._files = domain_files(domain)
        self._code = _SERVER.read_text(encoding="utf-8") + "\nsys.exit(batch_main())\n"

    def call_many(self, calls):
        payload = {
            "domain": self.domain.path.name,
            "files": self._files,
            "tool_names": self.tool_names,
            "calls": [{"name": n, "args": a} for n, a in calls],
        }
        result = self._runner.run_python(self._code, timeout_s=self.timeout_s, stdin=json.dumps(payload))
        if result.timed_out:
            raise SandboxTimeout(f"tools of {self.domain.name} did not finish within {self.timeout_s} s in the sandbox")
        if result.truncated:
            raise SandboxError(f"tool output of {self.domain.name} exceeded the sandbox's output cap")
        lines = [ln for ln in result.stdout.splitlines() if ln.startswith(tool_server.MARKER)]
        if not lines:
            raise SandboxError(
                f"the sandboxed tools of {self.domain.name} exited with code {result.exit_code} without an answer; "
                f"stderr: {result.stderr[-2000:]}"
            )
        body = json.loads(lines[-1][len(tool_server.MARKER):])
        if not body.get("ready"):
            raise SandboxError(f"loading tools.py of {self.domain.name} in the sandbox failed: {body.get('error')}")
        return body["results"]

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None


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


