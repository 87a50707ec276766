"""Smoke test of benchmarks/domains.py: it runs at tiny sizes and prints every expected line.

No timing or memory figure is asserted (the host is shared and noisy); only that each measurement
ran and was reported.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import sopgym  # noqa: F401  (registers the envs)
from sopgym.sop_tasks.registry import all_packs

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "domains.py"
TASKS, ENVS = 20, 16
GROUPS = ("suite", "replay", "stateful", "verifiable")
NUMBER = r"[0-9]+(?:\.[0-9]+)?"


@pytest.fixture(scope="module")
def output() -> str:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--tasks", str(TASKS), "--envs", str(ENVS)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, (
        f"benchmarks/domains.py exited {out.returncode} (expected 0); stderr:\n{out.stderr[-3000:]}"
    )
    return out.stdout


def _line(output: str, pattern: str) -> str:
    hits = [line for line in output.splitlines() if re.match(pattern, line)]
    assert len(hits) == 1, f"expected exactly one line matching {pattern!r}, found {len(hits)} in:\n{output}"
    return hits[0]


def test_generation_header_names_sizes_and_baseline(output):
    line = _line(output, r"== task generation:")
    assert f"{TASKS} train tasks per domain" in line and "baseline" in line, f"unexpected header: {line!r}"


@pytest.mark.parametrize("name", sorted(p.name for p in all_packs("sopgym")))
def test_generation_reports_every_authored_domain(output, name):
    line = _line(output, rf"{name}\s")
    # tier, tasks/s, baseline tasks/s, ratio "x", task KB
    assert re.fullmatch(rf"{name}\s+(replay|stateful|verifiable)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x\s+{NUMBER}", line), (
        f"unexpected generation row for {name}: {line!r}"
    )


def test_generation_reports_a_suite_total_with_ratio(output):
    line = _line(output, r"all domains\s")
    assert re.fullmatch(rf"all domains\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x\s*", line), f"unexpected total row: {line!r}"


def test_memory_header_names_env_count_and_backends(output):
    line = _line(output, r"== memory:")
    assert f"{ENVS} concurrent envs" in line and "sandbox=inprocess" in line and "code_runner=inprocess" in line, (
        f"unexpected header: {line!r}"
    )


@pytest.mark.parametrize("group", GROUPS)
def test_memory_reports_every_group(output, group):
    line = _line(output, rf"{group}\s+[0-9]")
    fields = line.split()
    # group, domains, envs, baseline MB, RSS MB, delta MB, KB/env, peak MB, setup s, SOP tool errors, target...
    assert int(fields[1]) >= 1 and int(fields[2]) == ENVS, (
        f"{group}: expected >= 1 domain and {ENVS} envs, got {line!r}"
    )
    assert float(fields[4]) >= float(fields[3]) > 0, f"{group}: expected RSS >= baseline RSS > 0, got {line!r}"


@pytest.mark.parametrize("group", ("replay", "stateful"))
def test_memory_rows_of_targeted_groups_state_the_500_mb_target(output, group):
    line = _line(output, rf"{group}\s+[0-9]")
    assert "< 500 MB:" in line, f"{group}: expected the 500 MB target verdict, got {line!r}"


def test_every_first_oracle_call_ran_and_every_measurement_succeeded(output):
    bad = [line for line in output.splitlines() if "WARNING" in line or "measurement failed" in line]
    assert not bad, f"expected no warnings or failed measurements, got: {bad}"
