"""The episode record (sopgym/record.py): one typed definition shared by the env, the remote env and the
evaluator, checked on every registered env."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from sopgym.envs.policies import make_policy
from sopgym.episodes.runner import run_episode
from sopgym.evaluation import score_record
from sopgym.integrations import remote_env
from sopgym.integrations.protocol import PROTOCOL_KEY, PROTOCOL_VERSION
from sopgym.record import RECORD_KEYS, REQUIRED_KEYS
from sopgym.sop_tasks.registry import get_pack
from sopgym.trajectory import dumps_line

#: Only a record of an infrastructure failure seen from outside the env carries it.
OUTSIDE_ONLY = {"infrastructure_error"}


def make(env_id):
    verifiable = get_pack(env_id.rsplit("-v", 1)[0]).verifiable is not None
    return gym.make(env_id, code_runner="inprocess") if verifiable else gym.make(env_id)


def oracle_record(env):
    return run_episode(env, make_policy("oracle"), seed=0).record


def test_the_envs_records_have_exactly_the_declared_keys(env_id):
    env = make(env_id)
    try:
        assert set(oracle_record(env)) == RECORD_KEYS - OUTSIDE_ONLY
        env.reset(seed=1)
        assert set(env.unwrapped.end_episode("stopped")[4]["episode"]) == RECORD_KEYS - OUTSIDE_ONLY
    finally:
        env.close()


class _Lost(OSError):
    pass


class _OneStepSession:
    """A websocket to a fake sopgym server running a local env: it answers the handshake, the reset and one
    step exactly as the server would (``gym_step``), then the connection is lost."""

    def __init__(self, env_id):
        self.env = make(env_id)
        self.env_id = env_id
        self.answers = []
        self.steps_left = 1

    def send(self, raw):
        message = json.loads(raw)
        if message["type"] == "state":
            self.answers.append({"type": "state", "data": {
                PROTOCOL_KEY: PROTOCOL_VERSION, "env_id": self.env_id,
                "max_observation_length": self.env.observation_space.max_length}})
        elif message["type"] == "reset":
            obs, info = self.env.reset(seed=message["data"].get("seed"))
            self.answers.append(self._observation({"observation": obs, "info": info}))
        elif message["type"] == "step" and self.steps_left:
            self.steps_left -= 1
            out = self.env.step(message["data"]["reply"])
            self.answers.append(self._observation(dict(zip(("observation", "reward", "terminated", "truncated", "info"), out))))

    def recv(self, timeout=None):
        if not self.answers:
            raise _Lost("connection reset by peer")
        return json.dumps(self.answers.pop(0))

    def close(self):
        self.env.close()

    @staticmethod
    def _observation(gym_step):
        return {"type": "observation", "data": {"observation": {"gym_step": dumps_line(gym_step)}}}


def test_the_remote_envs_lost_episode_record_has_exactly_the_declared_keys(env_id, monkeypatch):
    """The record the remote env builds itself (its server lost mid-episode); the others are the server
    env's own records, passed through (tests/openenv_server/test_remote_env.py)."""
    session = _OneStepSession(env_id)
    monkeypatch.setattr(remote_env, "_import_websockets", lambda: (lambda url, **kw: session, _Lost, ()))
    env = remote_env.RemoteSOPEnv("http://127.0.0.1:1")
    try:
        env.reset(seed=0)
        env.step("no call yet")
        record = env.step("no call again")[4]["episode"]
        assert set(record) == RECORD_KEYS
    finally:
        env.close()


def test_the_evaluator_names_the_missing_key_and_the_expected_keys():
    record = {k: None for k in REQUIRED_KEYS if k != "turns"}
    with pytest.raises(ValueError) as caught:
        score_record(record, "record 3")
    message = str(caught.value)
    assert message.startswith("record 3: episode record is missing keys ['turns']; expected at least "
                              f"{list(REQUIRED_KEYS)}") and f"got keys {list(record)}" in message
