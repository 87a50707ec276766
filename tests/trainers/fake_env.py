"""A small gymnasium env following the sopgym contract, for trainer tests that must not depend on envs/.

Task (seeded): the user gives a key; ``lookup(key)`` returns a colour; the answer is that colour.
The oracle calls lookup, then submit_answer. Reward 1 for the right colour, else 0.
"""

from __future__ import annotations

import json
import re
import zlib

import gymnasium

COLOURS = ["red", "blue"]
TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "submit_answer", "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}}}},
]
CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


class FakeSopEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, max_turns: int = 4, training_allowed: bool = True, fail_infra_seed: int | None = None,
                 shaped: bool = False, num_keys: int = 100, fixed_value: str | None = None, **_):
        self.observation_space = gymnasium.spaces.Text(10000)
        self.action_space = gymnasium.spaces.Text(10000)
        self.max_turns = max_turns
        self.training_allowed = training_allowed
        self.fail_infra_seed = fail_infra_seed
        self.fixed_value = fixed_value  # every key maps to this colour (a learnable preference for RL tests)
        self.num_keys = num_keys  # fewer keys: easier copying, so a tiny model starts with partial success
        self.shaped = shaped  # a truncated episode earns (len(last reply) % 7) / 7: varied rewards for random models

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_ = seed
        self.key = f"k{int(self.np_random.integers(0, self.num_keys))}"
        self.value = COLOURS[int(self.np_random.integers(0, len(COLOURS)))]
        if self.fixed_value is not None:
            self.value = self.fixed_value
        self.turns = 0
        self.answer = None
        self.statuses = []
        self.done = False
        self.messages = [
            {"role": "system", "content": "SOP: look up the key, then submit its colour."},
            {"role": "user", "content": f"key: {self.key}"},
        ]
        info = {
            "task_id": f"fake-{seed}", "domain": "fake", "split": (options or {}).get("split", "train"),
            "difficulty": "easy", "messages": list(self.messages), "tools": TOOLS, "max_turns": self.max_turns,
            "license": "test", "training_allowed": self.training_allowed, "status": "OK",
        }
        return "", info

    def step(self, action):
        self.turns += 1
        self.messages.append({"role": "assistant", "content": action})
        calls = CALL_RE.findall(action)
        status, reward, terminated = "OK", 0.0, False
        components = {}
        infra = self.fail_infra_seed is not None and self.seed_ == self.fail_infra_seed
        if not calls:
            status = "NO_TOOL_CALL"
            self.messages.append({"role": "user", "content": "Please call a tool."})
        for n, raw in enumerate(calls):
            try:
                call = json.loads(raw)
                name, args = call["name"], call.get("arguments", {})
            except (ValueError, KeyError, TypeError):
                status = "ERROR_PARSE"
                self.messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "parse error"})
                continue
            if name == "lookup":
                out = self.value if args.get("key") == self.key else "unknown key"
                self.messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": out})
            elif name == "submit_answer":
                self.answer = {"answer": args.get("answer")}
                ok = str(args.get("answer")) == self.value
                reward, terminated, status = float(ok), True, "SUBMITTED"
                components = {"correct": float(ok)}
                break
            else:
                status = "ERROR_UNKNOWN_TOOL"
                self.messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "unknown tool"})
        self.statuses.append(status)
        truncated = not terminated and self.turns >= self.max_turns
        if truncated:
            components = {"correct": 0.0}
            if self.shaped:
                reward = (len(action) % 7) / 7
                components["shaped"] = reward
        info = {
            "status": "TRUNCATED_MAX_TURNS" if truncated else status, "status_message": "",
            "messages": list(self.messages), "reward_components": components,
            "truncation_cause": "max_turns" if truncated else None, "infrastructure_failure": infra,
        }
        if terminated or truncated:
            info["episode"] = self._record(terminated, "max_turns" if truncated else None, infra, reward)
        return "", reward, terminated, truncated, info

    def _record(self, terminated, cause, infra, reward):
        self.done = True
        return {
            "task_id": f"fake-{self.seed_}", "answer": self.answer, "expected": {"answer": self.value},
            "fields": [{"name": "answer", "type": "string"}], "turns": self.turns, "terminated": terminated,
            "truncated": cause is not None, "truncation_cause": cause, "statuses": list(self.statuses),
            "infrastructure_failure": infra, "reward": reward,
        }

    def end_episode(self, cause="stopped", message=""):
        """The sopgym contract: end now, scored like an unanswered episode (see SOPEnv.end_episode)."""
        from sopgym.status import END_CAUSES, INFRASTRUCTURE

        infra = END_CAUSES[cause] in INFRASTRUCTURE
        status = END_CAUSES[cause].value
        info = {
            "status": status, "turn_status": None, "status_message": message, "messages": list(self.messages),
            "reward_components": {"correct": 0.0}, "truncation_cause": cause, "infrastructure_failure": infra,
        }
        info["episode"] = self._record(False, cause, infra, 0.0)
        return "", 0.0, False, True, info


def oracle_reply(messages) -> str:
    """The fake env's oracle: lookup first, then submit what the tool said."""
    last = messages[-1]
    if last["role"] == "tool":
        return "<tool_call>" + json.dumps({"name": "submit_answer", "arguments": {"answer": last["content"]}}) + "</tool_call>"
    key = messages[1]["content"].split(": ")[1]
    return "<tool_call>" + json.dumps({"name": "lookup", "arguments": {"key": key}}) + "</tool_call>"


class FakeOracle:
    """The ``make_policy("oracle")`` interface: ``reset(info)`` then ``act(observation, info)``.

    ``wrong_rate`` makes a noisy demonstrator: on that share of tasks (chosen by a hash of the task id)
    it submits "red" whatever the lookup said, a systematic mistake that RL can then unlearn.
    """

    def __init__(self, wrong_rate: float = 0.0):
        self.wrong_rate = wrong_rate

    def reset(self, info):
        self.messages = list(info["messages"])
        self.wrong = zlib.crc32(str(info["task_id"]).encode()) % 1000 < 1000 * self.wrong_rate

    def act(self, observation, info):
        if "messages" in info and len(info["messages"]) >= len(self.messages):
            self.messages = list(info["messages"])
        if self.wrong and self.messages[-1]["role"] == "tool":
            return "<tool_call>" + json.dumps({"name": "submit_answer", "arguments": {"answer": "red"}}) + "</tool_call>"
        return oracle_reply(self.messages)


gymnasium.register("sopgym-test/Fake-v0", entry_point=FakeSopEnv, disable_env_checker=True)
