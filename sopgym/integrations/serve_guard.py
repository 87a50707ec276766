"""What ``sopgym serve`` lets in: an ASGI middleware in front of OpenEnv's app. Standard library only.

Every HTTP request and WebSocket handshake passes these checks, in this order, before the app sees it;
a refusal is an HTTP error whose ``detail`` says what was expected and what came (a refused WebSocket
gets the same answer to its handshake):

1. **Host** (403): ``localhost`` (and ``*.localhost``), any IP address literal, or a name given with
   ``--allow-host`` (``*``: any). A page that rebinds its own DNS name to 127.0.0.1 reaches a loopback
   server with its own name as ``Host``; a bare IP address cannot be rebound, so it is always allowed.
2. **Origin** (403): absent (a program, not a browser), the server's own origin (``Origin`` equals the
   ``Host`` it was sent to), or one given with ``--allow-origin`` (``*``: any). A browser sends the
   page's origin with every WebSocket and cross-origin request, so a foreign web page is refused here
   whatever it sends (``text/plain`` POSTs without a CORS preflight included).
3. **Token** (401): ``Authorization: Bearer TOKEN`` on every request but those to the open paths
   (``GET /health``: it says only that the server runs); compared in constant time. Without a token
   (``sopgym serve --no-token``) this check is off.
4. **Body size** (413): a body over ``max_body_bytes`` is refused from its ``Content-Length`` before any
   of it is read; a body without one is refused once that many bytes arrived. WebSocket frames are
   bounded by the server (uvicorn's ``ws_max_size``, set to the same limit by ``sopgym serve``).

An HTTP request whose client goes away before the answer is cancelled: the handler gets
``CancelledError`` (so the work it runs in threads can stop, see ``SopgymEnvironment``), instead of
computing an answer nobody reads.

What it does not cover: transport security (run behind TLS when the token crosses a network), rate
limits, and anything after a request is admitted (the session limit, request validation and the
sandboxes are the server's and the env's).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ServeGuard", "OPEN_PATHS", "host_allowed"]

#: Paths served without a token (they reveal nothing but that the server is up).
OPEN_PATHS = frozenset({"/health"})


def _split_host(host: str) -> str:
    """The host name of a ``Host`` header value (``[::1]:8000`` -> ``::1``, ``Example.org:80`` -> ``example.org``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host: str, allowed: Iterable[str] = ()) -> bool:
    """Whether a request sent to ``host`` (a ``Host`` header value) is for this server (see the module)."""
    name = _split_host(host)
    allowed = {a.lower() for a in allowed}
    if "*" in allowed or name in allowed or name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _origin_allowed(origin: str, host: str | None, allowed: frozenset[str]) -> bool:
    origin = origin.strip().lower().rstrip("/")
    if "*" in allowed or origin in allowed:
        return True
    parts = urlsplit(origin)
    return host is not None and parts.scheme in ("http", "https") and parts.netloc == host.strip().lower()


class ServeGuard:
    """The checks of the module, as ASGI middleware (``app.add_middleware(ServeGuard, ...)``).

    Args:
        app: the ASGI app behind it.
        token: the token every request but :data:`OPEN_PATHS` must present; None: no token check.
        allowed_hosts: host names allowed besides ``localhost`` and IP addresses (``*``: any).
        allowed_origins: origins (``scheme://host[:port]``) allowed besides the server's own (``*``: any).
        max_body_bytes: the largest HTTP request body.

    Raises:
        ValueError: an empty token or a limit that is not a positive integer.
    """

    def __init__(self, app: Any, *, token: str | None, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = (),
                 max_body_bytes: int) -> None:
        if token is not None and not token:
            raise ValueError("token must be a non-empty string, or None for no token check")
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be a positive integer, got {max_body_bytes!r}")
        self.app = app
        self._token = None if token is None else token.encode("utf-8")
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.allowed_origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            await _refuse(kind, scope, receive, send, *refusal)
        elif kind == "websocket":
            await self.app(scope, receive, send)
        else:
            await self._http(scope, receive, send)

    def refusal(self, scope: dict[str, Any]) -> tuple[int, str] | None:
        """``(status, detail)`` of the first check the request fails, or None."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host")
        if host is not None and not host_allowed(host, self.allowed_hosts):
            return 403, (f"Host {host!r} is not allowed: expected localhost, an IP address or a name given with "
                         f"--allow-host (allowed: {sorted(self.allowed_hosts) or 'none'}); a foreign Host is how a web "
                         "page reaches a local server through DNS rebinding")
        origin = headers.get("origin")
        if origin is not None and not _origin_allowed(origin, host, self.allowed_origins):
            return 403, (f"Origin {origin!r} is not allowed: expected no Origin (a program), this server's own, or one "
                         f"given with --allow-origin (allowed: {sorted(self.allowed_origins) or 'none'})")
        if self._token is not None and scope.get("path") not in OPEN_PATHS:
            given = headers.get("authorization")
            if given is None:
                return 401, ("a token is required: send the header 'Authorization: Bearer TOKEN' with the token sopgym "
                             "serve printed at start (or the one in SOPGYM_SERVE_TOKEN)")
            scheme, _, presented = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode("utf-8"), self._token):
                return 401, "the token is wrong: expected 'Authorization: Bearer TOKEN' with the server's token"
        if scope["type"] == "http" and "content-length" in headers:
            try:
                size = int(headers["content-length"])
            except ValueError:
                return 400, f"Content-Length must be an integer, got {headers['content-length']!r}"
            if size > self.max_body_bytes:
                return 413, f"the request body ({size} bytes) is over the limit of {self.max_body_bytes} bytes (--max-request-bytes)"
        return None

    async def _http(self, scope: dict[str, Any], receive, send) -> None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # gone before its body arrived: nothing to do
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body_bytes:
                await _refuse("http", scope, receive, send, 413,
                              f"the request body is over the limit of {self.max_body_bytes} bytes (--max-request-bytes)")
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        gone = asyncio.Event()
        answered = False
        replayed = False

        async def app_receive() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def app_send(message: dict[str, Any]) -> None:
            nonlocal answered
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True

        handler = asyncio.ensure_future(self.app(scope, app_receive, app_send))

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            if not answered:  # the client left before its answer: stop the work
                handler.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await handler
        except asyncio.CancelledError:
            if not gone.is_set():
                raise  # the server's own cancellation (shutdown), not the client's departure
        finally:
            watcher.cancel()


async def _refuse(kind: str, scope: dict[str, Any], receive, send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if kind == "http":
        await send({"type": "http.response.start", "status": status, "headers": [*headers, (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:  # the server answers the handshake with 403
        await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
