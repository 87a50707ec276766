"""A tiny OpenAI-compatible HTTP server on 127.0.0.1 for fault injection only (429, 5xx, 4xx, hangs,
slow streams, dripped bytes, malformed and oversized answers): the real-server tests use
``transformers serve``.

Each POST to ``/v1/chat/completions`` takes the next behaviour of :attr:`FaultServer.script` (then
``default``):

* ``("reply", message, finish_reason, usage[, delay_s])`` answers (as a stream when the request asks
  for one);
* ``("status", code, body, headers)`` fails; ``("hang", seconds)`` sends nothing for that long;
* ``("trickle", seconds)`` streams empty deltas every 0.1 s for that long;
* ``("keepalive", seconds)`` opens a stream and sends only ``: keepalive`` comments, every 0.5 s;
* ``("noise", seconds)`` opens a stream and sends a byte every 0.05 s that never forms an event;
* ``("drip", seconds)`` sends a whole-body answer (headers first) one byte every 0.05 s;
* ``("drip_headers", seconds)`` sends the status line and headers one byte every 0.05 s;
* ``("sse", events)`` streams each text of ``events`` as one ``data:`` event (raw, so it can be any
  malformed text), then nothing more;
* ``("body", text)`` answers 200 with ``text`` as its body, whatever the request asked;
* ``("big", num_bytes)`` answers a reply of ``num_bytes`` of content (streamed in 64 KiB deltas, or as
  one body written as it goes), ignoring ``max_tokens``.

``GET /v1/models`` answers the listing, or ``models_status`` when not 200, or drips its body for
``models_drip_s`` seconds when set. Every request is recorded with its body, headers and the times
it arrived and ended (``closed_early`` when the client hung up).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SUBMIT = {"role": "assistant", "content": '<tool_call>{"name": "submit_answer", "arguments": {}}</tool_call>'}
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


class FaultServer:
    def __init__(self, port: int = 0) -> None:
        self.script: list[tuple] = []
        self.default: tuple = ("reply", SUBMIT, "stop", USAGE)
        self.models_status: int = 200
        self.models_drip_s: float | None = None
        self.models_requests = 0
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.models_requests += 1
                if server.models_drip_s is not None:
                    try:
                        self._drip(200, "application/json", json.dumps({"object": "list", "data": []}).encode() + b" " * 4096,
                                   server.models_drip_s)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                elif server.models_status != 200:
                    self._json(server.models_status, {"error": {"message": "refused", "type": "auth"}})
                else:
                    self._json(200, {"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "t"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                entry = {"body": body, "headers": dict(self.headers), "arrived": time.monotonic(), "ended": None,
                         "closed_early": False}
                with server._lock:
                    server.requests.append(entry)
                    behaviour = server.script.pop(0) if server.script else server.default
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._behave(behaviour, body, entry)
                except (BrokenPipeError, ConnectionResetError):
                    entry["closed_early"] = True
                finally:
                    entry["ended"] = time.monotonic()
                    with server._lock:
                        server.in_flight -= 1

            def _json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, obj: Any) -> None:
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.flush()

            def _wait_or_closed(self, seconds: float) -> None:
                """Wait ``seconds``, or raise at once when the client hangs up."""
                readable, _, _ = select.select([self.connection], [], [], seconds)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    raise ConnectionResetError("the client closed the connection")

            def _until_closed(self, seconds: float, interval: float, data: bytes) -> None:
                """Write ``data`` every ``interval`` for ``seconds``."""
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    self.wfile.write(data)
                    self.wfile.flush()
                    self._wait_or_closed(interval)

            def _dribble(self, data: bytes, seconds: float) -> None:
                """Write ``data`` one byte every 0.05 s, for ``seconds`` at most."""
                end = time.monotonic() + seconds
                for i in range(len(data)):
                    if time.monotonic() >= end:
                        return
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    self._wait_or_closed(0.05)

            def _drip(self, code: int, content_type: str, data: bytes, seconds: float) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.flush()
                self._dribble(data, seconds)

            def _behave(self, behaviour: tuple, body: dict[str, Any], entry: dict[str, Any]) -> None:
                kind = behaviour[0]
                if kind == "keepalive":
                    self._start_stream()
                    self._until_closed(behaviour[1], 0.5, b": keepalive\n\n")
                    return
                if kind == "noise":
                    self._start_stream()
                    self._until_closed(behaviour[1], 0.05, b"x")
                    return
                if kind == "drip":
                    answer = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                              "choices": [{"index": 0, "message": SUBMIT, "finish_reason": "stop"}], "usage": USAGE}
                    self._drip(200, "application/json", json.dumps(answer).encode().ljust(4096), behaviour[1])
                    return
                if kind == "drip_headers":
                    self._dribble(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"x" * 4000,
                                  behaviour[1])
                    self.close_connection = True
                    return
                if kind == "sse":
                    self._start_stream()
                    for event in behaviour[1]:
                        self.wfile.write(f"data: {event}\n\n".encode())
                    self.wfile.flush()
                    return
                if kind == "body":
                    data = behaviour[1].encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if kind == "big":
                    self._big(behaviour[1], bool(body.get("stream")))
                    return
                if kind == "status":
                    _, code, payload, headers = behaviour
                    self._json(code, payload, headers)
                    return
                if kind == "hang":
                    time.sleep(behaviour[1])
                    self._json(500, {"error": {"message": "hung"}})
                    return
                stream = bool(body.get("stream"))
                if kind == "trickle":
                    self._start_stream()
                    end = time.monotonic() + behaviour[1]
                    while time.monotonic() < end:
                        self._chunk(_chunk({"content": ""}))
                        readable, _, _ = select.select([self.connection], [], [], 0.1)
                        if readable and not self.connection.recv(1, socket.MSG_PEEK):
                            raise ConnectionResetError("the client closed the connection")
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                _, message, finish, usage, *delay = behaviour
                if delay:
                    time.sleep(delay[0])
                if not stream:
                    self._json(200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                                     "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage})
                    return
                self._start_stream()
                delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
                self._chunk(_chunk(delta))
                for i, call in enumerate(message.get("tool_calls") or []):
                    self._chunk(_chunk({"tool_calls": [{"index": i, **call}]}))
                self._chunk(_chunk({}, finish))
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._chunk({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
                                 "usage": usage})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _big(self, size: int, stream: bool) -> None:
                piece = 64 * 1024
                if stream:
                    self._start_stream()
                    self._chunk(_chunk({"role": "assistant", "content": ""}))
                    for _ in range(size // piece):
                        self._chunk(_chunk({"content": "y" * piece}))
                    self._chunk(_chunk({}, "stop"))
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                head = b'{"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0, ' \
                       b'"message": {"role": "assistant", "content": "'
                tail = b'"}, "finish_reason": "stop"}]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(head) + piece * (size // piece) + len(tail)))
                self.end_headers()
                self.wfile.write(head)
                for _ in range(size // piece):
                    self.wfile.write(b"y" * piece)
                self.wfile.write(tail)

            def _start_stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Wait until no request is being answered (a handler notices a hang-up only when it next writes)."""
        end = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < end:
            time.sleep(0.02)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
