"""Fixtures for the SOP-Bench adapter tests.

Real data: ``$SOPBENCH_DIR`` (CI sets it), else ``../shared/sop-bench`` beside the repository. It is
read in place, never copied. Tool-running tests use our own fixture domains under ``fixtures/``.
"""

from __future__ import annotations

import os
import shutil

import pytest

from .helpers import FIXTURES, sopbench_dir


@pytest.fixture(scope="session")
def real_report():
    from sopgym.sopbench import register

    path = sopbench_dir()
    if not path.is_dir():
        pytest.skip(f"SOP-Bench data not found at {path}; set SOPBENCH_DIR")
    return register(path)


@pytest.fixture(scope="session")
def fixture_report(tmp_path_factory):
    from sopgym.sopbench import register

    return register(FIXTURES, recordings_dir=tmp_path_factory.mktemp("recordings"))


@pytest.fixture
def helpdesk_copy(tmp_path):
    """A private copy of the helpdesk fixture domain (tests that modify files use it)."""
    dest = tmp_path / "helpdesk"
    shutil.copytree(FIXTURES / "helpdesk", dest)
    return dest


@pytest.fixture(scope="session")
def docker_runner():
    """``(domain, **options) -> DockerToolRunner``; skipped with the reason when Docker (SDK, daemon
    or sandbox image) is unavailable, a failure instead under ``SOPGYM_REQUIRE_DOCKER=1``."""
    from sopgym.sandboxes.base import SandboxError

    try:
        from sopgym.sandboxes.docker.image import image_exists, image_tag
        from sopgym.sandboxes.docker.pool import connect

        if not image_exists(image_tag(), connect()):
            raise SandboxError(f"sandbox image {image_tag()} is not built (bash scripts/docker_setup.sh)")
    except (ImportError, SandboxError) as exc:
        if os.environ.get("SOPGYM_REQUIRE_DOCKER") == "1":
            pytest.fail(f"SOPGYM_REQUIRE_DOCKER=1 but the Docker sandbox is unavailable: {exc}")
        pytest.skip(f"Docker sandbox unavailable: {exc}")
    from sopgym.sopbench.runners import DockerToolRunner

    made = []

    def factory(domain, **options):
        runner = DockerToolRunner(domain, **{"timeout_s": 120, **options})
        made.append(runner)
        return runner

    yield factory
    for runner in made:
        runner.close()


@pytest.fixture(params=["docker", "subprocess", "inprocess"])
def runner_factory(request):
    """Every tools runner in turn: ``domain -> ToolRunner`` (closed at teardown). The Docker one is
    skipped or failed as :func:`docker_runner` says; the others need nothing."""
    from sopgym.sopbench.runners import InProcessToolRunner, SubprocessToolRunner

    if request.param == "docker":
        yield request.getfixturevalue("docker_runner")
        return
    made = []

    def factory(domain, **options):
        runner = SubprocessToolRunner(domain, **{"timeout_s": 120, **options}) if request.param == "subprocess" \
            else InProcessToolRunner(domain)
        made.append(runner)
        return runner

    yield factory
    for runner in made:
        runner.close()
