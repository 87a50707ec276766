"""Start and stop a local server (``transformers serve``; :class:`LocalServer` for others) on the loopback interface: a real OpenAI-compatible server
for tests, demos and benchmarks (``pip install 'sopgym[serve-local]'``).

The server runs in its own process group, listens on ``127.0.0.1`` only, and is stopped on exit
(SIGTERM, then SIGKILL after ``stop_timeout_s``), so a test or a benchmark leaves nothing behind.

Example:
    >>> with TransformersServe(threads=1) as server:  # doctest: +SKIP
    ...     print(server.base_url)                      # http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["LocalServer", "TransformersServe", "free_port"]

_LAUNCH = "import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; sys.exit(main())"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """A server in a child process on 127.0.0.1: started, waited for, stopped (its own process group).

    Subclasses say what to run (:meth:`command`), its name in errors (``name``) and the path that
    answers 200 once it is ready (``health_path``).

    Args:
        port: the port (None: a free one).
        threads: ``OMP_NUM_THREADS`` of the server (None: inherited). On a loaded machine one thread
            decodes several times faster than two.
        log: where the server's output goes (a path; None: discarded).
        start_timeout_s: how long to wait for ``GET health_path``.
        stop_timeout_s: how long SIGTERM gets before SIGKILL.
        extra_args: more options for the server's command line.

    Raises:
        RuntimeError: the server exited or did not answer in time (its log's tail included).
    """

    name = "server"
    health_path = "/health"

    def __init__(self, port: int | None = None, *, threads: int | None = None, log: str | os.PathLike | None = None,
                 start_timeout_s: float = 180.0, stop_timeout_s: float = 15.0, extra_args: list[str] | None = None):
        self.port = port or free_port()
        self.threads, self.log = threads, log
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.extra_args = list(extra_args or [])
        self.process: subprocess.Popen | None = None
        self._log_file: IO[Any] | None = None

    def command(self) -> list[str]:
        """The server's command line, listening on 127.0.0.1:``port`` (``extra_args`` included)."""
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> Self:
        env = dict(os.environ)
        if self.threads is not None:
            env["OMP_NUM_THREADS"] = str(self.threads)
        if self.log is not None:
            Path(self.log).parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        out = self._log_file if self._log_file is not None else subprocess.DEVNULL
        self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                self.stop()
                raise RuntimeError(f"{self.name} exited with code {code} before answering{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.health_path}", timeout=5) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer {self.health_path} within {self.start_timeout_s:.0f} s"
                           f"{self._log_tail()}")

    def _log_tail(self) -> str:
        if self.log is None or not Path(self.log).exists():
            return ""
        return "; log tail:\n" + Path(self.log).read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        """SIGTERM to the server's process group, then SIGKILL if it is still there."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=self.stop_timeout_s)
            except ProcessLookupError:
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class TransformersServe(LocalServer):
    """``transformers serve`` in a child process (:class:`LocalServer`'s arguments; ``extra_args``:
    more ``transformers serve`` options)."""

    name = "transformers serve"

    def command(self) -> list[str]:
        return [sys.executable, "-c", _LAUNCH, "serve", "--host", "127.0.0.1", "--port", str(self.port), *self.extra_args]
