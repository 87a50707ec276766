"""One persistent request/response channel to the tool server, over a Docker attach stream.

The attach stream is the container's stdin/stdout/stderr, hijacked from an HTTP request on the
Docker API unix socket: no network is involved and no process starts per request. Without a TTY
the daemon multiplexes the container's output in frames of an 8-byte header (stream id, three zero
bytes, big-endian payload length) followed by the payload; stdin is written raw.

Requests and responses are single JSON lines (``ensure_ascii`` keeps them newline-free). Each carries
an ``id`` so a stale answer after a timeout can never be taken for a new one (the channel is
closed on any timeout anyway).

What it protects against: a hung or dead server making the caller wait forever (every read has a
deadline; EOF and timeouts become typed errors within that deadline); unbounded stderr growth
(only the last 8 KiB are kept for error messages); two threads interleaving requests on one stream
(the second is refused with :class:`~sopgym.sandboxes.base.SandboxMisuse`); a forked process
driving its parent's container (in a child, every inherited channel's descriptor is closed at the
fork, without shutting the parent's stream down, so the child can never write to it, and the
container still ends when its owner dies). What it does not: it trusts the server's framing and
JSON, which run inside our image.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
import weakref
from typing import Any

from ..base import SandboxMisuse
from .errors import ChannelTimeout, ContainerLost

__all__ = ["Channel", "raw_socket"]

_HEADER = struct.Struct(">BxxxL")
_STDERR_KEEP = 8192


def raw_socket(sock_like: Any) -> socket.socket:
    """The plain socket under what ``APIClient.attach_socket`` returns (SocketIO on unix sockets)."""
    inner = getattr(sock_like, "_sock", sock_like)
    if not isinstance(inner, socket.socket):
        raise TypeError(f"expected a socket under the attach stream, got {type(inner).__name__}")
    return inner


class Channel:
    """Line-JSON requests over a multiplexed attach socket.

    Args:
        sock_like: what ``APIClient.attach_socket`` returned (kept referenced: it owns the HTTP response).
        label: container name, used in error messages.
    """

    def __init__(self, sock_like: Any, label: str) -> None:
        self._keep = sock_like
        self._sock = raw_socket(sock_like)
        self._label = label
        self._buf = bytearray()  # undecoded frame bytes
        self._out = bytearray()  # demultiplexed stdout
        self._err = bytearray()  # tail of stderr
        self._next_id = 0
        self._busy = threading.Lock()
        self.pid = os.getpid()  # the process whose stream this is
        self.closed = False
        _live.add(self)

    @property
    def stderr_tail(self) -> str:
        return self._err.decode("utf-8", "replace")

    def request(self, op: str, wait_s: float, **body: Any) -> dict[str, Any]:
        """Send one request and wait for its response.

        Raises:
            ContainerLost: the stream ended or broke (the server or container died).
            ChannelTimeout: no response within ``wait_s`` seconds (the channel is closed).
            SandboxMisuse: another thread is using the channel, or this is a forked child of its owner.
        """
        if self.pid != os.getpid():
            raise SandboxMisuse(
                f"the channel to {self._label} belongs to process {self.pid}; this is its forked child {os.getpid()}: "
                "a forked process never drives its parent's container (start a new episode in the child)"
            )
        if not self._busy.acquire(blocking=False):
            raise SandboxMisuse(
                f"the channel to {self._label} is already waiting for an answer in another thread (this one sent "
                f"{op!r}): a sandbox is driven by one thread at a time; give each thread its own env/backend"
            )
        try:
            return self._request(op, wait_s, body)
        finally:
            self._busy.release()

    def _request(self, op: str, wait_s: float, body: dict[str, Any]) -> dict[str, Any]:
        if self.closed:
            raise ContainerLost(f"channel to {self._label} is closed (a previous failure); expected an open channel")
        self._next_id += 1
        req_id = self._next_id
        line = json.dumps({"op": op, "id": req_id, **body}, ensure_ascii=True, separators=(",", ":")) + "\n"
        deadline = time.monotonic() + wait_s
        try:
            self._sock.settimeout(wait_s)
            self._sock.sendall(line.encode())
            while True:
                nl = self._out.find(b"\n")
                if nl >= 0:
                    raw = bytes(self._out[:nl])
                    del self._out[: nl + 1]
                    response = json.loads(raw)
                    if response.get("id") != req_id:
                        raise ContainerLost(
                            f"{self._label}: response id {response.get('id')} for request {req_id}: the stream is out of step"
                        )
                    return response
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError()
                self._sock.settimeout(left)
                data = self._sock.recv(262144)
                if not data:
                    raise ContainerLost(
                        f"{self._label}: the server's stream ended during {op!r} (container killed or server died); "
                        f"stderr tail: {self.stderr_tail[-500:]!r}"
                    )
                self._feed(data)
        except TimeoutError as exc:
            self.close()
            raise ChannelTimeout(f"{self._label}: no answer to {op!r} within {wait_s:.1f} s") from exc
        except (ConnectionError, OSError) as exc:
            self.close()
            raise ContainerLost(f"{self._label}: channel broke during {op!r}: {exc}") from exc
        except ContainerLost:
            self.close()
            raise

    def is_open(self) -> bool:
        """True when the stream is open with nothing unread: a cheap check before reusing a warm
        container (a container killed while idle shows as EOF here). Never blocks."""
        if self.closed:
            return False
        timeout = self._sock.gettimeout()
        # A socket with a timeout polls before recv (MSG_DONTWAIT alone would still wait): go non-blocking.
        self._sock.setblocking(False)
        try:
            data = self._sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True  # alive, nothing pending
        except OSError:
            return False
        finally:
            self._sock.settimeout(timeout)
        # b"" is EOF; unexpected bytes (stderr noise or a stray line) are drained by the next request.
        return bool(data)

    def _feed(self, data: bytes) -> None:
        self._buf += data
        while len(self._buf) >= _HEADER.size:
            stream, size = _HEADER.unpack_from(self._buf)
            if len(self._buf) < _HEADER.size + size:
                return
            payload = self._buf[_HEADER.size : _HEADER.size + size]
            del self._buf[: _HEADER.size + size]
            if stream == 1:
                self._out += payload
            elif stream == 2:
                self._err += payload
                del self._err[:-_STDERR_KEEP]
            else:
                raise ContainerLost(f"{self._label}: unexpected stream id {stream} in attach frame (expected 1 or 2)")

    def forget(self) -> None:
        """Close this process's descriptor only, leaving the stream (another process's) as it is.

        Used in a forked child for every inherited channel: its copy of the descriptor must neither be
        used nor keep the container alive after the parent dies.
        """
        if self.closed:
            return
        self.closed = True
        try:
            os.close(self._sock.detach())  # the socket object (shared with docker-py's wrappers) now holds nothing
        except OSError:
            pass

    def close(self) -> None:
        """Close the stream; the server reads EOF on stdin and exits, so the container stops.

        In a process other than the channel's owner (a forked child) this only forgets the descriptor.
        """
        if self.pid != os.getpid():
            self.forget()
            return
        if self.closed:
            return
        self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass
        # The socket is only really closed when every file object over it is: the SocketIO we were
        # given and the HTTP response that docker-py keeps on it.
        for owner in (getattr(self._keep, "_response", None), self._keep):
            try:
                if owner is not None:
                    owner.close()
            except Exception:  # noqa: BLE001 - closing a dead HTTP response may raise anything
                pass


_live: weakref.WeakSet[Channel] = weakref.WeakSet()


def _forget_all_after_fork() -> None:
    for channel in list(_live):
        channel.forget()


os.register_at_fork(after_in_child=_forget_all_after_fork)
