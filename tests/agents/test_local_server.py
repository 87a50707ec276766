"""sopgym.agents.local_server.LocalServer: the one start/wait/stop of a loopback server in a child process
(TransformersServe and the benchmark's llama.cpp server are its subclasses; the real model:
tests/agents/test_real_model.py). Driven here with the stdlib's http.server, a real server."""

from __future__ import annotations

import sys
import urllib.request

import pytest

from sopgym.agents.local_server import LocalServer, TransformersServe


class _HttpServer(LocalServer):
    name, health_path = "http.server", "/"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.port), *self.extra_args]


class _Exits(LocalServer):
    name = "exits"

    def command(self) -> list[str]:
        return [sys.executable, "-c", "print('no port for you'); raise SystemExit(3)"]


def test_a_started_server_answers_on_loopback_until_stopped(tmp_path):
    with _HttpServer(log=tmp_path / "log", start_timeout_s=30) as server:
        pid = server.process.pid
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=5) as response:
            assert response.status == 200
    assert server.process is None
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=2)
    with pytest.raises(ProcessLookupError):
        import os
        os.kill(pid, 0)


def test_a_server_that_exits_first_is_an_error_with_its_name_code_and_log(tmp_path):
    with pytest.raises(RuntimeError, match=r"exits exited with code 3 before answering; log tail:\n.*no port for you"):
        _Exits(log=tmp_path / "log", start_timeout_s=30).start()


def test_transformers_serve_runs_transformers_serve_on_loopback():
    server = TransformersServe(port=8123, extra_args=["--log-level", "info"])
    command = server.command()
    assert command[0] == sys.executable and "transformers.cli.transformers" in command[2]
    assert command[3:] == ["serve", "--host", "127.0.0.1", "--port", "8123", "--log-level", "info"]
    assert server.base_url == "http://127.0.0.1:8123/v1" and server.health_path == "/health"
