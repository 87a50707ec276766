"""The training reward never credits what the independent evaluator would not.

An adversarial corpus of answers (substrings of the right value, several values in one field, every
allowed value at once, wrong types, extra and missing fields, null-like strings, JSON hidden in text,
case and Unicode lookalikes) is scored by the reward and by the evaluator, both directly and through
the env's submit path, on every authored domain.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from sopgym.envs.registration import registered_env_ids
from sopgym.envs.reward import outcome_components, outcome_reward
from sopgym.evaluation import score_record
from sopgym.sop_tasks.registry import get_pack

AUTHORED_ENV_IDS = registered_env_ids("sopgym")


def _variants(value, field):
    """Adversarial values for one field, derived from the right one."""
    out = [None, "", "null", "None", "N/A", "unknown", 0, 1, True, False, [value], {"value": value}, json.dumps(value)]
    others = [e for e in (field.enum or ()) if e != value]
    if isinstance(value, str):
        out += [value[:1], value[:-1], value + "_", f" {value} ", value.lower(), value.upper(),
                value.replace("A", "\u0410").replace("a", "\u0430").replace("E", "\u0415").replace("O", "\u041e"),  # Cyrillic lookalikes
                "\u200b".join(value), value + "\u200b", "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value),  # fullwidth
                f"The answer is {json.dumps(value)}", f"```json\n{json.dumps(value)}\n```"]
        if others:
            out += [f"{value}, {others[0]}", f"{value} or {others[0]}", f"{others[0]}/{value}", " ".join(field.enum), list(field.enum)]
    elif isinstance(value, bool):
        out += ["true", "false", int(value)]
    elif isinstance(value, (int, float)):
        out += [str(value), value + 1, value + 1e-6, -value, float("nan"), f"{value} points", [value, value + 1]]
    return out


def adversarial_answers(answer, fields):
    yield dict(answer)  # control: fully right
    for f in fields:
        for bad in _variants(answer[f.name], f):
            yield {**answer, f.name: bad}
    yield {**answer, "extra_field": "x"}
    yield {k: v for k, v in list(answer.items())[:-1]}
    yield {}
    yield json.dumps(answer)
    yield f"Final answer: {json.dumps(answer)}"
    yield [answer]
    yield {k.upper(): v for k, v in answer.items()}
    yield {f.name: list(f.enum) if f.enum else answer[f.name] for f in fields}


def _record(pack, task, answer, final_state=None):
    return {
        "task_id": task.task_id, "domain": pack.name, "answer": answer, "expected": dict(task.answer),
        "fields": [{"name": f.name, "type": f.type, "enum": list(f.enum) if f.enum else None, "nullable": f.nullable} for f in pack.output_fields],
        "final_state": final_state, "expected_state": task.expected_state, "terminated": True, "truncated": False,
        "truncation_cause": None, "infrastructure_failure": False, "turns": 1, "statuses": ["SUBMITTED"],
        "num_tool_calls": 0, "num_tool_calls_ok": 0,
    }


def _assert_never_looser(components, reward_dense, reward_binary, verdict):
    for name, ok in verdict.fields.items():
        assert components[f"field/{name}"] <= float(ok), name
    assert reward_binary <= float(verdict.success)
    if reward_dense == 1.0:
        assert verdict.success


@pytest.mark.parametrize("env_id", AUTHORED_ENV_IDS)
def test_reward_function_never_exceeds_evaluator_credit(env_id):
    pack = get_pack(env_id.rsplit("-v", 1)[0])
    checked = 0
    for index in range(3):
        task = pack.task("test", index)
        final_state = task.expected_state  # the most favourable state: only the answer is adversarial
        for answer in adversarial_answers(task.answer, pack.output_fields):
            comps = outcome_components(answer, task.answer, pack.output_fields, final_state, task.expected_state)
            verdict = score_record(_record(pack, task, answer, final_state))
            _assert_never_looser(comps, outcome_reward("dense", comps), outcome_reward("binary", comps), verdict)
            checked += 1
    assert checked > 60


@pytest.mark.parametrize("env_id", AUTHORED_ENV_IDS)
def test_reward_through_the_env_never_exceeds_evaluator_credit(env_id):
    pack = get_pack(env_id.rsplit("-v", 1)[0])
    kwargs = {"code_runner": "inprocess"} if pack.verifiable else {}
    dense, binary = gym.make(env_id, **kwargs), gym.make(env_id, reward="binary", **kwargs)
    task = pack.task("test", 0)
    ended = 0
    for answer in adversarial_answers(task.answer, pack.output_fields):
        action = "<tool_call>" + json.dumps({"name": "submit_answer", "arguments": answer}) + "</tool_call>"
        results = []
        for env in (dense, binary):
            env.reset(options={"task_id": task.task_id})
            results.append(env.step(action))
        (_, r_dense, term, _, info), (_, r_binary, _, _, _) = results
        if not term:
            assert info["turn_status"] in ("ERROR_BAD_ARGUMENTS", "ERROR_PARSE")
            continue
        ended += 1
        verdict = score_record(info["episode"])
        _assert_never_looser(info["reward_components"], r_dense, r_binary, verdict)
    assert ended >= 1  # at least the right answer is accepted
