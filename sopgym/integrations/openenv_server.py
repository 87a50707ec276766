"""sopgym as an OpenEnv environment server: ``sopgym serve --env ID`` (extra ``server``; the command is
:mod:`sopgym.cli.serve`).

The app is OpenEnv's own (``openenv.core.env_server.create_app``) over :class:`SopgymEnvironment`, an
OpenEnv ``MCPEnvironment`` holding one sopgym env (``gymnasium.make(env_id, **env_kwargs)``) per
session. What a client gets:

* **Sessions** (WebSocket ``/ws``, OpenEnv's ``EnvClient``/``GenericEnvClient``): one env per
  connection, at most ``max_sessions`` at once (more are refused with ``CAPACITY_REACHED``), closed
  after ``idle_timeout_s`` without a message (the next request then fails with
  :data:`~sopgym.integrations.protocol.SESSION_CLOSED`).

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
  ``tasks`` list is a preview of its first :data:`TASK_PREVIEW`.

Observations (:class:`SopgymObservation`) put what a model may see in ``text`` (the gymnasium
observation), ``messages`` (the chat messages the reset or step added) and ``tool_schemas`` (at reset);
``gym_step`` holds the exact gymnasium return value for harnesses (:mod:`sopgym.integrations.protocol`)
and includes bookkeeping a prompt must never show (``difficulty``; at the end the record with the
expected answer). Requests the server refuses (no episode running, unknown reset keys, a bad
split or task index) fail with :data:`~sopgym.integrations.protocol.BAD_REQUEST` messages saying what
was expected and what came; over HTTP they are 400s.

The server has no authentication: anyone who reaches its port can run episodes and read their
records. Bind it to loopback (the default) or put it behind something that authenticates.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

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
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
)
from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation, State
from pydantic import BaseModel, Field, PrivateAttr, model_validator
from pydantic_core import PydanticCustomError

import sopgym
from sopgym.envs.wrappers import dumps_line, to_jsonable
from sopgym.sop_tasks.pack import SPLITS, DomainPack
from sopgym.status import END_CAUSES

from .protocol import (
    ACTION_TYPES,
    BAD_REQUEST,
    PROTOCOL_KEY,
    PROTOCOL_VERSION,
    RESET_KEYS,
    SESSION_CLOSED,
    is_loopback,
    task_api_name,
)

__all__ = [
    "SopgymAction", "SopgymObservation", "SopgymToolObservation", "SopgymState", "SopgymEnvironment",
    "ServedEnv", "RequestError", "SessionClosedError", "create_server_app", "serve",
    "TASK_PREVIEW",
]

#: How many tasks ``/{name}/tasks`` lists for an unlimited split.
TASK_PREVIEW = 100
#: OpenEnv's split types for sopgym's split names.
_SPLIT_TYPES = {"train": "train", "val": "validation", "test": "test"}
#: Largest WebSocket frame the server accepts (a reply; observations go the other way).
MAX_REQUEST_BYTES = 64 * 2**20


class RequestError(ValueError):
    """A request the server refuses; the message says what was expected and what came."""

    def __init__(self, message: str):
        super().__init__(BAD_REQUEST + message)


class SessionClosedError(RuntimeError):
    """The session's env was closed by the server (idle timeout or shutdown)."""

    def __init__(self, message: str):
        super().__init__(SESSION_CLOSED + message)


# --------------------------------------------------------------------------------------------------
# Wire types
# --------------------------------------------------------------------------------------------------
class SopgymAction(Action):
    """One ``step`` request (see :data:`~sopgym.integrations.protocol.ACTION_TYPES`)."""

    type: Literal["reply", "call_tool", "list_tools", "end_episode"] = Field(
        default="reply", description="reply | call_tool | list_tools | end_episode")
    reply: Any = Field(default=None, description="type=reply: the assistant's reply, a string or an assistant message dict")
    tool_name: str | None = Field(default=None, description="type=call_tool: the tool to call")
    arguments: dict[str, Any] | None = Field(default=None, description="type=call_tool: its arguments")
    cause: str | None = Field(default=None, description=f"type=end_episode: one of {sorted(END_CAUSES)}")
    message: str = Field(default="", description="type=end_episode: why (kept in status_message)")

    @model_validator(mode="after")
    def _fields_match_type(self) -> SopgymAction:
        given = self.model_fields_set - {"type", "metadata"}
        needs = {"reply": {"reply"}, "call_tool": {"tool_name"}, "list_tools": set(), "end_episode": {"cause"}}[self.type]
        allowed = needs | {"call_tool": {"arguments"}, "end_episode": {"message"}}.get(self.type, set())
        # PydanticCustomError, not ValueError: OpenEnv sends the validation errors to the client, and an
        # exception object in their context cannot be encoded (the session would die instead).
        if not needs <= given or not given <= allowed:
            raise PydanticCustomError("sopgym_action", "{detail}", {"detail": (
                f"a {self.type!r} action takes {sorted(allowed) or 'no other keys'} (required: {sorted(needs) or 'none'}); "
                f"got {sorted(given)}. Action types: {list(ACTION_TYPES)}")})
        if self.type == "end_episode" and self.cause not in END_CAUSES:
            raise PydanticCustomError("sopgym_action", "{detail}", {
                "detail": f"end_episode cause must be one of {sorted(END_CAUSES)}, got {self.cause!r}"})
        return self


class _SopgymFields(BaseModel):
    text: str = Field(default="", description="the gymnasium observation: the task at reset, the tool results after a step")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="the chat messages this reset/step added (reset: system + user)")
    # Not "tools": OpenEnv's MCP clients read an observation with a "tools" key as a tools/list answer.
    tool_schemas: list[dict[str, Any]] | None = Field(
        default=None, description="the tool schemas (OpenAI format, what a chat template's tools= takes), at reset")
    status: str = Field(default="OK", description="info['status'] (sopgym.status.Status)")
    status_message: str | None = Field(default=None, description="info['status_message']")
    terminated: bool = False
    truncated: bool = False
    gym_step: str = Field(
        default="", description="the exact gymnasium return value as ASCII JSON, for harnesses: it includes "
                                "bookkeeping (difficulty, the final record) that a prompt must never show")


class SopgymObservation(Observation, _SopgymFields):
    """The observation of a reset, a reply or an end."""


class SopgymToolObservation(CallToolObservation, _SopgymFields):
    """The observation of a ``call_tool`` step: OpenEnv's ``CallToolObservation`` (``result`` is the tool message) plus sopgym's fields."""


class SopgymState(State):
    """The session's state: what a harness needs between steps."""

    sopgym_protocol: int = PROTOCOL_VERSION
    sopgym_version: str = sopgym.__version__
    env_id: str = ""
    max_observation_length: int = 0
    task_id: str | None = None
    split: str | None = None
    status: str | None = None
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    total_reward: float = 0.0
    infrastructure_failure: bool = False
    episode: dict[str, Any] | None = Field(default=None, description="the episode record once the episode ended (includes the expected answer)")


assert PROTOCOL_KEY in SopgymState.model_fields  # how a client recognises a sopgym server


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
        kwargs = dict(env_kwargs or {})
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
            return cls(env_id, kwargs, tools, pack, env.observation_space.max_length)
        finally:
            env.close()

    @property
    def task_api_name(self) -> str:
        return task_api_name(self.env_id)

    def mcp_tools(self) -> list[Tool]:
        return [Tool(name=t["function"]["name"], description=t["function"].get("description", ""),
                     input_schema=t["function"]["parameters"]) for t in self.tools]


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
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: ServedEnv):
        self._served = served
        self._lock = threading.Lock()
        self._worker: ThreadPoolExecutor | None = None
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
                           **_printable(self._snapshot))

    def get_metadata(self) -> EnvironmentMetadata:
        pack = self._served.pack
        return EnvironmentMetadata(
            name=self._served.env_id, version=sopgym.__version__, documentation_url=None,
            description=f"{pack.title}: a sopgym SOP environment ({len(self._served.tools)} tools, licence {pack.license}, "
                        f"training {'allowed' if pack.training_allowed else 'not allowed'})")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker = self._worker
        if worker is not None:
            # Queued after whatever the session had submitted, so an env made by a pending reset closes too.
            worker.submit(self._close_env).result()
            worker.shutdown(wait=False)
        super().close()

    def _close_env(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    # -- the task API (OpenEnv's TaskProvider) ---------------------------------------------------
    def list_splits(self) -> list[dict[str, Any]]:
        pack = self._served.pack
        return [{"name": s, "type": _SPLIT_TYPES[s], "num_tasks": pack.num_tasks(s)} for s in SPLITS if pack.num_tasks(s) != 0]

    def num_tasks(self, split: str) -> int | None:
        """Tasks in ``split``; None for an unlimited (generated) split."""
        return self._served.pack.num_tasks(self._split(split))

    async def list_tasks(self, split: str) -> list[dict[str, Any]]:
        size = self.num_tasks(split)
        return await asyncio.to_thread(self._task_specs, split, range(TASK_PREVIEW if size is None else size))

    async def get_task(self, split: str, index: int) -> dict[str, Any]:
        return (await asyncio.to_thread(self._task_specs, self._split(split), [index]))[0]

    async def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        size = self.num_tasks(split)
        if size is None:
            if stop is None or (start or 0) < 0 or stop < 0:
                raise RequestError(f"split {split!r} is unlimited: give 0 <= start <= stop, got start={start!r}, stop={stop!r}")
            indices = range(start or 0, stop)
        else:
            indices = range(size)[start:stop]
        return await asyncio.to_thread(self._task_specs, split, indices)

    def _split(self, split: str) -> str:
        if split not in SPLITS:
            raise RequestError(f"split must be one of {list(SPLITS)}, got {split!r}")
        return split

    def _task_specs(self, split: str, indices) -> list[dict[str, Any]]:
        pack = self._served.pack
        try:
            return [{"id": pack.task(split, int(i)).task_id, "split": split, "index": int(i)} for i in indices]
        except ValueError as exc:
            raise RequestError(str(exc)) from None

    # -- internals: everything below runs on the session's worker thread -------------------------
    def _submit(self, fn: Callable[[], Any]) -> Future:
        with self._lock:
            if self._closed:
                raise SessionClosedError(
                    "the server closed this session's env (idle for longer than its idle timeout, or shutting down); "
                    "connect again for a new session")
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sopgym-session")
            return self._worker.submit(fn)

    def _make_env(self) -> Any:
        if self._env is None:
            self._env = gym.make(self._served.env_id, **self._served.env_kwargs)
        return self._env

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
def create_server_app(env_id: str, *, env_kwargs: Mapping[str, Any] | None = None, max_sessions: int = 8,
                      idle_timeout_s: float | None = 600.0) -> FastAPI:
    """OpenEnv's FastAPI app serving ``env_id``, one env per session.

    Args:
        env_id: a registered sopgym env id.
        env_kwargs: ``gymnasium.make`` kwargs of every session's env (e.g. ``{"sandbox": "docker"}``).
        max_sessions: sessions at once; further connections are refused (``CAPACITY_REACHED``).
        idle_timeout_s: a session with no message for this long is closed and its env with it (None: never).

    Returns:
        The app (run it with uvicorn; :func:`serve` does).

    Raises:
        ValueError: a bad env id, env kwargs, ``max_sessions`` or ``idle_timeout_s``.
    """
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be a positive integer, got {max_sessions!r}")
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ValueError(f"idle_timeout_s must be > 0 seconds or None, got {idle_timeout_s!r}")
    served = ServedEnv.probe(env_id, env_kwargs)
    factory = functools.partial(SopgymEnvironment, served)
    factory().close()  # OpenEnv's own checks of the tools (reserved names) fail here, not in a session
    app = create_app(factory, SopgymAction, SopgymObservation, env_name=served.task_api_name,
                     concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s),
                     state_cls=SopgymState, mode="simulation")

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    app.add_exception_handler(RequestError, bad_request)
    return app


def serve(env_id: str, *, host: str = "127.0.0.1", port: int = 8000, env_kwargs: Mapping[str, Any] | None = None,
          max_sessions: int = 8, idle_timeout_s: float | None = 600.0, log_level: str = "info") -> None:
    """Serve ``env_id`` until interrupted (see :func:`create_server_app`)."""
    import uvicorn

    app = create_server_app(env_id, env_kwargs=env_kwargs, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s)
    if not is_loopback(host):
        print(f"sopgym serve: WARNING: listening on {host}, not loopback; the server has no authentication: anyone who "
              f"reaches port {port} can run episodes and read their records (expected answers included)", file=sys.stderr)
    print(f"sopgym serve: {env_id} at http://{host}:{port} (WebSocket sessions /ws, MCP /mcp, task API "
          f"/{task_api_name(env_id)}/...; at most {max_sessions} sessions, idle timeout "
          f"{'none' if idle_timeout_s is None else f'{idle_timeout_s:g} s'})", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, ws_max_size=MAX_REQUEST_BYTES)
