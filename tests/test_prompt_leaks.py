"""What an agent may see (issue 12): bookkeeping never reaches a model's prompt.

A model sees the observation, ``info["messages"]`` and ``info["tools"]`` (docs/environments.md, "What
an agent may see"). Everything else in ``info`` is bookkeeping for trainers and evaluators:
``info["difficulty"]`` predicts the label in several domains. Here every task-derived bookkeeping
value (difficulty, meta, task id) is replaced by a unique sentinel, episodes are played through
every registered env and through the code that builds prompts from them, and no sentinel may show
up in anything a model is given.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
from hostile_actions import make_env_without_docker

from sopgym.envs.policies import format_call, make_policy
from sopgym.envs.registration import registered_env_ids
from sopgym.sop_tasks.pack import SUBMIT_TOOL

REPO = Path(__file__).resolve().parents[1]
SENTINELS = {"difficulty": "SENTINEL-DIFFICULTY-7f3a", "meta": "SENTINEL-META-91c2"}


def make(env_id, **kwargs):
    env = make_env_without_docker(env_id, **kwargs)
    pick = env.unwrapped._pick_task

    def pick_with_sentinels(options):
        task = pick(options)
        return dataclasses.replace(task, difficulty=SENTINELS["difficulty"], meta={**task.meta, "sentinel": SENTINELS["meta"]})

    env.unwrapped._pick_task = pick_with_sentinels
    return env


def _leaks(text, task_id):
    return [s for s in [*SENTINELS.values(), task_id] if s in text]


def _scripted_replies(info, task_answer):
    """A few mistakes, a tool call, then the right answer: every rendering path the env has."""
    tool = info["tools"][0]["function"]["name"]
    return [
        "I will look this up first.",
        "<tool_call>{not json</tool_call>",
        format_call("no_such_tool", {}),
        format_call(tool, {}),
        format_call(SUBMIT_TOOL, {"nonsense": 1}),
        format_call(SUBMIT_TOOL, dict(task_answer)),
    ]


def _play(env, replies_for):
    """Reset, play, and return every text a model would be given, plus the task id and the final info."""
    obs, info = env.reset(seed=0, options={"split": "test", "task_index": 0})
    seen = [obs, json.dumps(info["messages"]), json.dumps(info["tools"])]
    replies = replies_for(obs, info)
    done, last = False, info
    while not done:
        obs, _, terminated, truncated, last = env.step(replies(obs, last))
        seen += [obs, json.dumps(last["messages"])]
        done = terminated or truncated
    return seen, info["task_id"], last


def _check_no_leaks(env, env_id):
    def replies_for(obs, info):
        script = iter(_scripted_replies(info, env.unwrapped._task.answer))
        if env_id.startswith("sopgym/"):  # a few mistakes, then the oracle: every tool's output is rendered
            policy = make_policy("oracle")
            policy.reset(info)
            script = iter(list(script)[:3])
            return lambda o, i: next(script, None) or policy.act(o, i)
        return lambda o, i: next(script)

    seen, task_id, last = _play(env, replies_for)
    assert last["episode"]["difficulty"] == SENTINELS["difficulty"]  # the sentinel really was the task's difficulty
    leaks = {s for text in seen for s in _leaks(text, task_id)}
    assert not leaks, f"bookkeeping values in what a model sees: {sorted(leaks)}"
    env.close()


def test_prompts_and_observations_never_carry_bookkeeping_values(env_id):
    _check_no_leaks(make(env_id), env_id)


@pytest.mark.parametrize("env_id", registered_env_ids("sopbench"))
def test_upstream_style_prompts_never_carry_bookkeeping_values(env_id):
    _check_no_leaks(make(env_id, prompt_style="upstream"), env_id)


@pytest.mark.parametrize("tools_mode", ["native", "prompt"])
def test_the_openai_client_sends_only_messages_and_tools(env_id, tools_mode):
    """The model agent (sopgym/agents: ``ChatAgent`` over ``OpenAIChatModel``, through the episode runner)
    builds its requests from the env's messages and tools; its transport is replaced by one that records
    each request body and answers with a tool call, then the task's answer."""
    pytest.importorskip("openai")
    from sopgym.agents.chat import ChatAgent
    from sopgym.agents.openai_answers import Answer
    from sopgym.agents.openai_chat import OpenAIChatConfig, OpenAIChatModel
    from sopgym.episodes.pools import EnvPool
    from sopgym.episodes.runner import run_episodes
    from sopgym.episodes.specs import EpisodeSpec

    bodies, envs = [], []

    class Recording(OpenAIChatModel):
        def _send(self, request):
            body = self._body(request)
            bodies.append(json.dumps(body))
            tools = body.get("tools") or [{"function": {"name": "no_tools"}}]
            answer = envs[0].unwrapped._task.answer
            reply = format_call(tools[0]["function"]["name"], {}) if len(bodies) == 1 else format_call(SUBMIT_TOOL, answer)
            return Answer({"role": "assistant", "content": reply}, "stop")

    def make_env(env_id_):
        envs.append(make(env_id_))
        return envs[-1]

    model = Recording(OpenAIChatConfig("http://127.0.0.1:9/v1", "m", max_retries=0))
    model._ready = True  # no server to wait for: the transport above answers
    spec = EpisodeSpec(env_id, 0, {"split": "test", "task_index": 0})
    (result,) = run_episodes([spec], ChatAgent(model, tools_mode=tools_mode), EnvPool(make_env))
    model.close()
    assert result.record["difficulty"] == SENTINELS["difficulty"] and bodies
    leaks = {s for body in bodies for s in _leaks(body, result.record["task_id"])}
    assert not leaks, f"bookkeeping values in a request body: {sorted(leaks)}"


# Modules whose output is a model's input (prompt text, chat-template input, request bodies, tool messages).
PROMPT_BUILDERS = [
    "sopgym/envs/rendering.py", "sopgym/sop_tasks/pack.py", "sopgym/sopbench/prompts.py", "sopgym/trainers/episodes.py",
    "sopgym/agents/chat.py", "sopgym/agents/tool_prompt.py", "sopgym/agents/openai_chat.py", "sopgym/agents/hf_local.py",
    "sopgym/policy/hf.py", "sopgym/trainers/rollout.py", "sopgym/trainers/sft.py",
]
BOOKKEEPING_ONLY = {"difficulty", "meta", "expected", "expected_state", "answer"}


def _reads(tree, key):
    """Reads of ``key`` as a subscript (``x["key"]``), a ``.get("key")`` or an attribute (``x.key``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == key:
            yield node.lineno
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == key):
            yield node.lineno
        elif isinstance(node, ast.Attribute) and node.attr == key and isinstance(node.ctx, ast.Load):
            yield node.lineno


@pytest.mark.parametrize("module", PROMPT_BUILDERS)
def test_prompt_builders_never_read_bookkeeping_only_keys(module):
    """A static check over the code that builds prompts, beside the behavioural tests above: none of it
    reads the keys that must never reach a model (``pack.py``: only ``user_message`` and ``system``
    presentation functions are prompt builders, so only they are checked there)."""
    tree = ast.parse((REPO / module).read_text(encoding="utf-8"))
    if module == "sopgym/sop_tasks/pack.py":
        tree = ast.Module(body=[n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in ("user_message", "submit_spec")],
                          type_ignores=[])
        assert tree.body, "DomainPack.user_message not found"
    found = {key: list(_reads(tree, key)) for key in BOOKKEEPING_ONLY}
    assert not any(found.values()), f"{module} reads bookkeeping-only keys at lines {found}"


def test_the_leak_check_fires_on_an_env_that_renders_the_difficulty(monkeypatch):
    from sopgym.envs.env import SOPEnv

    reset = SOPEnv.reset

    def leaky_reset(self, **kwargs):
        obs, info = reset(self, **kwargs)
        return obs + f"\n(difficulty: {self._task.difficulty})", info

    monkeypatch.setattr(SOPEnv, "reset", leaky_reset)
    env_id = "sopgym/WarehouseReceiving-v0"
    with pytest.raises(AssertionError, match="SENTINEL-DIFFICULTY"):
        _check_no_leaks(make(env_id), env_id)


def test_the_static_check_finds_each_form_of_read():
    tree = ast.parse("a = info['difficulty']\nb = info.get('difficulty')\nc = task.difficulty\nd = info['messages']\n")
    assert list(_reads(tree, "difficulty")) == [1, 2, 3]
