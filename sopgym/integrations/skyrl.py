"""sopgym envs as SkyRL environments (``skyrl_gym``'s ``BaseTextEnv``). Needs ``pip install sopgym[skyrl]``.

Example:
    >>> import skyrl_gym  # doctest: +SKIP
    >>> from sopgym.integrations.skyrl import register_skyrl_envs, skyrl_rows
    >>> register_skyrl_envs()  # every sopgym id becomes a skyrl_gym id  # doctest: +SKIP
    >>> row = skyrl_rows("sopgym/WarehouseReceiving-v0", "train", 1)[0]  # doctest: +SKIP
    >>> env = skyrl_gym.make(row["env_class"], env_config={}, extras=row)  # doctest: +SKIP
    >>> chat, _ = env.init(row["prompt"])  # system (SOP + tool schemas) and user messages  # doctest: +SKIP
    >>> out = env.step("<tool_call>{...}</tool_call>")  # observations, reward, done, metadata  # doctest: +SKIP

How the SkyRL API maps onto sopgym's:

* ``init(prompt)`` resets the sopgym env to the row's task (``extras``: ``seed``, ``split``,
  ``task_index``, as :func:`skyrl_rows` writes them) and returns sopgym's initial chat. SkyRL's
  generator applies the chat template without ``tools=``, so the tool schemas (exact JSON Schema:
  enums, patterns, required fields) are appended to the system message in the Hermes/Qwen layout.
* ``step(action)`` is one sopgym ``step`` of the model's text: parsing, statuses, feedback for
  malformed or missing calls and the invalid-action penalty are sopgym's. Observations are the
  messages sopgym adds (``tool`` results, ``user`` feedback); the reward is the step's reward, so
  SkyRL's per-step rewards sum to sopgym's return; ``done`` is ``terminated or truncated``.
* ``get_metrics()`` (called by SkyRL after its loop) ends an episode SkyRL stopped early (its
  context ran out) with ``end_episode("context_budget")`` so every episode has a record, then
  reports the evaluator's success and the record's counts.

What SkyRL cannot express: ``BaseTextEnv`` has no way to mask a trajectory, so an infrastructure
failure (``ERROR_SANDBOX``) is *flagged* (``metadata["infrastructure_failure"]`` and the
``infrastructure_failure`` metric), not masked; filter such trajectories before the update.
The episode length is sopgym's ``max_turns`` (``env_config.env_kwargs``); the generator's
``max_turns`` (passed in ``extras``) is ignored, since SkyRL's default of 1 would end every episode
after one call.

Envs served elsewhere (``sopgym serve`` on another host): ``register_skyrl_envs(servers={env_id: URL})``
in the generator's process makes each env a session of that server (the token from
``$SOPGYM_SERVE_TOKEN``, or ``{"url": ..., "token": ...}``), and ``skyrl_rows(..., servers=...)``
renders the rows there; rows, rewards and records are the local env's (see
:mod:`sopgym.integrations._common`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_gym import register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import registry

from ._common import env_kwargs_of, episode_metrics, make_env, reset_from_row, servers_of, system_with_tools, task_rows

__all__ = ["SopgymTextEnv", "register_skyrl_envs", "skyrl_rows"]

ENTRY_POINT = "sopgym.integrations.skyrl:SopgymTextEnv"


class SopgymTextEnv(BaseTextEnv):
    """One sopgym episode as a SkyRL text env.

    Args:
        env_config: SkyRL's per-env config (a mapping or ``DictConfig``); its ``env_kwargs``, if any,
            go to ``gymnasium.make`` (e.g. ``{"reward": "binary", "invalid_action_penalty": 0.1}``),
            over the row's.
        extras: the dataset row (``seed``, ``split``, ``task_index``; ``env_kwargs`` as a JSON object
            string, as :func:`skyrl_rows` writes it; ``env_id`` when not registered through
            :func:`register_skyrl_envs`).
        env_id: the sopgym id (set by :func:`register_skyrl_envs`).
        servers: ``{env_id: URL}`` of envs served elsewhere (set by :func:`register_skyrl_envs`).

    Raises:
        ValueError: no env id, or a row that does not name a task.
        ConnectionError: a served env's server does not answer or refuses the session.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None, env_id: str | None = None,
                 servers: Mapping[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        env_id = env_id or extras.get("env_id")
        if not env_id:
            raise ValueError("expected the sopgym env id (register_skyrl_envs sets it, or extras['env_id']), got none")
        env_kwargs = env_kwargs_of(extras.get("env_kwargs"))
        if env_config is not None and "env_kwargs" in env_config:
            env_kwargs.update(env_kwargs_of(env_config["env_kwargs"]))
        self.env_id = env_id
        self.row = {**extras, "env_id": env_id}
        self.env = make_env(env_id, env_kwargs, servers)
        self.max_turns = getattr(self.env.unwrapped, "max_turns", None)  # a served env's: known at init()
        self.record: dict[str, Any] | None = None
        """The env's episode record once the episode is over (what sopgym's evaluator reads)."""
        self.total_reward = 0.0
        self._running = False

    def init(self, prompt: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset to the row's task; returns sopgym's initial chat with the tools in the system message.

        Raises:
            ValueError: the given prompt's user message is not the task's (a dataset built for other tasks).
        """
        row = dict(self.row)
        row.pop("prompt", None)  # compared below, on the user message only (the system one gains the tools)
        _, info = reset_from_row(self.env, row)
        users = [m.get("content") for m in prompt or () if m.get("role") == "user"]
        expected = [m["content"] for m in info["messages"] if m["role"] == "user"]
        if prompt and users != expected:
            raise ValueError(f"the prompt's user message is not the one {self.env_id} renders for task {info['task_id']}")
        self.max_turns = info["max_turns"]
        self.turns = 0
        self.total_reward = 0.0
        self.record = None
        self._running = True
        chat = system_with_tools(info["messages"], info["tools"])
        return chat, {"task_id": info["task_id"], "env_id": self.env_id, "domain": info["domain"], "tools": info["tools"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        _, reward, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated)
        self.total_reward += float(reward)
        # info["messages"] ends with [assistant reply, *what the env added]; the reply is SkyRL's own.
        messages = info["messages"]
        start = max(i for i, m in enumerate(messages) if m["role"] == "assistant") + 1
        observations = [] if done else [_observation(m) for m in messages[start:]]
        metadata = {
            "status": info["status"],
            "turn_status": info["turn_status"],
            "status_message": info["status_message"],
            "infrastructure_failure": bool(info["infrastructure_failure"]),
        }
        if done:
            self._finish(info)
            metadata["episode"] = self.record
        return BaseTextEnvStepOutput(observations=observations, reward=float(reward), done=done, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        """The episode's metrics; ends an episode SkyRL stopped early (``context_budget``) first."""
        if self._running:
            _, reward, _, _, info = self.env.unwrapped.end_episode("context_budget", "SkyRL stopped the episode (its context ran out)")
            self.total_reward += float(reward)
            self._finish(info)
        if self.record is None:
            return {}
        return episode_metrics(self.record)

    def close(self) -> None:
        self.env.close()

    def _finish(self, info: Mapping[str, Any]) -> None:
        self._running = False
        self.record = dict(info["episode"])


def _observation(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {"role": message["role"], "content": message["content"]}
    if message.get("name"):
        out["name"] = message["name"]
    return out


def register_skyrl_envs(env_ids: Sequence[str] | None = None, *, servers: Mapping[str, Any] | None = None) -> list[str]:
    """Register sopgym ids as ``skyrl_gym`` ids of the same name: ``env_ids``, else the ids of
    ``servers``, else every registered sopgym id.

    With ``servers`` (``{env_id: URL}``, or ``{env_id: {"url": ..., "token": ...}}``), each env
    ``skyrl_gym.make`` builds for those ids is a session of that ``sopgym serve`` server. Idempotent:
    registering an id again (from this function) sets where its envs run. Returns the ids.

    Raises:
        ValueError: an id is registered in ``skyrl_gym`` by something else; a bad ``servers``.
    """
    from sopgym.envs.registration import registered_env_ids

    served = servers_of(servers)
    ids = list(env_ids) if env_ids is not None else list(served) if served is not None else registered_env_ids()
    for env_id in ids:
        kwargs = {"env_id": env_id} if served is None else {"env_id": env_id, "servers": served}
        existing = registry.get(env_id)
        if existing is not None:
            if existing.entry_point != ENTRY_POINT:
                raise ValueError(f"skyrl_gym id {env_id!r} is already registered to {existing.entry_point!r}, expected {ENTRY_POINT!r}")
            existing.kwargs = kwargs
            continue
        register(id=env_id, entry_point=ENTRY_POINT, kwargs=kwargs)
    return ids


def skyrl_rows(env_id: str | Sequence[str], split: str = "train", num_tasks: int = 64, *,
               env_kwargs: Mapping[str, Any] | None = None, servers: Mapping[str, Any] | None = None,
               **kwargs: Any) -> list[dict[str, Any]]:
    """SkyRL dataset rows: :func:`~sopgym.integrations._common.task_rows` plus ``env_class`` (the
    skyrl_gym id) and ``env_kwargs`` (JSON: SkyRL's trainer config has no per-env section for
    ids it does not know); every column but ``prompt`` and ``env_class`` reaches the env as ``extras``.
    ``prompt`` is the chat ``init`` returns (the tool schemas in the system message), so SkyRL's dataset
    length filter measures the prompt its generator really sends. With ``servers`` (``{env_id: URL}``)
    the rows are rendered by the servers, and equal those of the same envs made here.
    Keyword arguments go to ``task_rows``."""
    rows = task_rows(env_id, split, num_tasks, env_kwargs=env_kwargs, servers=servers, **kwargs)
    encoded = json.dumps(dict(env_kwargs or {}), sort_keys=True)
    tools: dict[str, list] = {}
    for one in {row["env_id"] for row in rows}:
        env = make_env(one, env_kwargs, servers)
        try:
            tools[one] = env.reset(seed=0)[1]["tools"]
        finally:
            env.close()
    # The prompt as init() returns it (tool schemas in the system message), so that SkyRL's PromptDataset
    # length filter measures what the generator sends.
    return [{**row, "prompt": system_with_tools(row["prompt"], tools[row["env_id"]]), "env_class": row["env_id"],
             "env_kwargs": encoded} for row in rows]
