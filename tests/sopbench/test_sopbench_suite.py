"""`sopgym eval --env 'sopbench/*' --prompt-style upstream` with a checkout registered (SOPBENCH_DIR) runs
every loadable domain, and the results and the report put the strict (evaluator) and `sopbench-compat`
scores side by side. The policy is the groundtruth-replay plumbing baseline (model runs go through the
same suite code: tests/agents). Our fixture checkout has tools.py files (tools run in a subprocess);
the real checkout here is data-only, so its tool calls are infrastructure failures, reported as such."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from .helpers import FIXTURES, REAL_DOMAINS, sopbench_dir

pytestmark = pytest.mark.slow


def _suite(checkout, folder, policy="groundtruth-replay"):
    env = {**os.environ, "SOPBENCH_DIR": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-m", "sopgym", "eval", "--env", "sopbench/*", "--policy", policy, "--prompt-style", "upstream",
         "--episodes", "2", "--env-arg", "tools_runner=subprocess", "--env-arg", "trust_tools_code=true",
         "--n-bootstrap", "200", "--quiet", "--out", str(folder / "r.json"), "--trajectories", str(folder / "t.jsonl")],
        capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = subprocess.run([sys.executable, "-m", "sopgym", "report", str(folder / "r.json"), "--out",
                             str(folder / "report"), "--no-plots"], capture_output=True, text=True, timeout=300, env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    return json.loads((folder / "r.json").read_text())


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sopbench_fixture_suite")
    return _suite(FIXTURES, folder), folder


def test_every_loadable_domain_runs_with_upstream_prompts(fixture_run):
    results, folder = fixture_run
    assert sorted(results["envs"]) == ["sopbench/cells-v0", "sopbench/helpdesk-v0", "sopbench/intake-v0"]  # 'broken' does not load
    assert results["config"]["identity"]["sopbench_env_kwargs"] == {"prompt_style": "upstream"}
    first = next(json.loads(line) for line in (folder / "t.jsonl").read_text().splitlines() if '"type": "reset"' in line)
    assert "Task to process:" in first["observation"]  # upstream's layout


def test_results_hold_strict_and_compat_success_per_domain(fixture_run):
    results, _ = fixture_run
    for env_id, metrics in results["envs"].items():
        assert metrics["task_success_rate"] == 1.0, env_id  # the plumbing baseline succeeds strictly
        assert metrics["sopbench_compat"]["rule"] == "sopbench-compat"
        assert metrics["sopbench_compat"]["task_success_rate"] >= metrics["task_success_rate"]
    assert results["suite"]["sopbench_compat_task_success_rate"] == 1.0


def test_the_report_shows_strict_and_compat_side_by_side(fixture_run):
    results, folder = fixture_run
    text = (folder / "report" / "leaderboard.md").read_text()
    assert "## SOP-Bench: strict vs sopbench-compat" in text
    for env_id in results["envs"]:
        assert f"| groundtruth-replay | {env_id} | 1.000 [1.000, 1.000] | 1.000 | +0.000 |" in text
    rows = list(csv.DictReader((folder / "report" / "leaderboard.csv").open()))
    assert all(r["sopbench_compat_task_success_rate"] for r in rows)


def test_a_data_only_checkout_runs_every_domain_and_reports_tool_calls_as_infrastructure(tmp_path):
    checkout = sopbench_dir()
    if not checkout.is_dir():
        pytest.skip(f"SOP-Bench data not found at {checkout}; set SOPBENCH_DIR")
    if any((checkout / name / "tools.py").exists() for name in REAL_DOMAINS):
        pytest.skip("this checkout has tools.py files: the data-only case does not apply")
    results = _suite(checkout, tmp_path)
    assert sorted(results["envs"]) == sorted(f"sopbench/{name}-v0" for name in REAL_DOMAINS)
    for env_id, metrics in results["envs"].items():
        assert metrics["infrastructure_failure_rate"] == 1.0, env_id  # never scored as the policy's failure
        assert metrics["task_success_rate_excluding_infrastructure"] is None
