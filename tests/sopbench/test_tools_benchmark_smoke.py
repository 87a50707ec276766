"""Smoke test of benchmarks/sopbench_tools.py: it runs at tiny sizes and prints its row.

No timing figure is asserted (the host is shared and noisy); only that every measurement ran (the
script checks the warm and cold runners give the same answers) and was reported with its ratio.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sopbench_tools.py"
NUMBER = r"[0-9]+(?:\.[0-9]+)?"


def test_the_subprocess_row_reports_cold_warm_ratio_switch_and_start():
    out = subprocess.run([sys.executable, str(SCRIPT), "--runners", "subprocess", "--calls", "5", "--cold-calls", "2",
                          "--episodes", "2"], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, f"expected exit 0, got {out.returncode}; stderr:\n{out.stderr[-3000:]}"
    rows = [line for line in out.stdout.splitlines() if line.startswith("subprocess ")]
    assert len(rows) == 1, f"expected one subprocess row in:\n{out.stdout}"
    pattern = rf"subprocess\s+\d+\.\d+\S*(\s+{NUMBER}){{4}}\s+{NUMBER}x(\s+{NUMBER}){{3}}"
    assert re.fullmatch(pattern, rows[0]), f"unexpected row: {rows[0]!r}"
