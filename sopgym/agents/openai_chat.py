"""A chat model behind any OpenAI-compatible ``/v1/chat/completions`` endpoint, through the official
``openai`` SDK: vLLM, SGLang, llama.cpp, ``transformers serve``, hosted APIs.

What it does about servers (defaults chosen so a local server on a CPU works as well as a hosted API):

* **Readiness**: before the first request it waits (``server_wait_s``, default 10 min) until
  ``GET /models`` answers, so a server still loading its model is not taken for a failing one. A
  401/403 there stops the run at once (a bad key).
* **Deadlines**: each attempt has a wall-clock deadline (``request_timeout_s``, default 20 min: CPU
  turns of 6 minutes were measured) over all of it (connect, headers, body), and each probe of the
  start-up wait one within ``server_wait_s``. A watchdog shuts the attempt's socket down at the
  deadline, which ends a read blocked on it whatever the server sends or withholds (SSE keep-alive
  comments, a body dripped a byte at a time, bytes that never form an event): the HTTP library's own
  timeouts restart with every byte. Each attempt opens its own connection (``Connection: close``) so
  the watchdog knows its socket from the start.
* **Answers** are read with bounds and checked (:mod:`.openai_answers`): a malformed one (no choice,
  invalid JSON, a tool call that is not an object, a choice or tool-call index out of place, ...)
  fails its attempt like a 5xx; a reply longer than ``max_reply_bytes`` is cut there and labelled;
  token counts that are not sane integers are recorded as missing with a warning.
* **Streaming** (default): the answer is read as a stream, so abandoning a request (a timeout, or a
  run that stops) closes its connection and servers that abort on disconnect (vLLM, SGLang,
  ``transformers serve``'s streaming path) stop generating: a retry never queues behind the
  abandoned attempt. A retry is sent only after the previous attempt's connection is closed.
  ``stream=False`` for servers whose streaming misbehaves.
* **Retries**: on timeouts, connection errors, malformed answers, 408/409/429 and 5xx, up to
  ``max_retries`` times, waiting ``initial_backoff_s * 2**i`` (at most ``max_backoff_s``, jittered)
  or the server's ``Retry-After``; after a connection error or timeout the retry also waits until the
  server answers again. A request that still fails ends only its episode, as an infrastructure failure.
* **Refusals**: any other 4xx (unknown model, ``tools`` on a server started without auto tool choice,
  unexpected fields) raises :class:`~.chat.ServerRefused` with the server's message: the run stops,
  since every other request would be refused too. A context-length error (the prompt does not fit)
  ends only its episode, as the policy's (``context_budget``).
* **Concurrency**: at most ``max_concurrency`` requests in flight (default 1: a local server on a CPU
  answers 8 simultaneous requests slower each than one at a time; raise it for GPUs and hosted APIs).

The API key is read from the environment variable ``api_key_env`` (default ``OPENAI_API_KEY``),
never from a flag, and never stored: the results say only which variable was read and whether it
was set.
"""

from __future__ import annotations

import email.utils
import importlib
import logging
import os
import random
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from .chat import ChatRequest, Completion, RequestFailed, ServerRefused
from .openai_answers import Answer, BadAnswer, StreamReader, loads, parse_body, read_body, wire_limit

__all__ = ["OpenAIChatConfig", "OpenAIChatModel", "is_context_length_error"]

log = logging.getLogger(__name__)

#: Statuses worth retrying (the SDK's own rule): timeout, conflict, rate limit, server errors.
RETRY_STATUSES = frozenset({408, 409, 429})
#: The most bytes of a ``GET /models`` body read (providers with hundreds of models send a few MB).
MODELS_BODY_LIMIT = 16 << 20
_CONTEXT_RE = re.compile(
    r"context[ _-]?length|context window|maximum context|too many tokens|prompt is too long|"
    r"input is too long|exceeds the (?:model'?s? )?(?:maximum|max)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class OpenAIChatConfig:
    """Settings of :class:`OpenAIChatModel`.

    Args:
        base_url: the server's API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        api_key_env: environment variable holding the API key (unset: no key is sent, as local
            servers expect).
        temperature: sampling temperature (0: greedy where the server supports it).
        top_p: nucleus mass (None: the server's default).
        max_tokens: completion tokens per turn; a turn cut by it reports ``finish_reason="length"``.
        stop: stop strings.
        tool_choice: ``auto``, ``required`` or ``none`` (None: not sent; some servers reject it).
        chat_template_kwargs: sent as ``chat_template_kwargs`` (vLLM, SGLang, ``transformers serve``),
            e.g. ``{"enable_thinking": false}``.
        extra_body: other fields merged into the request body (e.g. ``{"top_k": 20}``).
        request_timeout_s: the wall-clock deadline of one attempt (connect, headers and body).
        max_retries: retries after the first attempt.
        initial_backoff_s, max_backoff_s: the retry waits (see the module docstring).
        server_wait_s: how long to wait for the server to answer at the start and after a
            connection error or timeout (a deadline too; the first probe gets at least 1 s).
        max_concurrency: requests in flight at most.
        stream: read answers as streams (see the module docstring).
        max_reply_bytes: the most UTF-8 bytes of reply text (content, tool names and arguments) kept
            per answer; the rest is not read and the turn is labelled ``truncated="max_reply_bytes"``.
            It bounds what a server that ignores ``max_tokens`` can make a record (and every later
            request of the episode) hold. A non-streamed body longer than about 8x the cap fails
            its attempt instead (it cannot be cut and read).
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    top_p: float | None = None
    max_tokens: int = 1024
    stop: tuple[str, ...] = ()
    tool_choice: str | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None
    extra_body: Mapping[str, Any] | None = None
    request_timeout_s: float = 1200.0
    max_retries: int = 6
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    server_wait_s: float = 600.0
    max_concurrency: int = 1
    stream: bool = True
    max_reply_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {self.base_url!r}")
        if not self.model:
            raise ValueError("model must name the served model, got an empty string")
        if not self.api_key_env or not self.api_key_env.replace("_", "").isalnum():
            raise ValueError(f"api_key_env must be an environment variable name, got {self.api_key_env!r}")
        _check_number("temperature", self.temperature, 0.0, 2.0)
        if self.top_p is not None:
            _check_number("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _check_int("max_tokens", self.max_tokens, 1)
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a sequence of non-empty strings, got {self.stop!r}")
        if self.tool_choice not in (None, "auto", "required", "none"):
            raise ValueError(f"tool_choice must be auto, required, none or unset, got {self.tool_choice!r}")
        for name in ("chat_template_kwargs", "extra_body"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
        _check_number("request_timeout_s", self.request_timeout_s, 0.0, float("inf"), low_open=True)
        _check_int("max_retries", self.max_retries, 0)
        _check_number("initial_backoff_s", self.initial_backoff_s, 0.0, float("inf"))
        _check_number("max_backoff_s", self.max_backoff_s, 0.0, float("inf"))
        _check_number("server_wait_s", self.server_wait_s, 0.0, float("inf"))
        _check_int("max_concurrency", self.max_concurrency, 1)
        _check_int("max_reply_bytes", self.max_reply_bytes, 1)

    def public(self) -> dict[str, Any]:
        """The settings as stored in the results: the URL without credentials or query."""
        out = asdict(self)
        parsed = urllib.parse.urlparse(self.base_url)
        assert parsed.hostname is not None  # __post_init__ checked it
        host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname  # IPv6: the brackets back
        out["base_url"] = urllib.parse.urlunparse(parsed._replace(netloc=host + (f":{parsed.port}" if parsed.port else ""),
                                                                  query="", fragment=""))
        out["stop"] = list(self.stop)
        for name in ("chat_template_kwargs", "extra_body"):
            out[name] = dict(getattr(self, name)) if getattr(self, name) is not None else None
        out["api_key_set"] = bool(os.environ.get(self.api_key_env))
        return out


def _check_number(name: str, value: Any, low: float, high: float, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    ok = ok and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be a number in {bracket}{low}, {high}], got {value!r}")


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def is_context_length_error(status_code: int | None, message: str, code: str | None = None) -> bool:
    """Whether a 4xx says the prompt does not fit the model's context (OpenAI's
    ``context_length_exceeded``, vLLM's "maximum context length is ...", llama.cpp's "exceeds the
    available context size" and the like)."""
    if status_code is None or not 400 <= status_code < 500 or status_code in RETRY_STATUSES:
        return False
    return code == "context_length_exceeded" or bool(_CONTEXT_RE.search(message or "")) or "context size" in (message or "")


class _Abandoned(Exception):
    """An attempt given up by the client: past its deadline, or the run stopped."""


class _Deadline:
    """A wall-clock deadline over one HTTP exchange, held by a watchdog timer.

    While it is the current deadline of its thread, each connection the exchange opens is noted
    (httpcore's ``trace`` request extension, set by :meth:`OpenAIChatModel._on_request`) as a
    duplicate of its socket. At the deadline, or when :meth:`expire` is called (the run stopped), the
    connection is shut down through it: a read blocked on the socket returns at once (closing the
    socket from another thread would not wake it), during the TLS handshake too. The duplicates are
    closed when the exchange ends, so the connection closes with the exchange.
    """

    _current = threading.local()

    def __init__(self, seconds: float, reason: str, registry: set[_Deadline], lock: threading.Lock):
        self.expired: str | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._over = False
        self._timer = threading.Timer(max(0.0, seconds), self.expire, (reason,))
        self._timer.daemon = True
        self._registry, self._registry_lock = registry, lock

    @classmethod
    def current(cls) -> _Deadline | None:
        return getattr(cls._current, "deadline", None)

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if not name.endswith(".connect_tcp.complete"):
            return
        sock = info["return_value"].get_extra_info("socket")
        with self._lock:
            self._sockets.append(sock.dup())
            if self.expired is not None:
                self._shutdown()

    def _shutdown(self) -> None:
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the peer has gone already

    def expire(self, reason: str) -> None:
        with self._lock:
            if self._over:
                return
            if self.expired is None:
                self.expired = reason
            self._shutdown()

    def check(self) -> None:
        """Raise :class:`_Abandoned` if the deadline has passed."""
        if self.expired is not None:
            raise _Abandoned(self.expired)

    def __enter__(self) -> _Deadline:
        with self._registry_lock:
            self._registry.add(self)
        self._current.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()
        self._current.deadline = None
        with self._lock:
            self._over = True
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()
        with self._registry_lock:
            self._registry.discard(self)


def _http_errors(openai: Any) -> type[Exception]:
    """The base error of the HTTP library under the SDK (``httpx``; ``httpx2`` for SDK 3), which a raw
    response's ``iter_bytes`` raises as is."""
    client_class = openai.DefaultHttpxClient.__mro__[1]  # httpx.Client or httpx2.Client
    return importlib.import_module(client_class.__module__.split(".")[0]).HTTPError


@dataclass
class _Attempts:
    count: int = 0
    started: float = field(default_factory=time.monotonic)


class _Retry(NamedTuple):
    """A failed attempt worth another: why, whether to wait for the server's health first, how long to wait."""

    reason: str
    recover: bool
    wait_s: float


class OpenAIChatModel:
    """A :class:`~.chat.ChatModel` over an OpenAI-compatible server (see the module docstring).

    Args:
        config: the settings.

    Raises:
        ImportError: the ``openai`` package is missing (``pip install 'sopgym[models]'``).
    """

    def __init__(self, config: OpenAIChatConfig):
        import openai

        self.config = config
        self._openai = openai
        self._http_errors = _http_errors(openai)
        self.client = openai.OpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env) or "no-key",
            max_retries=0,  # retries are ours: backoff, health waits and the refusal rule above
            timeout=openai.Timeout(config.request_timeout_s, connect=min(30.0, config.request_timeout_s)),
            default_headers={"Connection": "close"},  # a connection per attempt: its deadline watches it from the start
            http_client=openai.DefaultHttpxClient(event_hooks={"request": [self._on_request]}),
        )
        self._pool = ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="sopgym-openai")
        self._stop = threading.Event()
        self._health = threading.Lock()
        self._deadlines: set[_Deadline] = set()
        self._deadlines_lock = threading.Lock()
        self._ready = False
        self.served_models: list[str] | None = None

    @staticmethod
    def _on_request(request: Any) -> None:
        deadline = _Deadline.current()
        if deadline is not None:
            request.extensions = {**request.extensions, "trace": deadline.trace}

    def _deadline(self, seconds: float, reason: str) -> _Deadline:
        deadline = _Deadline(seconds, reason, self._deadlines, self._deadlines_lock)
        if self._stop.is_set():
            deadline.expire("the run stopped")
        return deadline

    def _abandon_all(self) -> None:
        """Stop now: every exchange in flight ends (its sockets shut down)."""
        self._stop.set()
        with self._deadlines_lock:
            deadlines = list(self._deadlines)
        for deadline in deadlines:
            deadline.expire("the run stopped")

    # -- readiness ----------------------------------------------------------------------------------
    def wait_until_ready(self, timeout_s: float | None = None) -> None:
        """Block until the server answers ``GET /models`` (at most ``timeout_s``, default
        ``server_wait_s``; the first probe gets at least 1 s).

        Raises:
            ServerRefused: the server refused the key (401/403), or never answered in time.
        """
        timeout_s = self.config.server_wait_s if timeout_s is None else timeout_s
        if not self._healthy(timeout_s):
            raise ServerRefused(None, f"the server at {self.config.public()['base_url']} did not answer GET /models within "
                                      f"{timeout_s:g} s (is it running? raise --server-wait for a server still loading)")
        self._ready = True

    def _healthy(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._health:
            probe_s = min(30.0, max(1.0, timeout_s))
            while True:
                if self._probe(probe_s):
                    return True
                left = deadline - time.monotonic()
                if self._stop.is_set() or left <= 0 or self._stop.wait(min(2.0, left)):
                    return False
                probe_s = min(30.0, deadline - time.monotonic())
                if probe_s <= 0:
                    return False

    def _probe(self, timeout_s: float) -> bool:
        """One ``GET /models`` within ``timeout_s``: whether the server answered."""
        openai = self._openai
        with self._deadline(timeout_s, f"GET /models took more than {timeout_s:g} s") as deadline:
            try:
                with self.client.models.with_streaming_response.list(timeout=timeout_s) as response:
                    body = read_body(response.iter_bytes(), MODELS_BODY_LIMIT)
                deadline.check()
            except openai.APIStatusError as exc:
                if deadline.expired is not None:
                    return False
                if exc.status_code in (401, 403):
                    raise ServerRefused(exc.status_code, f"the server refused the API key from ${self.config.api_key_env} "
                                                         f"(HTTP {exc.status_code}): {_server_message(exc)}") from None
                return exc.status_code < 500  # below 500 it answered; some servers have no /models
            except BadAnswer:
                return True  # it answered, with a listing too long to keep
            except (openai.APIError, _Abandoned, self._http_errors):
                return False
        self.served_models = _model_ids(body)
        return True

    # -- requests -------------------------------------------------------------------------------------
    def complete_batch(self, requests: Sequence[ChatRequest]) -> list[Completion | RequestFailed]:
        """Answer every request, at most ``max_concurrency`` in flight.

        Raises:
            ServerRefused: a refusal (the other requests are abandoned).
        """
        if not self._ready:
            self.wait_until_ready()
        futures = [self._pool.submit(self._complete, r) for r in requests]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for fut in done:
            exc = fut.exception()
            if exc is not None:
                self._abandon_all()  # the others' exchanges end now
                for other in futures:
                    other.cancel()
                raise exc
        return [f.result() for f in futures]

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "messages": request.messages, "max_tokens": cfg.max_tokens,
                                "temperature": cfg.temperature}
        if cfg.top_p is not None:
            body["top_p"] = cfg.top_p
        if cfg.stop:
            body["stop"] = list(cfg.stop)
        if request.seed is not None:
            body["seed"] = request.seed
        if request.tools:
            body["tools"] = request.tools
            if cfg.tool_choice is not None:
                body["tool_choice"] = cfg.tool_choice
        extra = dict(cfg.extra_body or {})
        if cfg.chat_template_kwargs is not None:
            extra["chat_template_kwargs"] = dict(cfg.chat_template_kwargs)
        if extra:
            body["extra_body"] = extra
        if cfg.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def cache_key(self, request: ChatRequest) -> dict[str, Any]:
        """What makes this request's answer (the response cache's key, :mod:`.response_cache`): the body
        as sent without the stream flags, the server's URL without credentials, the reply byte cap."""
        body = {key: value for key, value in self._body(request).items() if key not in ("stream", "stream_options")}
        return {"policy": "openai", "base_url": self.config.public()["base_url"], "body": body,
                "max_reply_bytes": self.config.max_reply_bytes}

    def _complete(self, request: ChatRequest) -> Completion | RequestFailed:
        cfg = self.config
        tries = _Attempts()
        last = "no attempt"
        for retry in range(cfg.max_retries + 1):
            if self._stop.is_set():
                raise _Abandoned("the run stopped")
            tries.count += 1
            outcome = self._attempt(request, retry, tries)
            if not isinstance(outcome, _Retry):
                return outcome
            last = outcome.reason
            if retry == cfg.max_retries:
                break
            if self._stop.wait(outcome.wait_s):
                raise _Abandoned("the run stopped")
            if outcome.recover and not self._healthy(cfg.server_wait_s):
                last += f"; the server did not answer again within {cfg.server_wait_s:g} s"
                break
        return RequestFailed("inference", f"{cfg.public()['base_url']}: no answer after {tries.count} attempt(s): {last}",
                             tries.count, time.monotonic() - tries.started)

    def _attempt(self, request: ChatRequest, retry: int, tries: _Attempts) -> Completion | RequestFailed | _Retry:
        """Attempt number ``retry + 1``: the completion, a failure not worth retrying, or why to retry.

        Raises:
            ServerRefused: a refusal.
            _Abandoned: the run stopped.
        """
        openai = self._openai
        cfg = self.config
        started = time.monotonic()
        wait_s = self._backoff(retry)
        try:
            answer = self._send(request)
            for warning in answer.usage_warnings:
                log.warning("%s: %s", cfg.public()["base_url"], warning)
            return Completion(answer.message, answer.finish_reason, answer.prompt_tokens, answer.completion_tokens,
                              time.monotonic() - started, tries.count, answer.truncated, answer.usage_warnings)
        except _Abandoned as exc:
            if self._stop.is_set():
                raise
            return _Retry(f"timed out: {exc}", True, wait_s)
        except openai.APITimeoutError:
            return _Retry(f"timed out after {cfg.request_timeout_s:g} s", True, wait_s)
        except openai.APIConnectionError as exc:
            return _Retry(f"connection failed: {exc}", True, wait_s)
        except openai.APIStatusError as exc:
            return self._status_error(exc, tries, wait_s)
        except BadAnswer as exc:
            return _Retry(f"malformed answer: {exc}", False, wait_s)
        except openai.APIError as exc:
            return _Retry(f"the server reported an error: {exc}", False, wait_s)
        except self._http_errors as exc:  # the body's transport failed mid-read
            return _Retry(f"connection failed while reading the answer: {type(exc).__name__}: {exc}", True, wait_s)

    def _status_error(self, exc: Any, tries: _Attempts, wait_s: float) -> RequestFailed | _Retry:
        """An HTTP error status: retried (429, 5xx: after the server's ``Retry-After`` when it gave one,
        bounded by the server wait), a context-length failure, or a refusal.

        Raises:
            ServerRefused: any other status.
        """
        cfg = self.config
        status, text = exc.status_code, _server_message(exc)
        code = getattr(exc, "code", None)
        if status in RETRY_STATUSES or status >= 500:
            asked = _retry_after(exc)  # the server's word beats our backoff (bounded by the server wait)
            return _Retry(f"HTTP {status}: {text}", False, min(asked, cfg.server_wait_s) if asked is not None else wait_s)
        if is_context_length_error(status, text, code if isinstance(code, str) else None):
            return RequestFailed("context_budget", f"the prompt does not fit the model's context (HTTP {status}): {text}",
                                 tries.count, time.monotonic() - tries.started)
        raise ServerRefused(status, f"the server refused the request (HTTP {status}): {text}") from None

    def _backoff(self, retry: int) -> float:
        cfg = self.config
        return min(cfg.max_backoff_s, cfg.initial_backoff_s * 2**retry) * random.uniform(0.75, 1.0)

    def _send(self, request: ChatRequest) -> Answer:
        """One attempt, within its deadline: the checked answer.

        Raises:
            _Abandoned: past the deadline, or the run stopped (whatever else the exchange raised).
            BadAnswer: a malformed answer; the SDK's and the HTTP library's errors otherwise.
        """
        cfg = self.config
        body = self._body(request)
        with self._deadline(cfg.request_timeout_s, f"the attempt passed its {cfg.request_timeout_s:g} s deadline") as deadline:
            try:
                with self.client.chat.completions.with_streaming_response.create(**body) as response:
                    chunks = response.iter_bytes()
                    if body.get("stream"):
                        reader = StreamReader(cfg.max_reply_bytes)
                        for chunk in chunks:
                            deadline.check()
                            if reader.feed(chunk):
                                break  # [DONE], or the reply's cap: leaving closes the connection
                        deadline.check()
                        answer = reader.reply()
                    else:
                        answer = parse_body(read_body(chunks, wire_limit(cfg.max_reply_bytes)), cfg.max_reply_bytes)
            except Exception:
                deadline.check()  # a read ended by the watchdog fails in whatever way the library reports it
                raise
            deadline.check()  # a stream ended by the watchdog can look finished
        return answer

    def describe(self) -> dict[str, Any]:
        import openai

        return {"policy": "openai", "model": self.config.model, "server": self.config.public(),
                "served_models": self.served_models, "openai_sdk": openai.__version__}

    def close(self) -> None:
        self._abandon_all()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


def _model_ids(body: bytes) -> list[str] | None:
    """The first 50 model ids of a ``GET /models`` listing (None when it holds none readably)."""
    try:
        listing = loads(body, "the model listing")
    except BadAnswer:
        return None
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return None
    ids = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return [i[:200] for i in ids[:50]]


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        for key in ("message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, Mapping) and "message" in value:
                value = value["message"]
            if value:
                return str(value)[:2000]
    return str(getattr(exc, "message", exc))[:2000]


def _retry_after(exc: Any) -> float | None:
    """Seconds the server asked to wait (``Retry-After`` as seconds or an HTTP date, or ``retry-after-ms``)."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())
