"""A contextual bandit behind the sopgym env contract: the RL sanity test's env (registered here only).

Task (seeded): the user message names one of two arms (``tool: lookup`` or ``tool: submit``); the
episode is one turn, and the reply's first word is the arm it pulls. Reward 1 and success when that is
the named arm, else 0 (any other reply pulls no arm). The verifiable answer is in the prompt: a policy
needs only to read its context and copy one word, so GRPO's gain from a policy that ignores the
context is certain, which is what the RL sanity test asserts.

:class:`BlindDemonstrator` is the weak start's teacher: it names one of the two arms at random (by a
hash of the task id), whatever the context says, so SFT on it gives a policy that pulls an arm on
nearly every reply and the right one about half the time.

It speaks the same API as sopgym's envs (``reset`` with ``info['messages']`` and ``tools``, ``step``
on the reply's text, an ``info['episode']`` record the evaluator scores, ``end_episode``), so the
trainer drives it through its real rollout path.
"""

from __future__ import annotations

import zlib

import gymnasium

ARMS = ("lookup", "submit")
"""Single tokens of the tests' tiny BPE (helpers.tiny_tokenizer)."""
ID = "sopgym-test/Bandit-v0"


def pulled_arm(reply: str) -> str | None:
    """The arm a reply pulls: its first word, when that is an arm."""
    words = reply.split()
    return words[0] if words and words[0] in ARMS else None


class BlindDemonstrator:
    """The ``make_policy("oracle")`` interface (``reset(info)``, ``act(observation, info)``): replies
    with an arm drawn by a hash of the task id, ignoring the context (right on about half the tasks)."""

    def reset(self, info):
        self.arm = ARMS[zlib.crc32(str(info["task_id"]).encode()) % len(ARMS)]

    def act(self, observation, info):
        return self.arm


class ContextualBanditEnv(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, **_):
        self.observation_space = gymnasium.spaces.Text(10000)
        self.action_space = gymnasium.spaces.Text(10000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_ = seed
        self.arm = ARMS[(seed or 0) % len(ARMS)]  # consecutive seeds alternate: every batch holds both contexts equally
        self.messages = [
            {"role": "system", "content": "SOP: reply with the name of the tool the case asks for."},
            {"role": "user", "content": f"tool: {self.arm}"},
        ]
        info = {
            "task_id": f"bandit-{seed}", "domain": "bandit", "split": (options or {}).get("split", "train"),
            "difficulty": "easy", "messages": list(self.messages), "tools": [], "max_turns": 1,
            "license": "test", "training_allowed": True, "status": "OK",
        }
        return "", info

    def step(self, action):
        self.messages.append({"role": "assistant", "content": action})
        arm = pulled_arm(action)
        reward = float(arm == self.arm)
        info = {
            "status": "SUBMITTED", "status_message": "", "messages": list(self.messages),
            "reward_components": {"correct": reward}, "truncation_cause": None, "infrastructure_failure": False,
            "episode": self._record(arm, True, None, reward),
        }
        return "", reward, True, False, info

    def _record(self, arm, terminated, cause, reward):
        return {
            "task_id": f"bandit-{self.seed_}", "answer": {"arm": arm}, "expected": {"arm": self.arm},
            "fields": [{"name": "arm", "type": "string"}], "turns": 1 if terminated else 0, "terminated": terminated,
            "truncated": cause is not None, "truncation_cause": cause, "statuses": ["SUBMITTED"] if terminated else [],
            "infrastructure_failure": False, "reward": reward,
        }

    def end_episode(self, cause="stopped", message=""):
        """The sopgym contract: end now, scored like an unanswered episode (see SOPEnv.end_episode)."""
        from sopgym.status import END_CAUSES, INFRASTRUCTURE

        infra = END_CAUSES[cause] in INFRASTRUCTURE
        info = {
            "status": END_CAUSES[cause].value, "turn_status": None, "status_message": message, "messages": list(self.messages),
            "reward_components": {"correct": 0.0}, "truncation_cause": cause, "infrastructure_failure": infra,
        }
        info["episode"] = self._record(None, False, cause, 0.0)
        return "", 0.0, False, True, info


gymnasium.register(ID, entry_point=ContextualBanditEnv, disable_env_checker=True)
