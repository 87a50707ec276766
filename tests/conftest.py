"""Shared fixtures. Every env test is parametrised over every registered env id."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("SOPBENCH_DIR", str((REPO / ".." / "shared" / "sop-bench").resolve()))

from sopgym.envs.registration import registered_env_ids  # noqa: E402

ENV_IDS = registered_env_ids()
AUTHORED_ENV_IDS = registered_env_ids("sopgym")


@pytest.fixture(params=ENV_IDS)
def env_id(request):
    return request.param


@pytest.fixture(params=AUTHORED_ENV_IDS)
def authored_env_id(request):
    return request.param
