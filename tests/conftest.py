"""Shared fixtures. Every env test is parametrised over every registered env id."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_BESIDE = (REPO / ".." / "shared" / "sop-bench").resolve()
if _BESIDE.is_dir():  # where the data is absent, the tests that need it skip and say so
    os.environ.setdefault("SOPBENCH_DIR", str(_BESIDE))

from sopgym.envs.registration import registered_env_ids  # noqa: E402

ENV_IDS = registered_env_ids()
AUTHORED_ENV_IDS = registered_env_ids("sopgym")


@pytest.fixture(params=ENV_IDS)
def env_id(request):
    return request.param


@pytest.fixture(params=AUTHORED_ENV_IDS)
def authored_env_id(request):
    return request.param


REQUIRE_RAY = os.environ.get("SOPGYM_REQUIRE_RAY") == "1"


@pytest.fixture(scope="session")
def ray_session():
    """Ray on this machine, started once for the test session (4 logical CPUs: two workers and their
    replacements; loopback only, no dashboard) and shut down at its end.

    Skipped with the reason when ray is not installed, unless ``SOPGYM_REQUIRE_RAY=1`` (CI), where
    that is a failure: no Ray test may be silently skipped in CI.
    """
    try:
        import ray
    except ImportError as exc:
        if REQUIRE_RAY:
            pytest.fail(f"SOPGYM_REQUIRE_RAY=1 but ray is not installed: {exc}", pytrace=False)
        pytest.skip(f"ray is not installed ({exc}): pip install 'sopgym[ray]' (SOPGYM_REQUIRE_RAY=1 makes this a failure)")
    import sys

    from sopgym.episodes.ray_pool import init_ray

    sys.path.insert(0, str(REPO / "tests"))
    import ray_helpers

    ray.cloudpickle.register_pickle_by_value(ray_helpers)  # the workers need not see the tests folder
    started = init_ray(num_cpus=4)
    yield ray
    if started:
        ray.shutdown()
