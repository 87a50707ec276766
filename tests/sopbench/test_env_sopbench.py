"""SopBenchEnv: prompt styles, upstream final-decision submission, import hook, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest

from .helpers import FIXTURES, REPO, sopbench_dir


def test_upstream_prompt_layout_has_no_system_message_and_raw_values(real_report):
    env = gym.make("sopbench/customer_service-v0", prompt_style="upstream")
    obs, info = env.reset(options={"task_index": 0})
    assert [m["role"] for m in info["messages"]] == ["user"]
    assert obs.startswith("Please follow this Standard Operating Procedure to process the given task:\n\n<sop>\n")
    assert "Task to process:\naccount_id: BCD-89012\nservice_area_code: SA-89012\nservice_type: video\nsubscribed_bandwidth: 500 Mbps\n" in obs
    assert obs.endswith("without any additional explanation or formatting.")
    assert env.unwrapped.max_turns == 10
    env.close()


def test_upstream_prompt_shows_nan_as_nan(fixture_report):
    env = gym.make("sopbench/helpdesk-v0", prompt_style="upstream")
    obs, _ = env.reset(options={"task_index": 2})  # ACC-3 has an empty region
    assert "account_id: ACC-3\nregion: nan\n" in obs
    env.close()


def test_chat_prompt_shows_missing_as_null(fixture_report):
    env = gym.make("sopbench/helpdesk-v0")
    obs, info = env.reset(options={"task_index": 2})
    assert "- region: null" in obs and info["messages"][0]["role"] == "system"
    env.close()


def test_final_decision_reply_submits_in_upstream_style(fixture_report):
    env = gym.make("sopbench/helpdesk-v0", prompt_style="upstream")
    env.reset(options={"task_index": 0})
    _, reward, term, _, info = env.step("Done. <final_decision>escalate</final_decision>")
    assert term and reward == 1.0 and info["episode"]["answer"] == {"resolution": "escalate"}
    env.close()


def test_licence_forbidding_training_is_detected(fixture_report):
    assert fixture_report.domains["intake"].training_allowed is False
    assert fixture_report.domains["helpdesk"].training_allowed is True
    env = gym.make("sopbench/intake-v0")
    _, info = env.reset(seed=0)
    assert info["training_allowed"] is False and info["license"] == "CC-BY-NC-4.0"
    env.close()


def test_unloadable_domain_is_reported_with_its_reason(fixture_report):
    assert "toolspecs.json is not valid JSON" in fixture_report.skipped["broken"]


def test_import_registers_sopbench_dir_and_never_fails(tmp_path):
    if not sopbench_dir().is_dir():
        pytest.skip(f"SOP-Bench data not found at {sopbench_dir()}; set SOPBENCH_DIR")
    code = "import sopgym, gymnasium as g; print(sorted(k for k in g.registry if k.startswith('sopbench/')))"
    env = dict(os.environ, SOPBENCH_DIR=str(sopbench_dir()))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO, check=True)
    assert "sopbench/order_fulfillment-v0" in out.stdout
    env["SOPBENCH_DIR"] = str(tmp_path / "absent")
    bad = subprocess.run([sys.executable, "-W", "always", "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 0 and "SOP-Bench domains not registered" in bad.stderr


def test_cli_check_prints_the_audit(tmp_path, capsys):
    from sopgym.cli import main

    assert main(["sopbench", "check", str(FIXTURES), "--runner", "inprocess", "--trust-tools-code", "--domain", "helpdesk",
                 "--recordings-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["helpdesk"]["stub_tools"] == ["legacy_flag"] and out["broken"]["skipped"]


def test_cli_record_writes_a_recording(tmp_path, capsys):
    from sopgym.cli import main

    assert main(["sopbench", "record", str(FIXTURES), "--runner", "inprocess", "--trust-tools-code", "--recordings-dir", str(tmp_path)]) == 0
    assert (tmp_path / "helpdesk.json").is_file() and (tmp_path / "intake.json").is_file()
