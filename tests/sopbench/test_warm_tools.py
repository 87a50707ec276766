"""The warm tools worker: one process per domain and runner, hermetic episodes, failures contained.

The fixture domain ``notebook`` (our own code, under ``state_fixtures/``, always run from a copy)
keeps state every way a ``tools.py`` can: module globals, class attributes, the manager, files
beside it (new, changed, deleted, read-only folders), a folder beside its own, pandas options and
``/dev/shm``. Nothing of it may reach the next episode.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import gymnasium as gym
import pytest

from sopgym.sandboxes.base import SandboxError, SandboxTimeout
from sopgym.sopbench import register
from sopgym.sopbench.runners import InProcessToolRunner

STATE_FIXTURES = Path(__file__).resolve().parent / "state_fixtures"
FRESH = {"module": [], "class": [], "instance": [], "notes_file": False, "task_rows": 2, "sop_present": True,
         "elsewhere": False, "cache_folder": False, "pandas_max_rows": 60, "shm_note": False}


@pytest.fixture
def notebook(tmp_path):
    """A private copy of the notebook domain, registered (its tools modify their folder)."""
    shutil.copytree(STATE_FIXTURES / "notebook", tmp_path / "data" / "notebook")
    return register(tmp_path / "data", recordings_dir=tmp_path / "rec").domains["notebook"]


@pytest.fixture(params=["docker", "subprocess"])
def runner_factory(request):
    """Narrows the conftest fixture of this name to the runners with a warm worker."""
    from sopgym.sopbench.runners import SubprocessToolRunner

    if request.param == "docker":
        yield request.getfixturevalue("docker_runner")
        return
    made = []

    def factory(domain, **options):
        made.append(SubprocessToolRunner(domain, **{"timeout_s": 120, **options}))
        return made[-1]

    yield factory
    for runner in made:
        runner.close()


def value(answer):
    assert answer["kind"] == "ok", answer
    return json.loads(answer["text"])


def test_calls_of_one_episode_share_one_manager(runner_factory, notebook):
    runner = runner_factory(notebook)
    assert value(runner.call("write_note", {"text": "a"})) == 1
    assert value(runner.call("read_notes", {}))["instance"] == ["a"]


def test_nothing_an_episode_does_reaches_the_next(runner_factory, notebook):
    runner = runner_factory(notebook)
    runner.call("write_note", {"text": "a"})
    runner.new_episode()
    assert value(runner.call("read_notes", {})) == FRESH


def test_the_dev_shm_of_the_sandbox_is_emptied_between_episodes(docker_runner, notebook):
    runner = docker_runner(notebook)
    runner.call("write_shm", {"text": "a"})
    assert value(runner.call("read_notes", {}))["shm_note"] is True
    runner.new_episode()
    assert value(runner.call("read_notes", {}))["shm_note"] is False


def test_sandboxed_tools_run_as_the_agent_uid_not_the_servers(docker_runner, notebook):
    from sopgym.sandboxes.docker import ContainerHardening

    policy = ContainerHardening()
    uid, euid = value(docker_runner(notebook).call("user_ids", {}))
    assert uid == euid == int(policy.agent_user.split(":")[0]) != int(policy.user.split(":")[0])


def test_the_worker_stays_warm_and_each_episode_is_a_new_process(runner_factory, notebook):
    runner = runner_factory(notebook)
    pids = []
    for _ in range(3):
        pids.append(value(runner.call("process_ids", {})))
        runner.new_episode()
    assert len({pid for pid, _ in pids}) == 3, f"expected a new episode process each time, got {pids}"
    assert len({parent for _, parent in pids}) == 1, f"expected one warm worker as parent, got {pids}"
    assert runner.num_workers_started == 1


def test_each_episode_draws_fresh_randomness_like_a_fresh_process(runner_factory, notebook):
    runner = runner_factory(notebook)
    first = value(runner.call("draw", {}))
    runner.new_episode()
    second = value(runner.call("draw", {}))
    assert first[0] != second[0] and first[1] != second[1], f"random and numpy draws repeated: {first} {second}"


def test_a_hung_tool_is_stopped_at_the_deadline_and_the_next_call_works(runner_factory, notebook):
    runner = runner_factory(notebook, timeout_s=3)
    runner.call("process_ids", {})  # the worker is up: the deadline below is the tool's alone
    started = time.monotonic()
    with pytest.raises(SandboxTimeout):
        runner.call("sleep", {"seconds": 60})
    assert time.monotonic() - started < 3 + 5 + 5, "the deadline (3 s, plus the Docker grace) was not enforced"
    assert value(runner.call("read_notes", {})) == FRESH
    assert runner.num_workers_started == 2


def test_a_tool_that_exits_is_an_infrastructure_failure_and_the_next_call_works(runner_factory, notebook):
    runner = runner_factory(notebook)
    runner.call("write_note", {"text": "a"})
    with pytest.raises(SandboxError, match="exited with code 3 during 'crash'"):
        runner.call("crash", {})
    assert value(runner.call("read_notes", {})) == FRESH


def test_inprocess_runner_starts_each_episode_with_a_fresh_module_and_manager(notebook):
    runner = InProcessToolRunner(notebook)
    runner.call("write_note", {"text": "a"})
    runner.new_episode()
    notes = value(runner.call("read_notes", {}))
    # In-process there is no isolation: files and pandas options persist (documented); memory does not.
    assert (notes["module"], notes["class"], notes["instance"]) == ([], [], [])


@pytest.mark.parametrize("kind", ["docker", "subprocess"])
def test_env_episodes_do_not_share_tool_state(request, notebook, kind):
    if kind == "docker":
        request.getfixturevalue("docker_runner")  # skips or fails as the Docker tests do
    env = gym.make("sopbench/notebook-v0", tools_runner=kind, trust_tools_code=kind != "docker", tool_mode="live")
    try:
        env.reset(options={"task_index": 0})
        env.step('<tool_call>{"name": "write_note", "arguments": {"text": "a"}}</tool_call>')
        env.reset(options={"task_index": 1})
        obs, *_ = env.step('<tool_call>{"name": "read_notes", "arguments": {}}</tool_call>')
    finally:
        env.close()
    assert '"module": [], "class": [], "instance": [], "notes_file": false, "task_rows": 2' in obs, obs
