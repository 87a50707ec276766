"""Servers for the OpenEnv tests: ``sopgym serve``'s app on 127.0.0.1 only, in this process or as a CLI subprocess.

These tests need the ``server`` extra (openenv, websockets, uvicorn). Its pins conflict with the main
test environment's (openenv requires gradio, which caps pillow below the main env's), so they run in
their own tox environment, ``tox -e openenv``, which ``.ci/run`` runs after the main suite with
``SOPGYM_REQUIRE_OPENENV=1``: there a missing install fails the run instead of skipping."""

from __future__ import annotations

import os

import pytest
from server_helpers import TOKEN, InProcessServer

from sopgym.integrations.protocol import TOKEN_ENV


@pytest.fixture(scope="session", autouse=True)
def server_token():
    """Every test server's token in SOPGYM_SERVE_TOKEN, where sopgym's clients (and child servers) read it."""
    before = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = TOKEN
    yield TOKEN
    if before is None:
        os.environ.pop(TOKEN_ENV, None)
    else:
        os.environ[TOKEN_ENV] = before


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
