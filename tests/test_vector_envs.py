"""Vector envs and a known upstream bug (issue 12; docs/environments.md, "Vector envs").

gymnasium 1.4's ``AsyncVectorEnv`` worker clears its next-step autoreset flag on ``reset`` only when
``shared_memory=True`` (the ``autoreset = False`` line sits inside ``if shared_memory:`` in
``gymnasium/vector/async_vector_env.py::_async_worker``). sopgym's text spaces need
``shared_memory=False``, so after an episode ends, ``reset(options=...)`` followed by ``step`` drops
the action and resets the env again, without the options: another task. The workarounds the docs
recommend are checked here too.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from sopgym.envs.env_kwargs import InProcessCodeRunnerWarning
from sopgym.sop_tasks.registry import get_pack

NO_CALL = "Let me think about this case."


def _make(env_id):
    def make():
        kwargs = {"max_turns": 1}
        if get_pack(env_id.rsplit("-v", 1)[0]).verifiable is not None:
            kwargs["code_runner"] = "inprocess"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InProcessCodeRunnerWarning)
            return gym.make(env_id, **kwargs)

    return make


def _end_then_reset_then_step(vec, split):
    """End an episode (max_turns=1), reset with options naming a task, step: returns the step's infos."""
    vec.reset(seed=0, options={"split": split, "task_index": 3})
    _, _, _, truncated, _ = vec.step([NO_CALL])
    assert list(truncated) == [True]
    _, infos = vec.reset(options={"split": split, "task_index": 5})
    assert infos["task_id"][0].endswith(f"/{split}/5")
    _, _, _, _, infos = vec.step([NO_CALL])
    vec.close()
    return infos


def test_async_vector_env_without_shared_memory_drops_the_action_after_a_reset_with_options():
    """Pins gymnasium 1.4's bug as observed. If this fails, gymnasium fixed it: update the docs' workaround."""
    env_id = "sopgym/WarehouseReceiving-v0"
    infos = _end_then_reset_then_step(AsyncVectorEnv([_make(env_id)], shared_memory=False), "test")
    # Observed: the step is the worker's autoreset: env.reset() without options (a random train task),
    # the action never reaches the env, no turn is taken.
    assert gym.__version__.startswith("1.4.")
    assert (infos["turn"][0], infos["status"][0], infos["split"][0]) == (0, "OK", "train")
    assert not infos["task_id"][0].endswith("/test/5")


@pytest.mark.parametrize("vector", ["SyncVectorEnv", "AsyncVectorEnv(shared_memory=False, autoreset_mode=DISABLED)"])
def test_the_documented_workarounds_step_the_task_that_was_reset(env_id, vector):
    make = _make(env_id)
    vec = SyncVectorEnv([make]) if vector == "SyncVectorEnv" else AsyncVectorEnv(
        [make], shared_memory=False, autoreset_mode=AutoresetMode.DISABLED)
    split = "test" if get_pack(env_id.rsplit("-v", 1)[0]).num_tasks("test") else "train"
    infos = _end_then_reset_then_step(vec, split)
    assert infos["task_id"][0].endswith(f"/{split}/5") and infos["turn"][0] == 1
    assert infos["status"][0] == "TRUNCATED_MAX_TURNS"
