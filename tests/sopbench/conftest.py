"""Fixtures for the SOP-Bench adapter tests.

Real data: ``$SOPBENCH_DIR`` (CI sets it), else ``../shared/sop-bench`` beside the repository. It is
read in place, never copied. Tool-running tests use our own fixture domains under ``fixtures/``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL_DOMAINS = (
    "customer_service", "order_fulfillment", "referral_abuse_detection_v1", "referral_abuse_detection_v2",
    "traffic_spoofing_detection", "warehouse_package_inspection",
)


def sopbench_dir() -> Path:
    return Path(os.environ.get("SOPBENCH_DIR") or (REPO.parent / "shared" / "sop-bench"))


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
