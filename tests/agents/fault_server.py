"""A tiny OpenAI-compatible HTTP server on 127.0.0.1 for fault injection only (429, 5xx, 4xx, hangs,
slow streams): the real-server tests use ``transformers serve``.

Each POST to ``/v1/chat/completions`` takes the next behaviour of :attr:`FaultServer.script` (then
``default``): ``("reply", message, finish_reason, usage[, delay_s])`` answers (as a stream when the request asks
for one), ``("status", code, body, headers)`` fails, ``("hang", seconds)`` sends nothing for that long,
``("trickle", seconds)`` streams empty deltas every 0.1 s for that long. Every request is recorded
with its body, headers and the times it arrived and ended (``closed_early`` when the client hung up).
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
                if server.models_status != 200:
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

            def _behave(self, behaviour: tuple, body: dict[str, Any], entry: dict[str, Any]) -> None:
                kind = behaviour[0]
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

            def _start_stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

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
