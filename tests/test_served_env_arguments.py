"""``servers=`` of the RL-library adapters (sopgym.integrations._common): what is refused before any
connection, and how a record without its ground truth is reported. The served episodes themselves are
tested per library against a real `sopgym serve` (tests/integrations/*, in their tox envs)."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import sopgym  # noqa: F401  (registers the ids)
from sopgym.envs.policies import make_policy
from sopgym.episodes.runner import run_episode
from sopgym.integrations._common import REMOTE_ENV_ID, episode_metrics, make_env, servers_of, success_of, task_rows
from sopgym.integrations.protocol import GROUND_TRUTH_KEYS, WITHHELD_KEY

ENV = "sopgym/WarehouseReceiving-v0"
URL = "http://127.0.0.1:9"  # never connected to: every refusal comes first


def test_the_remote_env_id_is_refused_with_the_call_to_make():
    with pytest.raises(ValueError, match=re.escape(f"expected env_id={ENV!r} with servers={{{ENV!r}: {URL!r}}}")):
        make_env(REMOTE_ENV_ID, {"url": URL, "env_id": ENV})
    with pytest.raises(ValueError, match="not 'sopgym/Remote-v0'"):
        task_rows(REMOTE_ENV_ID, "train", 1, env_kwargs={"url": URL, "env_id": ENV})


def test_env_kwargs_for_a_served_env_are_refused():
    with pytest.raises(ValueError, match=r"its env kwargs are the server's .*--env-arg.*got env_kwargs \{'reward': 'binary'\}"):
        make_env(ENV, {"reward": "binary"}, {ENV: URL})


def test_an_env_without_a_server_is_refused_naming_the_served_ones():
    with pytest.raises(ValueError, match=re.escape(f"servers= names no server for 'sopgym/PatientIntake-v0'; expected one of its keys [{ENV!r}]")):
        make_env("sopgym/PatientIntake-v0", None, {ENV: URL})


@pytest.mark.parametrize("entry, found", [({"token": "t"}, "got keys ['token']"), ({"url": URL, "tls": True}, "got keys ['tls', 'url']"),
                                          (8000, "got 8000")])
def test_a_server_entry_is_a_url_or_the_remote_envs_arguments(entry, found):
    with pytest.raises(ValueError, match=re.escape(f"servers[{ENV!r}] must be a URL, or a mapping with 'url' and optionally "
                                                   f"['token', 'connect_timeout_s', 'step_timeout_s']; {found}")):
        servers_of({ENV: entry})
    assert servers_of({ENV: URL}) == {ENV: {"url": URL}}


def test_a_record_without_its_ground_truth_has_no_success_but_the_rest_of_its_metrics():
    env = gym.make(ENV)
    try:
        record = run_episode(env, make_policy("oracle"), seed=0, options={"split": "train", "task_index": 0}).record
    finally:
        env.close()
    withheld = {**{k: v for k, v in record.items() if k not in GROUND_TRUTH_KEYS}, WITHHELD_KEY: list(GROUND_TRUTH_KEYS)}
    assert success_of(record) is True and success_of(withheld) is None
    assert episode_metrics(withheld) == {k: v for k, v in episode_metrics(record).items() if k != "success"}
