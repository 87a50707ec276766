"""In-process fallback for the verifiable tier: agent code in a local subprocess with rlimits.

An explicit, documented fallback for hosts without Docker (``make_code_runner("inprocess")``); the
Docker runner is the real sandbox.

What it protects against: runaway resource use by the agent's code: a hard wall-clock deadline
(the child's session is SIGKILLed, so a SIGTERM trap does not help), address-space, CPU-time,
file-size, open-file and core-dump rlimits set before the code runs (soft = hard, so the code cannot
raise them), output capped at ``output_cap_bytes``, a fresh empty working directory per run that
is deleted afterwards, an environment reduced to PATH/HOME/LANG, and ``python -I`` (no user site,
no PYTHON* variables). SQL runs read-only (``PRAGMA query_only``) on a fresh database.

What it does NOT protect against: the code runs as *your user on your host*. It can read every file
you can read, use the network, signal your other processes, and a fork bomb is bounded only by
``RLIMIT_NPROC`` of your whole user (not set here: it would also limit your other processes).
Daemonised grandchildren that leave the session survive the deadline. Use the Docker runner for
anything untrusted.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import CodeRunner, ExecResult, StatefulProgram, run_time

__all__ = ["LocalCodeRunner"]

_SERVER = Path(__file__).resolve().parent / "docker" / "server.py"

_PRELUDE = """import resource as _r
for _name, _value in {limits!r}:
    _r.setrlimit(getattr(_r, _name), (_value, _value))
del _r, _name, _value
"""


def _server_module():
    """The sandbox server's helpers (stdlib only), loaded by path: no docker SDK needed."""
    spec = importlib.util.spec_from_file_location("_sopgym_sandbox_server", _SERVER)
    assert spec is not None and spec.loader is not None, f"{_SERVER} does not load as a module"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LocalCodeRunner(CodeRunner):
    """Runs agent code in a local subprocess with resource limits (see the module docstring).

    Args:
        memory_bytes: address-space limit (RLIMIT_AS) of the child.
        cpu_seconds: CPU-time limit (RLIMIT_CPU); the wall-clock deadline is ``timeout_s`` per call.
        file_bytes: largest file the child may write (RLIMIT_FSIZE).
        open_files: RLIMIT_NOFILE.
        output_cap_bytes: stdout and stderr are each cut at this size (``truncated`` is set).
    """

    def __init__(self, *, memory_bytes: int = 1 << 30, cpu_seconds: int = 30, file_bytes: int = 16 << 20,
                 open_files: int = 64, output_cap_bytes: int = 64 * 1024) -> None:
        for name, value in (("memory_bytes", memory_bytes), ("cpu_seconds", cpu_seconds), ("file_bytes", file_bytes),
                            ("open_files", open_files), ("output_cap_bytes", output_cap_bytes)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.limits = (
            ("RLIMIT_AS", memory_bytes),
            ("RLIMIT_CPU", cpu_seconds),
            ("RLIMIT_FSIZE", file_bytes),
            ("RLIMIT_NOFILE", open_files),
            ("RLIMIT_CORE", 0),
        )
        self.output_cap_bytes = output_cap_bytes
        self._server = _server_module()

    def _run(self, argv_tail: list[str], stdin: bytes, timeout_s: float, deadline: float | None,
             code: bytes | None = None) -> ExecResult:
        budget_s = run_time(timeout_s, deadline)
        if budget_s is None:
            return ExecResult.not_started()
        work = tempfile.mkdtemp(prefix="sopgym-run-")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8"}
        try:
            result = self._server.run_child(
                [sys.executable, "-I", *argv_tail], stdin, budget_s, self.output_cap_bytes, self._server.kill_session,
                env, work, code=code,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return ExecResult.from_dict(result)

    def run_python(self, code: str, *, timeout_s: float = 5.0, stdin: str = "", deadline: float | None = None) -> ExecResult:
        # The program arrives on a pipe ({code_fd}), not in argv: no NUL or argument-size limit applies.
        wrapper = _PRELUDE.format(limits=self.limits) + (
            "exec(compile(open({code_fd}, 'rb').read(), '<agent>', 'exec'), {'__name__': '__main__'})\n"
        )
        encode = self._server.encode
        return self._run(["-c", wrapper], encode(stdin), timeout_s, deadline, code=encode(code))

    def run_sql(self, query: str, *, program: StatefulProgram, initial_state: Mapping[str, list],
                timeout_s: float = 5.0, deadline: float | None = None) -> ExecResult:
        spec = importlib.util.find_spec(program.module)
        if spec is None or spec.origin is None:
            raise ValueError(f"stateful program {program.module!r} is not importable")
        payload: dict[str, Any] = {
            "module": program.module,
            "source": Path(spec.origin).read_text(encoding="utf-8"),
            "state": dict(initial_state),
            "query": query,
        }
        wrapper = _PRELUDE.format(limits=self.limits) + (
            f"import runpy, sys\nsys.argv = [{str(_SERVER)!r}, '--sql-job']\nrunpy.run_path({str(_SERVER)!r}, run_name='__main__')\n"
        )
        return self._run(["-c", wrapper], json.dumps(payload).encode(), timeout_s, deadline)

    def close(self) -> None:
        pass


