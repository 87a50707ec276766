"""What every adapter shares: task rows, resetting an env from a row, and the tool block of a system message.

A *task row* names one episode the way the one runner does (:func:`sopgym.episodes.specs.task_specs`):
env id, split, task index and reset seed, plus the task id and the initial chat (``prompt``) that
``reset`` gives for them. Libraries keep rows in their datasets; adapters reset their env from a row
with :func:`reset_from_row`, so a row always means the same task, seed and tool answers as
``gymnasium.make(env_id).reset(seed=row["seed"], options={"split": ..., "task_index": ...})``.

*Served envs*: every adapter takes ``servers={env_id: URL}`` (or ``{env_id: {"url": ..., "token": ...}}``)
to play an env that ``sopgym serve`` runs on another host instead of one made here: its envs are
``gymnasium.make("sopgym/Remote-v0", env_id=..., url=..., token=...)`` sessions of that server (token:
``$SOPGYM_SERVE_TOKEN`` unless given), and the rows still name the served env's own id, so a dataset is
the same whether its episodes run here or there. A served env's kwargs are the server's (``sopgym
serve --env-arg``); the reward is the server's; records come without the expected answer and state
unless the server sends them (``--send-ground-truth``), and then :func:`episode_metrics` has no
``success``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .protocol import TOKEN_ENV, WITHHELD_KEY

__all__ = ["ROW_KEYS", "REMOTE_ENV_ID", "task_rows", "make_env", "servers_of", "env_id_of", "reset_from_row", "tool_call_message",
           "system_with_tools", "episode_metrics", "success_of", "env_kwargs_of"]

#: The columns that identify an episode (``task_id`` and ``prompt`` are derived from them).
ROW_KEYS = ("env_id", "split", "task_index", "seed")
#: The gymnasium id of a session of a sopgym env server (:mod:`sopgym.integrations.remote_env`).
REMOTE_ENV_ID = "sopgym/Remote-v0"
#: What a server entry of ``servers=`` may hold: :class:`~sopgym.integrations.remote_env.RemoteSOPEnv`'s arguments.
SERVER_KEYS = ("url", "token", "connect_timeout_s", "step_timeout_s")


def servers_of(servers: Mapping[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """``servers=`` as ``{env id: RemoteSOPEnv kwargs}``: each value a URL, or a mapping of
    :data:`SERVER_KEYS` (``url`` required); None stays None (every env is made here).

    Raises:
        ValueError: a value that is neither, an unknown key, or a key that is not a served env id.
    """
    if servers is None:
        return None
    if not isinstance(servers, Mapping):
        raise ValueError(f"servers must map env ids to server URLs, got {type(servers).__name__}")
    out = {}
    for env_id, server in servers.items():
        if env_id == REMOTE_ENV_ID:
            raise ValueError(f"servers= is keyed by the served env's own id (what `sopgym serve --env` was given), got {env_id!r}")
        entry = {"url": server} if isinstance(server, str) else dict(server) if isinstance(server, Mapping) else {}
        if not isinstance(entry.get("url"), str) or set(entry) - set(SERVER_KEYS):
            got = f"keys {sorted(entry)}" if isinstance(server, Mapping) else repr(server)
            raise ValueError(f"servers[{env_id!r}] must be a URL, or a mapping with 'url' and optionally {list(SERVER_KEYS[1:])}; got {got}")
        out[str(env_id)] = entry
    return out


def _refuse_remote_id(env_id: str, env_kwargs: Mapping[str, Any] | None) -> None:
    """The adapters name episodes by the served env's own id; a ``sopgym/Remote-v0`` id is refused with the call to make."""
    if env_id != REMOTE_ENV_ID:
        return
    kwargs = dict(env_kwargs or {})
    served, url = kwargs.get("env_id", "sopgym/ID"), kwargs.get("url", "http://HOST:PORT")
    raise ValueError(
        f"the adapters take the served env's own id and its server, not {REMOTE_ENV_ID!r}: rows name episodes by the "
        f"served env's id, so that a dataset is the same wherever its envs run; expected env_id={served!r} with "
        f"servers={{{served!r}: {url!r}}} (the token from ${TOKEN_ENV}, or {{'url': ..., 'token': ...}})")


def make_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None, servers: Mapping[str, Any] | None = None):
    """``gymnasium.make(env_id, **env_kwargs)`` with sopgym's ids registered (the one env factory,
    :class:`~sopgym.episodes.factory.EnvFactory`); with ``servers``, a session
    of the server that serves ``env_id`` instead (``sopgym/Remote-v0``; see the module doc).

    Raises:
        ValueError: ``env_id`` is ``sopgym/Remote-v0``; ``servers`` names no server for ``env_id``; env
            kwargs for a served env (they are the server's); or a server serving another env.
        ConnectionError: no sopgym server answers at the URL, or it refuses the session.
    """
    import gymnasium

    import sopgym  # noqa: F401  (registers the sopgym/* ids)
    from sopgym.episodes.factory import EnvFactory

    _refuse_remote_id(env_id, env_kwargs)
    served = servers_of(servers)
    if served is None:
        return EnvFactory(env_kwargs)(env_id)
    if env_id not in served:
        raise ValueError(f"servers= names no server for {env_id!r}; expected one of its keys {sorted(served)}")
    if env_kwargs:
        raise ValueError(
            f"{env_id} is served from {served[env_id]['url']}: its env kwargs are the server's (`sopgym serve --env-arg "
            f"KEY=VALUE`), so none can be given here; got env_kwargs {dict(env_kwargs)!r}")
    return gymnasium.make(REMOTE_ENV_ID, env_id=env_id, **served[env_id])


def env_id_of(env) -> str | None:
    """The id of the sopgym env that ``env`` plays: its own, or the served env's for ``sopgym/Remote-v0``."""
    spec = getattr(env, "spec", None)
    if spec is not None and spec.id == REMOTE_ENV_ID:
        return env.unwrapped.env_id
    return spec.id if spec is not None else None


def env_kwargs_of(value: Any) -> dict[str, Any]:
    """``gymnasium.make`` kwargs kept in a dataset column: a JSON object string (what the row helpers
    write, since Parquet cannot store an empty struct), a mapping, or nothing.

    Raises:
        ValueError: anything else, or JSON that is not an object.
    """
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"env_kwargs must be a JSON object or a mapping, got {type(value).__name__}")
    return dict(value)


def task_rows(
    env_id: str | Sequence[str],
    split: str = "train",
    num_tasks: int = 64,
    *,
    seed: int = 0,
    first_task: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    allow_restricted: bool = False,
    servers: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Rows for tasks ``first_task .. first_task+num_tasks-1`` of ``split`` of each env id.

    Each row: ``env_id``, ``split``, ``task_index``, ``seed`` (the runner's :func:`episode_seed`, as
    every benchmark run uses), ``task_id``, and ``prompt``: the initial chat (system message with
    the SOP, user message with the task inputs) exactly as ``reset`` renders it.

    Args:
        env_id: one registered id or several (rows of each, env-major).
        split: ``train``, ``val`` or ``test``.
        num_tasks: tasks per env id.
        seed: the run seed the per-episode seeds derive from.
        first_task: index of the first task.
        env_kwargs: passed to ``gymnasium.make``.
        allow_restricted: also return tasks whose licence forbids training (``training_allowed``
            False, e.g. SOP-Bench); for evaluation only.
        servers: ``{env id: URL}`` of envs served elsewhere (the module doc): their rows are rendered
            by the server, and equal the rows of the same env made here.

    Returns:
        The rows, in order.

    Raises:
        ValueError: a bad count, more tasks than the split holds (a served env's server refuses the
            first index past it), or a task whose licence forbids training while ``allow_restricted`` is False.
    """
    from sopgym.episodes.specs import task_specs

    env_ids = [env_id] if isinstance(env_id, str) else list(env_id)
    if not env_ids:
        raise ValueError("expected at least one env id, got none")
    rows = []
    for one in env_ids:
        env = make_env(one, env_kwargs, servers)
        try:
            pack = getattr(env.unwrapped, "pack", None)  # a served env's split sizes are the server's
            size = pack.num_tasks(split) if pack is not None else None
            if size is not None and first_task + num_tasks > size:
                raise ValueError(f"split {split!r} of {one} has {size} tasks; asked for tasks {first_task}..{first_task + num_tasks - 1}")
            for spec in task_specs(one, split, num_tasks, 1, seed, first_task):
                assert spec.options is not None and spec.seed is not None  # task_specs names and seeds each task
                _, info = env.reset(seed=spec.seed, options=dict(spec.options))
                if not info.get("training_allowed", False) and not allow_restricted:
                    raise ValueError(
                        f"{one} task {info['task_id']} has training_allowed=False (licence {info.get('license')!r}); "
                        "expected trainable tasks (pass allow_restricted=True only for evaluation)"
                    )
                rows.append({
                    "env_id": one,
                    "split": split,
                    "task_index": int(spec.options["task_index"]),
                    "seed": int(spec.seed),
                    "task_id": info["task_id"],
                    "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]],
                })
        finally:
            env.close()
    return rows


def reset_from_row(env, row: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Reset ``env`` to the episode a task row names. Returns ``reset``'s ``(observation, info)``.

    Raises:
        ValueError: the row lacks a key, names another env, or its ``task_id``/``prompt`` (when
            present) differ from what the env renders for it (a dataset built by another version).
    """
    missing = [k for k in ROW_KEYS if k not in row or row[k] is None]
    if missing:
        raise ValueError(f"a task row needs {list(ROW_KEYS)}; missing {missing} in {sorted(row)}")
    env_id = env_id_of(env)
    if env_id is not None and row["env_id"] != env_id:
        raise ValueError(f"row is for {row['env_id']!r}, but this env is {env_id!r}")
    observation, info = env.reset(seed=int(row["seed"]), options={"split": str(row["split"]), "task_index": int(row["task_index"])})
    if row.get("task_id") is not None and row["task_id"] != info["task_id"]:
        raise ValueError(f"row's task_id {row['task_id']!r} != the env's {info['task_id']!r} for the same split/index/seed")
    prompt = row.get("prompt")
    if prompt is not None:
        expected = [m["content"] for m in info["messages"]]
        got = [m.get("content") for m in prompt]
        if got != expected:
            raise ValueError(f"row's prompt differs from the chat {row['env_id']} renders for task {info['task_id']} (rebuild the dataset)")
    return observation, info


def tool_call_message(name: str, arguments: Any) -> dict[str, Any]:
    """An assistant message with one structured tool call (what a library's parsed call becomes)."""
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


_TOOLS_HEADER = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
)


def system_with_tools(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The chat with the tool schemas (exact JSON, one per line, Hermes/Qwen layout) appended to the
    system message, for libraries that apply the chat template without ``tools=``."""
    out = [dict(m) for m in messages]
    if not out or out[0].get("role") != "system":
        raise ValueError(f"expected the chat to start with a system message, got role {out[0].get('role') if out else None!r}")
    block = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    out[0]["content"] = out[0]["content"] + _TOOLS_HEADER + block + _TOOLS_FOOTER
    return out


def success_of(record: Mapping[str, Any]) -> bool | None:
    """The evaluator's success of an episode record; None for a record of a served env without its
    ground truth (a server started without ``--send-ground-truth``): it cannot be judged here."""
    from sopgym.evaluation.metrics import score_record

    if record.get(WITHHELD_KEY):
        return None
    return bool(score_record(dict(record)).success)


def episode_metrics(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a library logs per episode: the evaluator's success (absent when the record's ground truth
    was withheld by its server: :func:`success_of`) and the record's counts."""
    success = success_of(record)
    return {
        **({} if success is None else {"success": float(success)}),
        "reward": float(record["reward"]),
        "turns": int(record["turns"]),
        "num_tool_calls": int(record["num_tool_calls"]),
        "num_invalid_actions": int(record["num_invalid_actions"]),
        "infrastructure_failure": float(bool(record["infrastructure_failure"])),
        "truncated": float(bool(record["truncated"])),
    }
