"""Servers for the OpenEnv tests: ``sopgym serve``'s app on 127.0.0.1 only, in this process or as a CLI subprocess.

These tests need the ``server`` extra (openenv, websockets, uvicorn). Its pins conflict with the main
test environment's (openenv requires gradio, which caps pillow below the main env's), so they run in
their own tox environment, ``tox -e openenv``, which ``.ci/run`` runs after the main suite with
``SOPGYM_REQUIRE_OPENENV=1``: there a missing install fails the run instead of skipping.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

NEEDED = ("openenv", "websockets", "uvicorn", "fastmcp")
MISSING = [m for m in NEEDED if importlib.util.find_spec(m) is None]
SKIP_REASON = (
    f"needs the 'server' extra ({', '.join(MISSING)} not installed): openenv's pins conflict with the main test "
    "environment's, so these tests run in `tox -e openenv` (.ci/run runs it after the main suite)")

if MISSING and os.environ.get("SOPGYM_REQUIRE_OPENENV") == "1":
    raise RuntimeError(f"SOPGYM_REQUIRE_OPENENV=1 but {MISSING} cannot be imported: the openenv test environment is broken")

HOST = "127.0.0.1"


def verifiable(env_id: str) -> bool:
    from sopgym.sop_tasks.registry import get_pack

    return get_pack(env_id.rsplit("-v", 1)[0]).verifiable is not None


def env_kwargs(env_id: str) -> dict:
    """The env kwargs both the server and the local reference use (code runs in-process: no Docker here)."""
    return {"code_runner": "inprocess"} if verifiable(env_id) else {}


class InProcessServer:
    """``create_server_app`` under uvicorn in a thread, on a socket this test bound to 127.0.0.1."""

    def __init__(self, env_id: str, env_args: tuple = (), **options):
        import uvicorn

        from sopgym.integrations.openenv_server import MAX_REQUEST_BYTES, create_server_app

        self.env_id = env_id
        app = create_server_app(env_id, env_kwargs={**env_kwargs(env_id), **dict(env_args)}, **options)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{HOST}:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_max_size=MAX_REQUEST_BYTES))
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


@pytest.fixture(scope="session")
def server():
    """``server(env_id, env_args=((key, value), ...), **options)``: a running in-process server (one per
    distinct configuration); ``env_args`` are env kwargs on top of :func:`env_kwargs`."""
    running: dict[tuple, InProcessServer] = {}

    def get(env_id: str, **options) -> InProcessServer:
        key = (env_id, tuple(sorted(options.items())))
        if key not in running:
            running[key] = InProcessServer(env_id, **options)
        return running[key]

    yield get
    for srv in running.values():
        srv.stop()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def start_cli_server(env_id: str, *args: str) -> tuple[subprocess.Popen, str]:
    """``sopgym serve --env env_id`` as a child process on a free 127.0.0.1 port; returns it and its URL
    once ``/health`` answers. The child imports the same sopgym as this process."""
    import httpx

    import sopgym

    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(sopgym.__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-m", "sopgym", "serve", "--env", env_id, "--host", HOST, "--port", str(port),
                             "--log-level", "warning", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sopgym serve exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("sopgym serve did not answer /health within 120 s")


@pytest.fixture(scope="session")
def docker_sandbox():
    """The Docker sandbox is usable (daemon, SDK, image); else skip with the reason, or fail under
    ``SOPGYM_REQUIRE_DOCKER=1`` (CI): no Docker test is skipped silently there."""

    def unavailable(reason: str):
        if os.environ.get("SOPGYM_REQUIRE_DOCKER") == "1":
            pytest.fail(f"SOPGYM_REQUIRE_DOCKER=1 but Docker is unavailable: {reason}", pytrace=False)
        pytest.skip(f"Docker unavailable: {reason} (set SOPGYM_REQUIRE_DOCKER=1 to make this a failure)")

    try:
        from sopgym.sandboxes.docker import image, pool
    except ImportError as exc:
        unavailable(f"the docker SDK is not installed ({exc})")
    from sopgym.sandboxes.base import SandboxUnavailable

    try:
        client = pool.connect(timeout=5)
    except SandboxUnavailable as exc:
        unavailable(str(exc))
    if not image.image_exists(image.image_tag(), client):
        unavailable(f"image {image.image_tag()} is not built; run `sopgym sandbox build`")

