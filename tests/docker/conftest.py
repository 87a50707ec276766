"""Fixtures for the Docker sandbox tests.

Docker tests request the ``docker_client`` fixture. When Docker (daemon, SDK or the sandbox image)
is unavailable they are skipped with the reason, unless ``SOPGYM_REQUIRE_DOCKER=1`` (CI), in which
case they fail: no Docker test may be silently skipped in CI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the fixture program must be importable by module name
    sys.path.insert(0, str(HERE))

REQUIRE = os.environ.get("SOPGYM_REQUIRE_DOCKER") == "1"


def _unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"SOPGYM_REQUIRE_DOCKER=1 but Docker is unavailable: {reason}", pytrace=False)
    pytest.skip(f"Docker unavailable: {reason} (set SOPGYM_REQUIRE_DOCKER=1 to make this a failure)")


@pytest.fixture(scope="session")
def docker_client():
    """A connected docker client with the sandbox image built (skip/fail otherwise)."""
    try:
        from sopgym.sandboxes.docker import image, pool
    except ImportError as exc:
        _unavailable(f"the docker SDK is not installed ({exc})")
    from sopgym.sandboxes.base import SandboxUnavailable

    try:
        client = pool.connect(timeout=5)
    except SandboxUnavailable as exc:
        _unavailable(str(exc))
    tag = image.image_tag()
    if not image.image_exists(tag, client):
        _unavailable(f"image {tag} is not built; run `python -m sopgym sandbox build`")
    yield client
    pool.shutdown()


@pytest.fixture
def make_pool(docker_client):
    """Factory of private container pools, all closed (and checked empty) at the end of the test."""
    from sopgym.sandboxes.docker import image
    from sopgym.sandboxes.docker.hardening import ContainerHardening
    from sopgym.sandboxes.docker.pool import ContainerPool

    pools = []

    def make(role: str = "stateful", hardening: ContainerHardening | None = None, **kwargs) -> ContainerPool:
        p = ContainerPool(docker_client, image.image_tag(), hardening or ContainerHardening(), role, **kwargs)
        pools.append(p)
        return p

    yield make
    for p in pools:
        p.close()
