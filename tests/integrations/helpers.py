"""Shared by the adapter tests: importing a library or skipping with a reason, and sopgym's own figures.

Each library lives in its own test environment (``tox -e trl|skyrl|verl``): their pins conflict. In
the main suite a missing library skips its tests with the reason; in its tox environment
``SOPGYM_REQUIRE_INTEGRATIONS`` names it, and a missing install is an error instead, so CI never
passes by skipping.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets

import gymnasium as gym
import pytest

import sopgym  # noqa: F401  (registers the ids)
from sopgym.envs.policies import make_policy
from sopgym.envs.registration import registered_env_ids
from sopgym.episodes.runner import run_episode

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


# --------------------------------------------------------------------------------------------------
# Served envs: `sopgym serve` on 127.0.0.1, run by the openenv tox env's interpreter
# --------------------------------------------------------------------------------------------------
#: The interpreter that runs `sopgym serve` for the served-env tests: the server's dependencies (openenv,
#: gradio) conflict with the libraries', so it is another venv's (tox.ini: the openenv env's).
SERVE_PYTHON = "SOPGYM_SERVE_PYTHON"


def serve_python(integration: str) -> str:
    """``$SOPGYM_SERVE_PYTHON`` when it runs sopgym's server; else skip (an error when ``integration`` is required)."""
    import subprocess

    python = os.environ.get(SERVE_PYTHON)
    problem = None
    if not python:
        problem = f"{SERVE_PYTHON} is not set"
    elif not os.access(python, os.X_OK):
        problem = f"{SERVE_PYTHON}={python} is not an executable"
    elif subprocess.run([python, "-c", "import openenv, uvicorn, websockets"], capture_output=True).returncode != 0:
        problem = f"{SERVE_PYTHON}={python} lacks the server extra (openenv, uvicorn, websockets)"
    if problem is None:
        return python
    message = (f"the served-env tests start `sopgym serve` with {SERVE_PYTHON} (the openenv tox env's python: build it "
               f"with `tox run --notest -e openenv`): {problem}")
    if integration in required_integrations():
        raise RuntimeError(message)
    pytest.skip(message)


@contextlib.contextmanager
def served(env_id: str, integration: str, *serve_args: str):
    """``sopgym serve --env env_id --env-arg code_runner=inprocess`` (the adapters' ENV_KWARGS) on 127.0.0.1
    with a token of its own; yields the adapters' ``servers=`` for it (URL and token)."""
    from openenv_server.server_helpers import start_cli_server  # tests/ is on sys.path (it has no __init__.py)

    python = serve_python(integration)
    token = "test-" + secrets.token_urlsafe(16)
    args = [a for key, value in ENV_KWARGS.items() for a in ("--env-arg", f"{key}={value}")]
    proc, url = start_cli_server(env_id, *args, *serve_args, environ={**os.environ, "SOPGYM_SERVE_TOKEN": token}, python=python)
    try:
        yield {env_id: {"url": url, "token": token}}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except Exception:  # noqa: BLE001 - a server that ignores SIGTERM is killed
            proc.kill()
            proc.wait(30)


def as_served(record):
    """A local episode record as a server without ``--send-ground-truth`` sends it: the ground truth
    (``expected``, ``expected_state``) left out and named under ``ground_truth_withheld``."""
    from sopgym.integrations.protocol import GROUND_TRUTH_KEYS, WITHHELD_KEY

    return {**{k: v for k, v in record.items() if k not in GROUND_TRUTH_KEYS}, WITHHELD_KEY: [k for k in GROUND_TRUTH_KEYS if k in record]}
