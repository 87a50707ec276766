"""``reset(options=...)``: every malformed option is a ValueError that names the expected form.

Checked on every registered env (our domains and the SOP-Bench domains of ``$SOPBENCH_DIR``), so
SOPEnv and SopBenchEnv are both held to it. Before the fix a task id without slashes raised
``ValueError: not enough values to unpack``, a non-numeric index ``invalid literal for int()``, a
float index was silently truncated and an empty split failed inside numpy.
"""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

from sopgym.envs.registration import registered_env_ids
from sopgym.sop_tasks.pack import SPLITS
from sopgym.sop_tasks.registry import get_pack


def make(env_id):
    if get_pack(env_id.rsplit("-v", 1)[0]).verifiable is not None:
        return gym.make(env_id, code_runner="inprocess")
    return gym.make(env_id)


def pack_of(env_id):
    return get_pack(env_id.rsplit("-v", 1)[0])


def posable_split(env_id) -> str:
    pack = pack_of(env_id)
    return next(s for s in ("test", "val", "train") if pack.split_sizes[s] != 0)


def reset_error(env_id, options) -> str:
    env = make(env_id)
    try:
        with pytest.raises(ValueError) as caught:
            env.reset(options=options)
    finally:
        env.close()
    return str(caught.value)


def task_id_form(env_id) -> str:
    return re.escape(f"'{pack_of(env_id).name}/<split>/<index>'")


@pytest.mark.parametrize("bad", ["nonsense", "a/b", 3, None, ("x", "test", 0)])
def test_task_id_without_three_parts_names_the_form(env_id, bad):
    message = reset_error(env_id, {"task_id": bad})
    assert re.search(f"task_id must be {task_id_form(env_id)}", message), message
    assert repr(bad) in message, message


@pytest.mark.parametrize("index", ["x", "-1", "1.0", ""])
def test_task_id_with_a_non_numeric_index_names_the_form(env_id, index):
    task_id = f"{pack_of(env_id).name}/{posable_split(env_id)}/{index}"
    message = reset_error(env_id, {"task_id": task_id})
    assert re.search(f"task_id must be {task_id_form(env_id)}", message), message


def test_task_id_of_another_domain_names_this_domain(env_id):
    message = reset_error(env_id, {"task_id": f"other_domain/{posable_split(env_id)}/0"})
    assert "'other_domain'" in message and re.search(task_id_form(env_id), message), message


@pytest.mark.parametrize("split", ["bogus", "Test", ""])
def test_task_id_with_an_unknown_split_lists_the_splits_with_tasks(env_id, split):
    message = reset_error(env_id, {"task_id": f"{pack_of(env_id).name}/{split}/0"})
    posable = [s for s in SPLITS if pack_of(env_id).split_sizes[s] != 0]
    assert f"split {split!r}" in message and str(posable) in message, message


def test_task_id_with_task_index_is_ambiguous(env_id):
    task_id = f"{pack_of(env_id).name}/{posable_split(env_id)}/0"
    message = reset_error(env_id, {"task_id": task_id, "task_index": 1})
    assert "either task_id or task_index" in message, message


def test_task_id_with_a_different_split_option_is_refused(env_id):
    split = posable_split(env_id)
    other = next(s for s in SPLITS if s != split)
    message = reset_error(env_id, {"task_id": f"{pack_of(env_id).name}/{split}/0", "split": other})
    assert f"in split {split!r}" in message and f"{other!r}" in message, message


@pytest.mark.parametrize("split", ["bogus", None, 0])
def test_unknown_split_lists_the_splits(env_id, split):
    message = reset_error(env_id, {"split": split, "task_index": 0})
    assert str(list(SPLITS)) in message and repr(split) in message, message


EMPTY = [(e, s) for e in registered_env_ids() for s in SPLITS if pack_of(e).split_sizes[s] == 0]


@pytest.mark.skipif(not EMPTY, reason="no registered env has an empty split (SOP-Bench domains do; set SOPBENCH_DIR)")
@pytest.mark.parametrize(("env_id", "split"), EMPTY or [("none", "none")])
@pytest.mark.parametrize("with_index", [False, True])
def test_empty_split_says_which_splits_have_tasks(env_id, split, with_index):
    options = {"split": split, **({"task_index": 0} if with_index else {})}
    message = reset_error(env_id, options)
    assert f"split {split!r}" in message and "has no tasks" in message and "'test'" in message, message


@pytest.mark.parametrize("index", ["0", 1.0, 0.5, True, None, [0]])
def test_task_index_that_is_not_an_int_names_the_form(env_id, index):
    message = reset_error(env_id, {"split": posable_split(env_id), "task_index": index})
    assert "task_index'] must be an int" in message and f"got {index!r} of type {type(index).__name__}" in message, message


def test_task_index_out_of_range_names_the_range(env_id):
    split = posable_split(env_id)
    size = pack_of(env_id).split_sizes[split]
    for index in (-1, size):
        message = reset_error(env_id, {"split": split, "task_index": index})
        assert f"must be an int in [0, {size})" in message and f"got {index}" in message, message
