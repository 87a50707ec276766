"""A gymnasium env whose episodes run on a sopgym env server: ``gymnasium.make("sopgym/Remote-v0", url=...)``.

A trainer on GPU hosts drives envs (and their Docker sandboxes) that run elsewhere: the server is
``sopgym serve --env ID`` (:mod:`sopgym.integrations.openenv_server`), and each :class:`RemoteSOPEnv`
holds one of its WebSocket sessions, i.e. one env on the server. Observations, rewards, flags and
``info`` are the server env's own, exactly (they travel as the ``gym_step`` JSON of
:mod:`sopgym.integrations.protocol`), so the same seed gives the same task, tool answers, statuses,
reward and episode record as ``gymnasium.make(ID)`` in this process; ``end_episode(cause)`` works as
on :class:`~sopgym.envs.SOPEnv`.

Infrastructure failures are the server's, never the policy's: when the server dies, the session is
closed (idle timeout), the connection drops or a step gets no answer within ``step_timeout_s``, the
running episode ends truncated with status ``ERROR_ENV_LOST``, ``truncation_cause="env_lost"`` and
``infrastructure_failure=True``, and a record the evaluator accepts (and excludes from success rates)
built from what the client saw: the answer is unknown (None), ``expected`` is ``{}`` (the server never
sends it before the end), ``final_state`` is None, and ``infrastructure_error`` says what happened. The
next ``reset`` opens a new session. Nothing a reply contains can cause this: replies are data to the
server, and every policy mistake comes back as a status.

The server's token (``sopgym serve`` prints it, or reads ``SOPGYM_SERVE_TOKEN``) goes with the
handshake: ``token=``, else ``SOPGYM_SERVE_TOKEN``. Records carry the expected answer only from a
server started with ``--send-ground-truth`` (needed to score episodes on this side).

Needs only the ``websockets`` package (extra ``remote``; the ``server`` extra includes it), imported when
the env is made: a trainer host needs neither OpenEnv nor its web UI, and ``import sopgym`` stays light. Actions are sent as JSON: a string or an assistant message dict arrives unchanged; other
objects are converted like trajectory files convert them (a tuple arrives as a list).
"""

from __future__ import annotations

import inspect
import json
from typing import Any
from urllib.parse import urlsplit

import gymnasium as gym
from gymnasium.error import ResetNeeded

from sopgym.envs.rendering import transcript
from sopgym.envs.spaces import AssistantAction, UnicodeText
from sopgym.envs.wrappers import to_jsonable
from sopgym.record import RecordField, episode_record
from sopgym.status import END_CAUSES, Status

from .protocol import (
    AT_CAPACITY,
    BAD_REQUEST,
    PROTOCOL_KEY,
    PROTOCOL_VERSION,
    SESSION_CLOSED,
    TOKEN_ENV,
    auth_headers,
    is_loopback,
    token_from_env,
    websocket_url,
)

__all__ = ["RemoteSOPEnv", "RemoteEnvError", "REMOTE_TRUNCATION_CAUSE", "MAX_FRAME_BYTES"]

#: ``truncation_cause`` of an episode lost with its server.
#: How an episode ends when its server or session is lost: the cause an env worker's loss uses too
#: (``sopgym.status.END_CAUSES``), so every consumer counts both alike.
REMOTE_TRUNCATION_CAUSE = "env_lost"
#: Largest frame the client accepts (an observation with the whole chat in ``info``).
MAX_FRAME_BYTES = 256 * 2**20
_SUBMIT_TOOL = "submit_answer"


class RemoteEnvError(RuntimeError):
    """The server answered a reset with an error that is neither a bad request nor a closed session."""


class _Lost(Exception):
    """The session is gone or out of step: no usable answer to a request."""


class _ServerError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _import_websockets():
    try:
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
        from websockets.sync.client import connect
    except ImportError as exc:
        raise ImportError(f"sopgym/Remote-v0 needs the websockets package: pip install 'sopgym[remote]' ({exc})") from exc
    return connect, ConnectionClosed, (InvalidHandshake, InvalidURI)


class RemoteSOPEnv(gym.Env):
    """One session of a sopgym env server, as a gymnasium env.

    Args:
        url: the server, ``http://HOST:PORT`` (or ``ws://HOST:PORT``) as ``sopgym serve`` prints it.
        env_id: the env id expected there; a server serving another env is refused (None: any).
        token: the server's token (sent as ``Authorization: Bearer TOKEN``); None: the one in
            ``SOPGYM_SERVE_TOKEN``, or none.
        connect_timeout_s: to open a session.
        step_timeout_s: to wait for a reset or step (a Docker tool may take a while); past it the
            episode ends as an infrastructure failure.
        render_mode: ``None`` or ``ansi`` (the transcript, as the local env renders it).

    Raises:
        ImportError: ``websockets`` is not installed.
        ValueError: a bad argument, or a server serving another env than ``env_id``.
        ConnectionError: no sopgym server answers at ``url``, or it refuses the session (a missing or
            wrong token, at capacity).

    Example:
        >>> env = gymnasium.make("sopgym/Remote-v0", url="http://127.0.0.1:8000")  # doctest: +SKIP
        >>> obs, info = env.reset(seed=0, options={"split": "test"})  # doctest: +SKIP
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, url: str, *, env_id: str | None = None, token: str | None = None, connect_timeout_s: float = 10.0,
                 step_timeout_s: float = 600.0, render_mode: str | None = None) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        for name, value in (("connect_timeout_s", connect_timeout_s), ("step_timeout_s", step_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        self.url = url
        self.ws_url = websocket_url(url)
        self._token = token if token is not None else token_from_env()
        self.connect_timeout_s = float(connect_timeout_s)
        self.step_timeout_s = float(step_timeout_s)
        self.render_mode = render_mode
        self._connect, self._closed_error, self._handshake_errors = _import_websockets()
        self._ws: Any = None
        self._running = False
        self._info: dict[str, Any] | None = None
        self.server_info = self._open()
        served = self.server_info.get("env_id")
        if env_id is not None and env_id != served:
            self.close()
            raise ValueError(f"the sopgym server at {url} serves {served!r}; expected env_id {env_id!r}")
        self.env_id: str | None = served
        length = int(self.server_info["max_observation_length"])
        self.observation_space = UnicodeText(length)
        self.action_space = AssistantAction(length)

    # -- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        data: dict[str, Any] = {}
        if seed is not None:
            data["seed"] = to_jsonable(seed)
        if options is not None:
            data["options"] = to_jsonable(dict(options))
        self._running = False
        self._info = None
        for attempt in (1, 2):  # a session the server closed while idle, or a dropped connection: reconnect once
            if self._ws is None:
                self._open()
            try:
                payload = self._request({"type": "reset", "data": data})
                break
            except _ServerError as exc:
                if exc.message.startswith(BAD_REQUEST):
                    raise ValueError(exc.message.removeprefix(BAD_REQUEST)) from None
                if exc.message.startswith(AT_CAPACITY):
                    self._drop()
                    raise ConnectionError(f"the sopgym server at {self.url} refused the reset: {exc.message}") from None
                if not exc.message.startswith(SESSION_CLOSED) or attempt == 2:
                    raise RemoteEnvError(f"the sopgym server at {self.url} could not reset: {exc.message} ({exc.code})") from None
                self._drop()
            except _Lost as exc:
                self._drop()
                if attempt == 2:
                    raise ConnectionError(f"the sopgym server at {self.url} did not answer a reset: {exc}") from None
        step = self._decode(payload)
        observation, info = step["observation"], step["info"]
        self._begin(info)
        return observation, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._info is None:
            raise ResetNeeded("step() called before reset(): call reset() first")
        if not self._running:
            raise ResetNeeded("step() called after the episode ended: call reset() first")
        return self._exchange({"type": "reply", "reply": to_jsonable(action)}, turn=True)

    def end_episode(self, cause: str = "stopped", message: str = "") -> tuple[str, float, bool, bool, dict[str, Any]]:
        """End the running episode on the server now (``SOPEnv.end_episode``), without another turn.

        Args:
            cause: ``context_budget``, ``stopped`` or ``inference`` (see :data:`sopgym.status.END_CAUSES`).
            message: why, for ``info["status_message"]``.

        Returns:
            ``(observation, reward, terminated, truncated, info)`` as the local env returns them.

        Raises:
            ValueError: an unknown cause.
            gymnasium.error.ResetNeeded: no episode is running.
        """
        if cause not in END_CAUSES:
            raise ValueError(f"end_episode cause must be one of {sorted(END_CAUSES)}, got {cause!r}")
        if not self._running:
            raise ResetNeeded("end_episode() called with no episode running: call reset() first")
        return self._exchange({"type": "end_episode", "cause": cause, "message": str(message)}, turn=False)

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._info is None:
            return None
        return transcript(self._info["messages"])

    def close(self) -> None:
        """Close the session (its env on the server with it). Safe to call twice; ``reset`` opens a new one."""
        if self._ws is not None:
            try:
                self._ws.send(json.dumps({"type": "close"}))
            except Exception:  # noqa: BLE001 - the session may already be gone; closing must not fail
                pass
        self._drop()
        self._running = False
        self._info = None
        super().close()

    # -- the session ---------------------------------------------------------------------------
    def _open(self) -> dict[str, Any]:
        """Open a session and read the server's state (what it serves, its protocol)."""
        kwargs: dict[str, Any] = {"open_timeout": self.connect_timeout_s, "max_size": MAX_FRAME_BYTES,
                                  "close_timeout": 5, "compression": None, "additional_headers": auth_headers(self._token)}
        if is_loopback(urlsplit(self.ws_url).hostname):
            kwargs["proxy"] = None
        if "legacy" in inspect.signature(self._connect).parameters:
            kwargs["legacy"] = True  # websockets >= 17: a plain connection, not the auto-reconnecting one
        try:
            self._ws = self._connect(self.ws_url, **kwargs)
        except (OSError, TimeoutError, *self._handshake_errors) as exc:
            raise ConnectionError(f"cannot open a session at {self.ws_url}: {_refusal(exc, self._token)}") from None
        try:
            state = self._request({"type": "state"}, expect="state")
        except (_Lost, _ServerError) as exc:
            self._drop()
            raise ConnectionError(f"the server at {self.ws_url} refused the session: {exc}") from None
        if state.get(PROTOCOL_KEY) != PROTOCOL_VERSION:
            self._drop()
            raise ConnectionError(
                f"the server at {self.ws_url} is not a sopgym env server speaking protocol {PROTOCOL_VERSION} "
                f"(its state has {PROTOCOL_KEY}={state.get(PROTOCOL_KEY)!r}; keys {sorted(state)})")
        return state

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - a dead connection may fail to close; it is dropped either way
                pass

    def _request(self, message: dict[str, Any], expect: str = "observation") -> dict[str, Any]:
        try:
            try:
                self._ws.send(json.dumps(message, ensure_ascii=True, allow_nan=False))
            except self._closed_error:
                pass  # a refused session sends its error frame, then closes: recv() still reads the frame
            raw = self._ws.recv(timeout=self.step_timeout_s)
        except TimeoutError:
            raise _Lost(f"no answer within {self.step_timeout_s:g} s") from None
        except (self._closed_error, OSError) as exc:
            raise _Lost(f"the connection was lost ({type(exc).__name__}: {exc})") from None
        try:
            response = json.loads(raw)
        except (TypeError, json.JSONDecodeError) as exc:
            raise _Lost(f"the server sent a frame that is not JSON ({exc})") from None
        kind, data = response.get("type"), response.get("data")
        if kind == "error":
            data = data if isinstance(data, dict) else {}
            detail = data.get("message", "no message")
            if data.get("errors"):
                detail += ": " + "; ".join(str(e.get("msg", e)) for e in data["errors"] if isinstance(e, dict))
            raise _ServerError(str(data.get("code", "UNKNOWN")), detail)
        if kind != expect or not isinstance(data, dict):
            raise _Lost(f"expected a {expect!r} frame, got {kind!r}")
        return data

    def _decode(self, payload: dict[str, Any]) -> dict[str, Any]:
        observation = payload.get("observation")
        raw = observation.get("gym_step") if isinstance(observation, dict) else None
        if not isinstance(raw, str):
            raise _Lost("the observation has no 'gym_step' (not a sopgym server?)")
        return json.loads(raw)

    def _exchange(self, action: dict[str, Any], *, turn: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        try:
            step = self._decode(self._request({"type": "step", "data": action}))
        except (_Lost, _ServerError, json.JSONDecodeError) as exc:
            return self._lost_episode(str(exc), turn)
        observation, reward, terminated, truncated, info = (
            step["observation"], step["reward"], step["terminated"], step["truncated"], step["info"])
        self._follow(info)
        self._running = not (terminated or truncated)
        return observation, reward, terminated, truncated, info

    # -- what an infrastructure record needs, tracked from the public info ---------------------
    def _begin(self, info: dict[str, Any]) -> None:
        self._info = info
        self._running = True
        self._reset_info = info
        self._statuses: list[str] = []
        self._num_calls = 0
        self._num_calls_ok = 0

    def _follow(self, info: dict[str, Any]) -> None:
        self._info = info
        if info.get("turn_status") is not None:
            self._statuses.append(info["turn_status"])
        # Calls that reached a tool: what SOPEnv counts in num_tool_calls (exact while the episode runs).
        for call in info.get("calls") or ():
            if call.get("name") != _SUBMIT_TOOL and call.get("status") != Status.ERROR_PARSE.value:
                self._num_calls += 1
                self._num_calls_ok += call.get("status") == Status.OK.value

    def _lost_episode(self, reason: str, turn: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """End the running episode as an infrastructure failure (the server or the session is gone)."""
        self._drop()
        self._running = False
        last, first = self._info, self._reset_info
        assert last is not None, "an episode is lost only while it runs (after reset())"
        status = END_CAUSES[REMOTE_TRUNCATION_CAUSE].value
        statuses = self._statuses + ([status] if turn else [])
        turns = int(last.get("turn", 0)) + (1 if turn else 0)
        message = (f"the sopgym env server at {self.url} was lost mid-episode ({reason}): an infrastructure failure, "
                   f"not the policy's; the next reset opens a new session")
        record = episode_record(
            env_id=first["env_id"], domain=first["domain"], task_id=first["task_id"], split=first["split"],
            difficulty=first.get("difficulty"), answer=None, expected={}, fields=_fields(first["tools"]),
            final_state=None, expected_state=None, turns=turns, statuses=statuses, num_tool_calls=self._num_calls,
            num_tool_calls_ok=self._num_calls_ok, terminated=False, truncated=True,
            truncation_cause=REMOTE_TRUNCATION_CAUSE, infrastructure_failure=True, reward=0.0, reward_components={},
            infrastructure_error=reason)
        info = {
            "task_id": first["task_id"], "status": status, "turn_status": status if turn else None,
            "status_message": message, "messages": list(last["messages"]), "calls": [], "turn": turns,
            "context_used": last.get("context_used", 0), "reward_components": {},
            "truncation_cause": REMOTE_TRUNCATION_CAUSE, "infrastructure_failure": True, "episode": record,
        }
        self._info = info
        return "", 0.0, False, True, info


def _refusal(exc: Exception, token: str | None) -> str:
    """What a failed handshake says: the server's own ``detail`` when it answered with an HTTP error."""
    response = getattr(exc, "response", None)
    if response is None:
        return f"{type(exc).__name__}: {exc}"
    try:
        detail = json.loads(response.body)["detail"]
    except (TypeError, ValueError, KeyError):
        detail = bytes(response.body or b"")[:500].decode("utf-8", "replace")
    hint = f" (no token was sent: pass token= or set {TOKEN_ENV})" if token is None and response.status_code == 401 else ""
    return f"HTTP {response.status_code}: {detail}{hint}"


def _fields(tools: list[dict[str, Any]]) -> list[RecordField]:
    """The record's ``fields`` from the ``submit_answer`` schema (the inverse of ``OutputField.json_schema``)."""
    schema = next(t["function"]["parameters"] for t in tools if t["function"]["name"] == _SUBMIT_TOOL)
    fields: list[RecordField] = []
    for name, prop in schema["properties"].items():
        types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
        nullable = "null" in types
        enum = prop.get("enum")
        fields.append({"name": name, "type": next(t for t in types if t != "null"),
                       "enum": [v for v in enum if v is not None] if enum is not None else None, "nullable": nullable})
    return fields
