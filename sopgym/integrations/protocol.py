"""What sopgym's env server and its remote env agree on, on top of OpenEnv's protocol. Standard library only.

OpenEnv carries reset/step/state over a WebSocket (``/ws``) as JSON frames ``{"type": ..., "data": ...}``.
sopgym's server adds to every observation a ``gym_step`` field: the gymnasium return value exactly as
the local env gives it (``observation``, ``reward``, ``terminated``, ``truncated``, ``info``; at reset
``observation`` and ``info``), as one ASCII JSON string written like a trajectory line
(:func:`sopgym.envs.wrappers.dumps_line`), so floats, lone surrogates and key order survive the trip.
Its ``state`` carries :data:`PROTOCOL_KEY`, which is how a client tells a sopgym server from another
OpenEnv server.

Every request but ``GET /health`` carries the server's token as ``Authorization: Bearer TOKEN``
(:func:`auth_headers`); clients read it from :data:`TOKEN_ENV` when none is given. Records leave the
server without :data:`GROUND_TRUTH_KEYS` unless it was started with ``--send-ground-truth``; such a
record says so under :data:`WITHHELD_KEY`.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "PROTOCOL_KEY", "PROTOCOL_VERSION", "BAD_REQUEST", "SESSION_CLOSED", "ACTION_TYPES", "RESET_KEYS",
    "LOOPBACK_HOSTS", "TOKEN_ENV", "AT_CAPACITY", "GROUND_TRUTH_KEYS", "WITHHELD_KEY", "websocket_url", "task_api_name",
    "is_loopback", "auth_headers", "token_from_env",
]

#: The ``state`` key holding :data:`PROTOCOL_VERSION`.
PROTOCOL_KEY = "sopgym_protocol"
#: Bumped on any change of the frames below that an older client would misread.
PROTOCOL_VERSION = 1

#: Error messages of requests the server refuses (the client's mistake: ``ValueError`` on the client).
BAD_REQUEST = "sopgym bad request: "
#: Error messages of a session the server has closed (idle timeout, shutdown): reconnect to go on.
SESSION_CLOSED = "sopgym session closed: "
#: Error messages of a reset refused because the server already holds ``--max-sessions`` envs.
AT_CAPACITY = "sopgym at capacity: "

#: The environment variable holding the server's token, on the server (``sopgym serve``) and its clients.
TOKEN_ENV = "SOPGYM_SERVE_TOKEN"
#: The record keys that are ground truth: only a server started with ``--send-ground-truth`` sends them.
GROUND_TRUTH_KEYS = ("expected", "expected_state")
#: The key a record without its ground truth carries (the list of the keys withheld).
WITHHELD_KEY = "ground_truth_withheld"

#: ``step`` action types: ``reply`` (the assistant's whole reply: a string or an assistant message
#: dict, exactly what ``env.step`` takes), ``call_tool`` (one MCP-style call, one turn),
#: ``list_tools`` (the schemas; not a turn), ``end_episode`` (``SOPEnv.end_episode(cause, message)``).
ACTION_TYPES = ("reply", "call_tool", "list_tools", "end_episode")
#: ``reset`` keys: gymnasium's ``seed`` and ``options``, OpenEnv's ``episode_id``, and the task API's
#: ``split`` and ``index`` (or ``task_id``) as shorthands for the same options.
RESET_KEYS = ("seed", "options", "episode_id", "split", "index", "task_id")

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str | None) -> bool:
    return host is not None and (host in LOOPBACK_HOSTS or host.startswith("127."))


def token_from_env() -> str | None:
    """The token in :data:`TOKEN_ENV` (None when unset or empty)."""
    return os.environ.get(TOKEN_ENV) or None


def auth_headers(token: str | None) -> dict[str, str]:
    """The HTTP headers that present ``token`` to a sopgym server (none for None)."""
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def websocket_url(url: str) -> str:
    """The session endpoint (``ws://host:port/ws``) of a server given as ``http(s)://`` or ``ws(s)://``.

    Raises:
        ValueError: a URL without a host or with another scheme.
    """
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise ValueError(f"url must be http(s)://HOST:PORT or ws(s)://HOST:PORT of a sopgym server, got {url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):
        path += "/ws"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def task_api_name(env_id: str) -> str:
    """The name OpenEnv's task API routes use for an env id (``/{name}/splits``): ``/`` cannot be in
    a path segment, so ``sopgym/WarehouseReceiving-v0`` becomes ``sopgym.WarehouseReceiving-v0``."""
    return env_id.replace("/", ".")
