"""sopgym as an OpenEnv environment server: ``sopgym serve --env ID`` (extra ``server``; the command is
:mod:`sopgym.cli.serve`).

The app is OpenEnv's own (``openenv.core.env_server.create_app``) over :class:`SopgymEnvironment`, an
OpenEnv ``MCPEnvironment`` holding one sopgym env (``gymnasium.make(env_id, **env_kwargs)``) per
session. What a client gets:

* **Sessions** (WebSocket ``/ws``, OpenEnv's ``EnvClient``/``GenericEnvClient``, the typed
  :class:`~sopgym.integrations.openenv_client.SopgymEnvClient`): one env per connection, at most
  ``max_sessions`` at once (more are refused with ``CAPACITY_REACHED``), closed after ``idle_timeout_s``
  without a message (the next request then fails with :data:`~sopgym.integrations.protocol.SESSION_CLOSED`).

  - ``reset(seed=, options=)`` (gymnasium's), or ``split=`` and ``index=`` / ``task_id=`` (the task
    API's); ``episode_id=`` is kept in the state.
  - ``step({"type": "reply", "reply": R})``: ``env.step(R)`` on the whole reply (a string or an
    assistant message dict), with sopgym's parsing, statuses, feedback and shaping.
  - ``step({"type": "call_tool", "tool_name": N, "arguments": A})``: one call as one turn (OpenEnv's
    MCP action); the observation is a ``CallToolObservation`` whose ``result`` is the tool message.
  - ``step({"type": "list_tools"})``: the exact schemas (not a turn).
  - ``step({"type": "end_episode", "cause": C, "message": M})``: ``SOPEnv.end_episode`` (a harness's
    action, never a model's: a reply cannot reach it).
  - ``state()``: :class:`SopgymState` (task id, status, return, and the episode record once it ended).

* **MCP** (production mode: ``POST /mcp`` and the WebSocket ``mcp`` message, OpenEnv's
  ``MCPToolClient``): ``tools/list`` gives the same schemas, ``tools/call`` runs one call as one turn of
  the session's episode; the result's ``_meta["sopgym"]`` has the status, reward and done flags.
* **Task API**: ``/{name}/splits``, ``tasks``, ``num_tasks``, ``task``, ``task_range`` with ``name`` =
  :func:`~sopgym.integrations.protocol.task_api_name` of the env id. A task spec is
  ``{"id", "split", "index"}``; ``num_tasks`` is ``null`` for an unlimited (generated) split, whose
  ``tasks`` list is a preview of its first :data:`TASK_PREVIEW`. No request returns more than
  :data:`MAX_TASKS_PER_REQUEST` tasks (``task_range`` pages), and one whose client leaves stops.
* **Stateless HTTP** (OpenEnv's ``POST /reset`` and ``/step``): a fresh env per request, closed with it.

Observations (:class:`~sopgym.integrations.openenv_models.SopgymObservation`) put what a model may see
in ``text`` (the gymnasium observation), ``messages`` (the chat messages the reset or step added) and
``tool_schemas`` (at reset); ``gym_step`` holds the exact gymnasium return value for harnesses
(:mod:`sopgym.integrations.protocol`) and includes bookkeeping a prompt must never show
(``difficulty``; at the end the episode record). Requests the server refuses (no episode running,
unknown reset keys, a bad split or task index) fail with
:data:`~sopgym.integrations.protocol.BAD_REQUEST` messages saying what was expected and what came; over
HTTP they are 400s.

What bounds the server, and who may use it (the threat model is in docs/integrations.md):

* **Envs**: every path that makes an env (a WebSocket or MCP session's reset, a stateless ``POST
  /reset``) takes one of ``max_sessions`` slots (:class:`EnvSlots`), given back once the env is closed;
  a reset beyond it is refused (:data:`~sopgym.integrations.protocol.AT_CAPACITY`, a 503 over HTTP).
  With ``sandbox="docker"`` each env's container is destroyed with it (never kept warm).
* **Requests**: bodies and WebSocket frames up to ``max_request_bytes``; task lists and ranges up to
  :data:`MAX_TASKS_PER_REQUEST`; a request whose client leaves is cancelled and its work stops;
  SIGTERM stops the server within :data:`SHUTDOWN_GRACE_S` seconds plus a moment.
* **Access** (:mod:`sopgym.integrations.serve_guard`): a token on every request but ``/health``, only
  local or allow-listed ``Host`` names, no foreign ``Origin``.
* **Ground truth**: the expected answer and state
  (:data:`~sopgym.integrations.protocol.GROUND_TRUTH_KEYS`) never leave the server unless
  ``send_ground_truth`` is set; the record says what it lacks under
  :data:`~sopgym.integrations.protocol.WITHHELD_KEY`.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import secrets
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastmcp import FastMCP
from fastmcp.tools import Tool as FastMCPTool
from fastmcp.tools.base import ToolResult
from mcp.types import TextContent
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (
    RESERVED_TOOL_NAMES,
    CallToolAction,
    ListToolsAction,
    ListToolsObservation,
    Tool,
)
from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation
from pydantic import PrivateAttr

import sopgym
from sopgym.envs.spaces import UnicodeText
from sopgym.envs.wrappers import dumps_line, to_jsonable
from sopgym.sop_tasks.pack import SPLITS, DomainPack

from .openenv_models import SopgymAction, SopgymObservation, SopgymState, SopgymToolObservation
from .protocol import (
    AT_CAPACITY,
    BAD_REQUEST,
    GROUND_TRUTH_KEYS,
    RESET_KEYS,
    SESSION_CLOSED,
    TOKEN_ENV,
    WITHHELD_KEY,
    is_loopback,
    task_api_name,
    token_from_env,
)
from .serve_guard import ServeGuard

__all__ = [
    "SopgymAction", "SopgymObservation", "SopgymToolObservation", "SopgymState", "SopgymEnvironment",
    "ServedEnv", "EnvSlots", "RequestError", "SessionClosedError", "CapacityError", "create_server_app", "serve",
    "announce", "resolve_token", "TASK_PREVIEW", "MAX_TASKS_PER_REQUEST", "MAX_REQUEST_BYTES", "SHUTDOWN_GRACE_S",
]

#: How many tasks ``/{name}/tasks`` lists for an unlimited split.
TASK_PREVIEW = 100
#: The most tasks one task API request returns: ``tasks`` of a bigger split lists its first ones, and a
#: ``task_range`` over more is refused (page through it instead).
MAX_TASKS_PER_REQUEST = 1000
#: OpenEnv's split types for sopgym's split names.
_SPLIT_TYPES = {"train": "train", "val": "validation", "test": "test"}
#: Default for the largest request, an HTTP body or a WebSocket frame (a reply; observations go the other
#: way): a reply at the default action bound (1M characters) is at most 12 MB as ASCII JSON.
MAX_REQUEST_BYTES = 16 * 2**20
#: Seconds a stopping server (SIGTERM, Ctrl-C) gives requests in flight before it cancels them.
SHUTDOWN_GRACE_S = 3  # an int: uvicorn's timeout_graceful_shutdown


class RequestError(ValueError):
    """A request the server refuses; the message says what was expected and what came."""

    def __init__(self, message: str):
        super().__init__(BAD_REQUEST + message)


class SessionClosedError(RuntimeError):
    """The session's env was closed by the server (idle timeout or shutdown)."""

    def __init__(self, message: str):
        super().__init__(SESSION_CLOSED + message)


class CapacityError(RuntimeError):
    """A reset that would make an env beyond the server's limit (:class:`EnvSlots`)."""

    def __init__(self, message: str):
        super().__init__(AT_CAPACITY + message)


class EnvSlots:
    """The envs alive on one server, at most ``limit``, whatever made them: a WebSocket or MCP session's
    reset, or a stateless ``POST /reset``. A slot is taken when an env is made and given back once that
    env is closed (its sandbox with it). Thread-safe.

    Args:
        limit: the most envs at once (``sopgym serve --max-sessions``).
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.in_use = 0
        self._lock = threading.Lock()

    def take(self) -> None:
        """Raises: CapacityError: ``limit`` envs are alive."""
        with self._lock:
            if self.in_use >= self.limit:
                raise CapacityError(f"{self.in_use}/{self.limit} envs in use (--max-sessions {self.limit}), counting "
                                    "sessions and stateless HTTP resets; retry once one closes")
            self.in_use += 1

    def give_back(self) -> None:
        with self._lock:
            assert self.in_use > 0, "a slot given back twice"
            self.in_use -= 1


class _Worker:
    """One daemon thread that runs a session's env calls in order. Not a ``ThreadPoolExecutor``: its
    threads are joined at interpreter exit, so a step stuck in a slow tool would hold a stopping server."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="sopgym-session", daemon=True).start()

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._calls.put((future, fn))
        return future

    def shutdown(self) -> None:
        """Stop after the calls already submitted."""
        self._calls.put(None)

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            future, fn = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - the caller gets it from the future
                    future.set_exception(exc)


def _printable(value: Any) -> Any:
    """``value`` as JSON types with lone surrogates escaped (``\\udc80`` as text): pydantic cannot encode
    them, and a reply may hold them. The exact values travel in ``gym_step``."""
    value = to_jsonable(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------------
# What is served
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServedEnv:
    """The env a server serves, checked once at start-up by making and resetting a probe env.

    Args:
        env_id: a registered sopgym env id.
        env_kwargs: ``gymnasium.make`` kwargs for every session's env.
        tools: the tool schemas exactly as the env's ``reset`` info gives them.
        pack: the env's domain pack (for the task API).
        max_observation_length: the env's observation space bound.
    """

    env_id: str
    env_kwargs: Mapping[str, Any]
    tools: tuple[dict[str, Any], ...]
    pack: DomainPack
    max_observation_length: int

    @classmethod
    def probe(cls, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> ServedEnv:
        """Make, reset and close one env to check the id and kwargs and read the schemas.

        Raises:
            ValueError: an unknown env id, a non-sopgym env, or bad kwargs.
        """
        kwargs = _released_with_their_env(dict(env_kwargs or {}))
        if env_id not in gym.registry:
            raise ValueError(f"unknown env id {env_id!r}; expected one of `sopgym list` (e.g. sopgym/WarehouseReceiving-v0)")
        env = gym.make(env_id, **kwargs)
        try:
            pack = getattr(env.unwrapped, "pack", None)
            if not isinstance(pack, DomainPack) or not hasattr(env.unwrapped, "end_episode"):
                raise ValueError(f"{env_id} is not a sopgym env (expected a SOPEnv, got {type(env.unwrapped).__name__})")
            _, info = env.reset(seed=0)
            tools = tuple(info["tools"])
            clash = sorted({t["function"]["name"] for t in tools} & RESERVED_TOOL_NAMES)
            if clash:
                raise ValueError(f"{env_id}: tool names {clash} are reserved by OpenEnv ({sorted(RESERVED_TOOL_NAMES)})")
            space = env.observation_space
            if not isinstance(space, UnicodeText):
                raise ValueError(f"{env_id}: expected a UnicodeText observation space, got {type(space).__name__}")
            return cls(env_id, kwargs, tools, pack, space.max_length)
        finally:
            env.close()

    @property
    def task_api_name(self) -> str:
        return task_api_name(self.env_id)

    def mcp_tools(self) -> list[Tool]:
        return [Tool(name=t["function"]["name"], description=t["function"].get("description", ""),
                     input_schema=t["function"]["parameters"]) for t in self.tools]


def _released_with_their_env(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The env kwargs with a Docker sandbox's container destroyed when its env closes (``keep_warm=False``):
    a warm container outlives its session and is bounded by no session limit.

    Raises:
        ValueError: ``sandbox_options`` asks for ``keep_warm=True``.
    """
    if kwargs.get("sandbox") != "docker":
        return kwargs
    options = kwargs.get("sandbox_options") or {}
    if not isinstance(options, Mapping):
        return kwargs  # the env's own check says what it expects
    if options.get("keep_warm", False):
        raise ValueError("sopgym serve releases each env's container with the env (sandbox_options keep_warm=False); "
                         f"got keep_warm={options['keep_warm']!r}: warm containers would outlive their sessions")
    return {**kwargs, "sandbox_options": {**options, "keep_warm": False}}


#: Every tool answers text (the tool message); FastMCP's wrapped-result schema lets MCP clients
#: (OpenEnv's MCPToolClient included) read it as the call's ``data``.
_TOOL_OUTPUT = {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"],
                "x-fastmcp-wrap-result": True}


class _ToolProxy(FastMCPTool):
    """A FastMCP tool with sopgym's exact schema whose call is one turn of the session's episode.
    Arguments reach the env unvalidated by MCP, so bad ones come back as sopgym statuses."""

    _call: Callable[[str, dict[str, Any]], Any] = PrivateAttr()

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        return await self._call(self.name, arguments)


# --------------------------------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------------------------------
class SopgymEnvironment(MCPEnvironment):
    """One session: one sopgym env behind OpenEnv's ``Environment`` and MCP interfaces.

    The sopgym env is made on first use and only ever runs on this session's own worker thread, one
    call at a time (WebSocket steps and MCP calls of one session are serialised; sessions run in
    parallel and never block the server's event loop).

    Args:
        served: what to serve (:meth:`ServedEnv.probe`).
        slots: the server's env slots, one taken while this session's env exists (None: not counted).
        send_ground_truth: send records with their expected answer and state
            (:data:`~sopgym.integrations.protocol.GROUND_TRUTH_KEYS`); off, they stay on the server.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: ServedEnv, *, slots: EnvSlots | None = None, send_ground_truth: bool = False):
        self._served = served
        self._slots = slots
        self._send_ground_truth = send_ground_truth
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._env: Any = None
        self._closed = False
        self._running = False
        self._num_messages = 0
        self._snapshot: dict[str, Any] = {}
        mcp = FastMCP(f"sopgym {served.env_id}", strict_input_validation=False)
        for schema in served.tools:
            function = schema["function"]
            tool = _ToolProxy(name=function["name"], description=function.get("description", ""),
                              parameters=function["parameters"], output_schema=_TOOL_OUTPUT)
            tool._call = self._mcp_call
            mcp.add_tool(tool)
        super().__init__(mcp)

    # -- OpenEnv's Environment API -------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SopgymObservation:
        return self._submit(functools.partial(self._reset, seed, episode_id, kwargs)).result()

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SopgymObservation:
        return await asyncio.wrap_future(self._submit(functools.partial(self._reset, seed, episode_id, kwargs)))

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        action = _as_sopgym_action(action)
        if action.type == "list_tools":
            return ListToolsObservation(tools=self._served.mcp_tools())
        return self._submit(functools.partial(self._step, action)).result()

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        action = _as_sopgym_action(action)
        if action.type == "list_tools":
            return ListToolsObservation(tools=self._served.mcp_tools())
        return await asyncio.wrap_future(self._submit(functools.partial(self._step, action)))

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self.step(action)

    @property
    def state(self) -> SopgymState:
        return SopgymState(env_id=self._served.env_id, max_observation_length=self._served.max_observation_length,
                           ground_truth=self._send_ground_truth, **_printable(self._snapshot))

    def get_metadata(self) -> EnvironmentMetadata:
        pack = self._served.pack
        return EnvironmentMetadata(
            name=self._served.env_id, version=sopgym.__version__, documentation_url=None,
            description=f"{pack.title}: a sopgym SOP environment ({len(self._served.tools)} tools, licence {pack.license}, "
                        f"training {'allowed' if pack.training_allowed else 'not allowed'})")

    def close(self) -> None:
        """Close the session; its env closes (and gives back its slot) on the session's worker, after
        whatever the session had submitted, so an env made by a pending reset closes too. Never waits:
        OpenEnv calls this on its event loop, and a step stuck in a slow tool must not hold the server."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker = self._worker
        if worker is not None:
            worker.submit(self._close_env)
            worker.shutdown()
        super().close()

    def _close_env(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            finally:
                if self._slots is not None:
                    self._slots.give_back()

    # -- the task API (OpenEnv's TaskProvider) ---------------------------------------------------
    def list_splits(self) -> list[dict[str, Any]]:
        pack = self._served.pack
        return [{"name": s, "type": _SPLIT_TYPES[s], "num_tasks": pack.num_tasks(s)} for s in SPLITS if pack.num_tasks(s) != 0]

    def num_tasks(self, split: str) -> int | None:
        """Tasks in ``split``; None for an unlimited (generated) split."""
        return self._served.pack.num_tasks(self._split(split))

    async def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """The split's tasks: all of a finite split up to :data:`MAX_TASKS_PER_REQUEST` (then its first
        ones), the first :data:`TASK_PREVIEW` of an unlimited one."""
        size = self.num_tasks(split)
        return await self._task_specs(split, range(TASK_PREVIEW if size is None else min(size, MAX_TASKS_PER_REQUEST)))

    async def get_task(self, split: str, index: int) -> dict[str, Any]:
        return (await self._task_specs(self._split(split), range(index, index + 1)))[0]

    async def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """Tasks ``start`` to ``stop`` (Python slice bounds on a finite split), at most :data:`MAX_TASKS_PER_REQUEST`."""
        size = self.num_tasks(split)
        if size is None:
            if stop is None or (start or 0) < 0 or stop < 0:
                raise RequestError(f"split {split!r} is unlimited: give 0 <= start <= stop, got start={start!r}, stop={stop!r}")
            indices = range(start or 0, stop)
        else:
            indices = range(size)[start:stop]
        count = max(0, indices.stop - indices.start)  # len() overflows on a range past sys.maxsize
        if count > MAX_TASKS_PER_REQUEST:
            raise RequestError(
                f"task_range returns at most {MAX_TASKS_PER_REQUEST} tasks per request; got start={start!r}, stop={stop!r} "
                f"({count} tasks): page through it, start=S, stop=S+{MAX_TASKS_PER_REQUEST}")
        return await self._task_specs(split, indices)

    def _split(self, split: str) -> str:
        if split not in SPLITS:
            raise RequestError(f"split must be one of {list(SPLITS)}, got {split!r}")
        return split

    async def _task_specs(self, split: str, indices: range) -> list[dict[str, Any]]:
        """The specs, made in a thread that stops at the next task once the request is cancelled (its
        client left, or the server is stopping): a thread cannot be cancelled, only asked to stop."""
        cancelled = threading.Event()
        try:
            return await asyncio.to_thread(self._make_task_specs, split, indices, cancelled)
        finally:
            cancelled.set()

    def _make_task_specs(self, split: str, indices: range, cancelled: threading.Event) -> list[dict[str, Any]]:
        pack, specs = self._served.pack, []
        try:
            for i in indices:
                if cancelled.is_set():
                    break  # nobody reads the answer
                specs.append({"id": pack.task(split, i).task_id, "split": split, "index": i})
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        return specs

    # -- internals: everything below runs on the session's worker thread -------------------------
    def _submit(self, fn: Callable[[], Any]) -> Future:
        with self._lock:
            if self._closed:
                raise SessionClosedError(
                    "the server closed this session's env (idle for longer than its idle timeout, or shutting down); "
                    "connect again for a new session")
            if self._worker is None:
                self._worker = _Worker()
            return self._worker.submit(fn)

    def _make_env(self) -> Any:
        if self._env is None:
            if self._slots is not None:
                self._slots.take()
            try:
                self._env = gym.make(self._served.env_id, **self._served.env_kwargs)
            except BaseException:
                if self._slots is not None:
                    self._slots.give_back()
                raise
        return self._env

    def _shown(self, info: dict[str, Any]) -> dict[str, Any]:
        """``info`` as it may leave the server: its record without the ground truth unless asked for."""
        record = info.get("episode")
        if record is None or self._send_ground_truth:
            return info
        withheld = [k for k in GROUND_TRUTH_KEYS if k in record]
        return {**info, "episode": {**{k: v for k, v in record.items() if k not in GROUND_TRUTH_KEYS}, WITHHELD_KEY: withheld}}

    def _reset(self, seed: Any, episode_id: str | None, kwargs: dict[str, Any]) -> SopgymObservation:
        unknown = sorted(set(kwargs) - set(RESET_KEYS))
        if unknown:
            raise RequestError(f"reset takes {list(RESET_KEYS)}; got unknown {unknown}")
        options = kwargs.get("options")
        if options is not None and not isinstance(options, dict):
            raise RequestError(f"reset options must be an object, got {type(options).__name__}")
        options = dict(options or {})
        for key, option in (("split", "split"), ("index", "task_index"), ("task_id", "task_id")):
            if key in kwargs:
                if option in options:
                    raise RequestError(f"reset got both {key}= and options[{option!r}]; give one")
                options[option] = kwargs[key]
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise RequestError(f"seed must be a non-negative integer or null, got {seed!r}")
        env = self._make_env()
        self._running = False
        try:
            observation, info = env.reset(seed=seed, options=options or None)
        except ValueError as exc:  # the env's own check of options (unknown split, index out of range)
            raise RequestError(str(exc)) from None
        self._running = True
        self._num_messages = len(info["messages"])
        self._snapshot = {"episode_id": episode_id, "step_count": 0, "task_id": info["task_id"], "split": info["split"],
                          "status": info["status"], "total_reward": 0.0}
        return SopgymObservation(
            text=_printable(observation), messages=_printable(info["messages"]), tool_schemas=_printable(info["tools"]),
            status=info["status"], reward=None, done=False,
            gym_step=dumps_line({"observation": observation, "info": info}))

    def _step(self, action: SopgymAction) -> Observation:
        if not self._running:
            ended = self._snapshot.get("status")
            raise RequestError(
                "no episode is running" + (f" (the last one ended with status {ended})" if ended else "")
                + ": send reset first (over plain HTTP every request gets a fresh env; keep a session on the WebSocket /ws)")
        env = self._env
        if action.type == "reply":
            out = env.step(action.reply)
        elif action.type == "call_tool":
            out = env.step({"role": "assistant", "content": None, "tool_calls": [
                {"id": "mcp_call", "type": "function", "function": {"name": action.tool_name, "arguments": action.arguments or {}}}]})
        else:
            out = env.unwrapped.end_episode(action.cause, action.message)
        observation, reward, terminated, truncated, info = out
        info = self._shown(info)
        messages = info["messages"]
        new = messages[self._num_messages:]
        self._num_messages = len(messages)
        done = bool(terminated or truncated)
        self._running = not done
        self._snapshot = {
            **self._snapshot, "step_count": info["turn"], "status": info["status"], "done": done,
            "terminated": bool(terminated), "truncated": bool(truncated),
            "total_reward": self._snapshot["total_reward"] + float(reward),
            "infrastructure_failure": bool(info.get("infrastructure_failure")), "episode": info.get("episode"),
        }
        fields = dict(
            text=_printable(observation), messages=_printable(new), status=info["status"],
            status_message=_printable(info.get("status_message")), terminated=bool(terminated), truncated=bool(truncated),
            reward=float(reward), done=done,
            gym_step=dumps_line({"observation": observation, "reward": reward, "terminated": terminated,
                                 "truncated": truncated, "info": info}))
        if action.type == "call_tool":  # the result is the tool message itself (or the env's feedback)
            result = "\n".join(m.get("content") or "" for m in new[1:])
            return SopgymToolObservation(tool_name=action.tool_name, result=_printable(result), **fields)
        return SopgymObservation(**fields)

    async def _mcp_call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """An MCP ``tools/call`` (production mode): one turn; the text is the tool message."""
        action = SopgymAction(type="call_tool", tool_name=name, arguments=arguments)
        try:
            obs = await asyncio.wrap_future(self._submit(functools.partial(self._step, action)))
        except RequestError as exc:
            return ToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        meta = {"status": obs.status, "reward": obs.reward, "terminated": obs.terminated, "truncated": obs.truncated}
        return ToolResult(content=[TextContent(type="text", text=obs.result)], structured_content={"result": obs.result},
                          meta={"sopgym": meta})


def _as_sopgym_action(action: Any) -> SopgymAction:
    if isinstance(action, SopgymAction):
        return action
    if isinstance(action, CallToolAction):
        return SopgymAction(type="call_tool", tool_name=action.tool_name, arguments=action.arguments)
    if isinstance(action, ListToolsAction):
        return SopgymAction(type="list_tools")
    raise RequestError(f"expected a SopgymAction, CallToolAction or ListToolsAction, got {type(action).__name__}")


# --------------------------------------------------------------------------------------------------
# The app and the command
# --------------------------------------------------------------------------------------------------
def create_server_app(env_id: str, *, token: str | None, env_kwargs: Mapping[str, Any] | None = None,
                      max_sessions: int = 8, idle_timeout_s: float | None = 600.0, allowed_hosts: Iterable[str] = (),
                      allowed_origins: Iterable[str] = (), max_request_bytes: int = MAX_REQUEST_BYTES,
                      send_ground_truth: bool = False) -> FastAPI:
    """OpenEnv's FastAPI app serving ``env_id``, one env per session, behind :class:`~sopgym.integrations.serve_guard.ServeGuard`.

    Args:
        env_id: a registered sopgym env id.
        token: the token every request but ``/health`` must present (``Authorization: Bearer TOKEN``);
            None: no token check (anyone who reaches the port may play). No default: choose.
        env_kwargs: ``gymnasium.make`` kwargs of every session's env (e.g. ``{"sandbox": "docker"}``).
        max_sessions: sessions at once (further connections are refused with ``CAPACITY_REACHED``), and
            envs at once, whatever made them (a reset beyond it is refused: :class:`EnvSlots`).
        idle_timeout_s: a session with no message for this long is closed and its env with it (None: never).
        allowed_hosts: ``Host`` names allowed besides ``localhost`` and IP addresses (``*``: any).
        allowed_origins: browser origins allowed besides the server's own (``*``: any).
        max_request_bytes: the largest HTTP request body (the WebSocket frame limit is the server's:
            :func:`serve` sets uvicorn's ``ws_max_size`` to the same).
        send_ground_truth: records leave the server with their expected answer and state (needed to score
            episodes on the client: the runner, ``sopgym eval`` or a trainer through ``sopgym/Remote-v0``).

    Returns:
        The app (run it with uvicorn; :func:`serve` does).

    Raises:
        ValueError: a bad env id, env kwargs, limit or token.
    """
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be a positive integer, got {max_sessions!r}")
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ValueError(f"idle_timeout_s must be > 0 seconds or None, got {idle_timeout_s!r}")
    served = ServedEnv.probe(env_id, env_kwargs)
    slots = EnvSlots(max_sessions)
    factory = functools.partial(SopgymEnvironment, served, slots=slots, send_ground_truth=send_ground_truth)
    factory().close()  # OpenEnv's own checks of the tools (reserved names) fail here, not in a session
    app = create_app(factory, SopgymAction, SopgymObservation, env_name=served.task_api_name,
                     concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s),
                     state_cls=SopgymState, mode="simulation")
    app.add_middleware(ServeGuard, token=token, allowed_hosts=tuple(allowed_hosts), allowed_origins=tuple(allowed_origins),
                       max_body_bytes=max_request_bytes)

    def refusal(status: int) -> Callable:
        async def handler(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse(status_code=status, content={"detail": str(exc)})
        return handler

    app.add_exception_handler(RequestError, refusal(400))
    app.add_exception_handler(CapacityError, refusal(503))
    app.state.sopgym = {"env_id": env_id, "token": token, "max_sessions": max_sessions, "idle_timeout_s": idle_timeout_s,
                        "max_request_bytes": max_request_bytes, "send_ground_truth": send_ground_truth}
    return app


def serve(env_id: str, *, token: str | None, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          token_source: str = "given", **options: Any) -> None:
    """Serve ``env_id`` until interrupted; SIGTERM or Ctrl-C stop it within :data:`SHUTDOWN_GRACE_S`
    seconds plus a moment, cancelling what is still in flight.

    Args:
        token_source: how the start-up message names the token: ``generated`` prints it (as Jupyter
            prints its URL), ``environment`` names :data:`~sopgym.integrations.protocol.TOKEN_ENV`, ``given``
            prints nothing about it.
        **options: :func:`create_server_app`'s (``max_request_bytes`` also bounds WebSocket frames).
    """
    import uvicorn

    app = create_server_app(env_id, token=token, **options)
    announce(app, f"http://{host}:{port}", token_source=token_source, loopback=is_loopback(host))
    uvicorn.run(app, host=host, port=port, log_level=log_level, ws_max_size=app.state.sopgym["max_request_bytes"],
                timeout_graceful_shutdown=SHUTDOWN_GRACE_S)


def resolve_token(no_token: bool = False) -> tuple[str | None, str]:
    """The server's token and where it came from (``token_source`` of :func:`serve`): none with
    ``no_token``; else the one in :data:`~sopgym.integrations.protocol.TOKEN_ENV`; else a fresh one of
    32 random bytes."""
    if no_token:
        return None, "none"
    if token_from_env() is not None:
        return token_from_env(), "environment"
    return secrets.token_urlsafe(32), "generated"


def announce(app: FastAPI, where: str, *, token_source: str, loopback: bool | None) -> None:
    """The start-up message on stderr: what ``app`` serves at ``where``, with which limits, and its token
    (see :func:`serve`); ``loopback`` None: the address is not known here."""
    settings = app.state.sopgym
    token, env_id, idle = settings["token"], settings["env_id"], settings["idle_timeout_s"]
    if token is None:
        print(f"sopgym serve: WARNING: no token (--no-token): anyone who reaches {where} can run episodes "
              "(a web page cannot: foreign Origins and Hosts are still refused)", file=sys.stderr)
    elif loopback is False:
        print(f"sopgym serve: WARNING: {where} is not loopback: the token and the episodes cross the network in clear "
              "text unless a TLS proxy is in front", file=sys.stderr)
    print(f"sopgym serve: {env_id} at {where} (WebSocket sessions /ws, MCP /mcp, task API "
          f"/{task_api_name(env_id)}/...; at most {settings['max_sessions']} sessions, idle timeout "
          f"{'none' if idle is None else f'{idle:g} s'}; ground truth "
          f"{'sent' if settings['send_ground_truth'] else 'withheld'})", file=sys.stderr)
    if token is not None and token_source == "generated":
        print(f"sopgym serve: token {token} (clients send 'Authorization: Bearer TOKEN'; sopgym/Remote-v0 and "
              f"SopgymEnvClient read it from {TOKEN_ENV})", file=sys.stderr)
    elif token is not None and token_source == "environment":
        print(f"sopgym serve: token from {TOKEN_ENV}", file=sys.stderr)
    sys.stderr.flush()
