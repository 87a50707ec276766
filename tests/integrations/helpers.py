"""Shared by the adapter tests: importing a library or skipping with a reason, and sopgym's own figures.

Each library lives in its own test environment (``tox -e trl|skyrl|verl``): their pins conflict. In
the main suite a missing library skips its tests with the reason; in its tox environment
``SOPGYM_REQUIRE_INTEGRATIONS`` names it, and a missing install is an error instead, so CI never
passes by skipping.
"""

from __future__ import annotations

import importlib
import os

import gymnasium as gym
import pytest

import sopgym  # noqa: F401  (registers the ids)
from sopgym.envs.policies import make_policy
from sopgym.envs.registration import registered_env_ids
from sopgym.evaluation.runner import run_episode

AUTHORED_ENV_IDS = registered_env_ids("sopgym")
#: The verifiable tier's code runs in-process here: these tests are about the adapters, not the Docker
#: sandbox (tests/docker covers it), and the adapter's env and the reference get the same kwargs.
ENV_KWARGS = {"code_runner": "inprocess"}


def required_integrations() -> set[str]:
    return {x.strip() for x in os.environ.get("SOPGYM_REQUIRE_INTEGRATIONS", "").split(",") if x.strip()}


def import_or_skip(module: str, integration: str):
    """Import ``module`` or skip the calling test module with the reason (an error when required)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if integration in required_integrations():
            raise ImportError(
                f"SOPGYM_REQUIRE_INTEGRATIONS names {integration!r} but {module!r} does not import: {exc}"
            ) from exc
        pytest.skip(f"{integration} adapter tests need {module!r} ({exc}); run them with `tox -e {integration}`",
                    allow_module_level=True)


def sopgym_run(row, policy: str, env_kwargs=None):
    """sopgym's own step loop (the one runner) on a task row: the reference result."""
    env = gym.make(row["env_id"], **{**ENV_KWARGS, **dict(env_kwargs or {})})
    try:
        return run_episode(env, make_policy(policy), seed=row["seed"],
                           options={"split": row["split"], "task_index": row["task_index"]})
    finally:
        env.close()
