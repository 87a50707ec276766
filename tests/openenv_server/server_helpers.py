"""Helpers shared by the OpenEnv server tests (the fixtures are in this folder's conftest.py)."""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

NEEDED = ("openenv", "websockets", "uvicorn", "fastmcp")


MISSING = [m for m in NEEDED if importlib.util.find_spec(m) is None]


SKIP_REASON = (
    f"needs the 'server' extra ({', '.join(MISSING)} not installed): openenv's pins conflict with the main test "
    "environment's, so these tests run in `tox -e openenv` (.ci/run runs it after the main suite)")


if MISSING and os.environ.get("SOPGYM_REQUIRE_OPENENV") == "1":
    raise RuntimeError(f"SOPGYM_REQUIRE_OPENENV=1 but {MISSING} cannot be imported: the openenv test environment is broken")


HOST = "127.0.0.1"
#: The token of every test server (conftest puts it in SOPGYM_SERVE_TOKEN, where the clients read it).
TOKEN = "test-" + secrets.token_urlsafe(16)
#: The headers that present it (OpenEnv's clients and httpx take them explicitly).
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def verifiable(env_id: str) -> bool:
    from sopgym.sop_tasks.registry import get_pack

    return get_pack(env_id.rsplit("-v", 1)[0]).verifiable is not None


def env_kwargs(env_id: str) -> dict:
    """The env kwargs both the server and the local reference use (code runs in-process: no Docker here)."""
    return {"code_runner": "inprocess"} if verifiable(env_id) else {}


class InProcessServer:
    """``create_server_app`` under uvicorn in a thread, on a socket this test bound to 127.0.0.1; its
    token is :data:`TOKEN` unless ``token=`` says otherwise."""

    def __init__(self, env_id: str, env_args: tuple = (), **options):
        import uvicorn

        from sopgym.integrations.openenv_server import MAX_REQUEST_BYTES, create_server_app

        self.env_id = env_id
        options.setdefault("token", TOKEN)
        self.app = create_server_app(env_id, env_kwargs={**env_kwargs(env_id), **dict(env_args)}, **options)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{HOST}:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning",
                                                    ws_max_size=options.get("max_request_bytes", MAX_REQUEST_BYTES)))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server for {env_id} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def start_cli_server(env_id: str, *args: str, environ: dict[str, str] | None = None,
                     python: str | None = None) -> tuple[subprocess.Popen, str]:
    """``sopgym serve --env env_id`` as a child process on a free 127.0.0.1 port; returns it and its URL
    once ``/health`` answers. The child inherits this process's environment (SOPGYM_SERVE_TOKEN
    included), or ``environ``. It runs this interpreter and imports the same sopgym as this process, or
    runs ``python`` (another venv's, with the server's dependencies) on this checkout's sopgym."""
    import sopgym

    port = free_port()
    source = Path(sopgym.__file__).resolve().parents[1] if python is None else Path(__file__).resolve().parents[2]
    env = dict(os.environ if environ is None else environ, PYTHONPATH=str(source))
    proc = subprocess.Popen([python or sys.executable, "-m", "sopgym", "serve", "--env", env_id, "--host", HOST, "--port", str(port),
                             "--log-level", "warning", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://{HOST}:{port}"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never through a proxy
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sopgym serve exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            with direct.open(url + "/health", timeout=2) as answer:
                if answer.status == 200:
                    return proc, url
        except OSError:  # not listening yet (URLError and timeouts are OSErrors)
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("sopgym serve did not answer /health within 120 s")


def stderr_line(proc: subprocess.Popen, needle: str, timeout: float = 60) -> str:
    """The first line of ``proc``'s stderr that contains ``needle``, read within ``timeout`` seconds."""
    found: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            if needle in line:
                found.append(line)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not found:
        raise AssertionError(f"no line with {needle!r} on stderr within {timeout} s")
    return found[0]
