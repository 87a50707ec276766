"""Paths and names shared by the SOP-Bench adapter tests (the fixtures are in this folder's conftest.py).

Real data: ``$SOPBENCH_DIR`` (CI sets it), else ``../shared/sop-bench`` beside the repository. It is
read in place, never copied. Tool-running tests use our own fixture domains under ``fixtures/``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL_DOMAINS = (
    "customer_service", "order_fulfillment", "referral_abuse_detection_v1", "referral_abuse_detection_v2",
    "traffic_spoofing_detection", "warehouse_package_inspection",
)


def sopbench_dir() -> Path:
    return Path(os.environ.get("SOPBENCH_DIR") or (REPO.parent / "shared" / "sop-bench"))
