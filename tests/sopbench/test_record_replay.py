"""Record and replay: equality with live runs, drift detection, non-determinism detection, check."""

from __future__ import annotations

import gymnasium as gym
import pytest

from sopgym.envs.policies import make_policy
from sopgym.sopbench import Recording, RecordingDrift, check_domain, load_domain, record_groundtruth, register
from sopgym.sopbench.runners import InProcessToolRunner, SubprocessToolRunner


def _inprocess(domain):
    return lambda: InProcessToolRunner(domain)


def _run_episode(env_id, index, **kwargs):
    env = gym.make(env_id, **kwargs)
    policy = make_policy("groundtruth-replay")
    obs, info = env.reset(options={"task_index": index})
    policy.reset(info)
    texts, done = [], False
    while not done:
        obs, reward, term, trunc, info = env.step(policy.act(obs, info))
        texts.append(obs)
        done = term or trunc
    env.close()
    return texts, info["episode"]


@pytest.fixture
def recorded(helpdesk_copy, tmp_path):
    """The helpdesk copy registered under its own recordings dir, with a fresh recording."""
    recdir = tmp_path / "rec"
    report = register(helpdesk_copy.parent, recordings_dir=recdir)
    domain = report.domains["helpdesk"]
    rec, plan = record_groundtruth(domain, _inprocess(domain))
    rec.save(recdir / "helpdesk.json")
    return domain, rec, plan, recdir


def _deterministic(texts):
    return [t for t in texts if "ticket" not in t]


def test_replay_equals_live_run(recorded):
    domain, *_ = recorded
    for i in range(domain.num_tasks):
        live, live_ep = _run_episode("sopbench/helpdesk-v0", i, tools_runner="inprocess", trust_tools_code=True, tool_mode="live")
        replay, replay_ep = _run_episode("sopbench/helpdesk-v0", i, tool_mode="replay")
        assert _deterministic(live) == _deterministic(replay)
        assert replay_ep["reward"] == live_ep["reward"] == 1.0


def test_replay_serves_the_recorded_text_of_a_nondeterministic_tool(recorded):
    domain, rec, plan, _ = recorded
    texts, _ = _run_episode("sopbench/helpdesk-v0", 0, tool_mode="replay")
    recorded_text = rec.get("draw_ticket_number", {"account_id": "ACC-1"})["text"]
    assert any(recorded_text in t for t in texts)
    again, _ = _run_episode("sopbench/helpdesk-v0", 0, tool_mode="replay")
    assert again == texts


def test_nondeterministic_tool_is_flagged_and_only_it(recorded):
    _, rec, _, _ = recorded
    assert set(rec.nondeterministic()) == {"draw_ticket_number"}
    entry = rec.get("draw_ticket_number", {"account_id": "ACC-2"})
    assert entry["nondeterministic"] and entry["alternatives"][0] != entry["text"]


def test_recording_survives_a_save_load_round_trip(recorded):
    domain, rec, _, recdir = recorded
    loaded = Recording.load_for(domain, recdir / "helpdesk.json")
    assert loaded.to_json() == rec.to_json()


def test_changed_csv_is_detected_as_drift(recorded, helpdesk_copy):
    _, _, _, recdir = recorded
    csv = helpdesk_copy / "test_set_with_outputs.csv"
    csv.write_text(csv.read_text().replace("TOK-1a", "TOK-1z"))
    changed = load_domain(helpdesk_copy)
    with pytest.raises(RecordingDrift, match="changed since it was recorded"):
        Recording.load_for(changed, recdir / "helpdesk.json")


@pytest.mark.parametrize("filename", ["sop.txt", "toolspecs.json", "tools.py"])
def test_any_defining_file_changes_the_content_hash(helpdesk_copy, filename):
    before = load_domain(helpdesk_copy).content_hash
    path = helpdesk_copy / filename
    path.write_text(path.read_text() + ("\n" if filename != "toolspecs.json" else " "))
    assert load_domain(helpdesk_copy).content_hash != before


def test_env_refuses_to_replay_a_drifted_recording(recorded, helpdesk_copy):
    _, _, _, recdir = recorded
    (helpdesk_copy / "sop.txt").write_text("A changed SOP.\n")
    register(helpdesk_copy.parent, recordings_dir=recdir)
    with pytest.raises(RecordingDrift):
        gym.make("sopbench/helpdesk-v0", tool_mode="replay")
    with pytest.warns(UserWarning, match="ignoring the recording"):
        env = gym.make("sopbench/helpdesk-v0", tool_mode="auto", tools_runner="inprocess", trust_tools_code=True)
    _, info = env.reset(options={"task_index": 0})
    assert "changed since it was recorded" in info["sopbench"]["recording_drift"]
    env.close()


def test_replay_mode_miss_is_an_infrastructure_failure_not_the_policy(recorded):
    env = gym.make("sopbench/helpdesk-v0", tool_mode="replay")
    env.reset(options={"task_index": 0})
    _, _, _, trunc, info = env.step('<tool_call>{"name": "open_session", "arguments": {"account_id": "ACC-77"}}</tool_call>')
    assert info["turn_status"] == "ERROR_SANDBOX" and info["infrastructure_failure"] and trunc
    env.close()


def test_check_reports_stub_nondeterministic_failing_tools_and_solvable_tasks(recorded):
    domain, *_ = recorded
    report, made = check_domain(domain, lambda: SubprocessToolRunner(domain, timeout_s=60))
    assert report.tools_run == "live"
    assert report.stub_tools == ["legacy_flag"]
    assert report.nondeterministic_tools == ["draw_ticket_number"]
    assert report.never_ok_tools == ["lookup_history"]
    assert "missing 1 required positional argument: 'verbose'" in report.error_texts["lookup_history"]
    assert (report.num_solvable, report.num_tasks, report.unreachable_labels) == (4, 4, [])


def test_check_finds_labels_no_tool_reaches(helpdesk_copy):
    csv = helpdesk_copy / "test_set_with_outputs.csv"
    csv.write_text(csv.read_text().replace("ACC-4,east,TOK-4d,gold,1,NA,close", "ACC-4,east,TOK-4d,gold,1,NA,refund"))
    domain = load_domain(helpdesk_copy)
    report, _ = check_domain(domain, _inprocess(domain))
    assert report.unreachable_labels == ["refund"] and report.num_solvable == 3


def test_check_replays_a_recording_when_no_code_may_run(recorded):
    domain, rec, *_ = recorded
    report, made = check_domain(domain, None, recording=rec)
    assert report.tools_run == "recording" and made is None and report.num_solvable == 4
