"""A chat model behind any OpenAI-compatible ``/v1/chat/completions`` endpoint, through the official
``openai`` SDK: vLLM, SGLang, llama.cpp, ``transformers serve``, hosted APIs.

What it does about servers (defaults chosen so a local server on a CPU works as well as a hosted API):

* **Readiness**: before the first request it waits (``server_wait_s``, default 10 min) until
  ``GET /models`` answers, so a server still loading its model is not taken for a failing one. A
  401/403 there stops the run at once (a bad key).
* **Timeouts**: one per request (``request_timeout_s``, default 20 min: CPU turns of 6 minutes were
  measured); no single read may take longer either.
* **Streaming** (default): the answer is read as a stream, so abandoning a request (a timeout, or a
  run that stops) closes its connection and servers that abort on disconnect (vLLM, SGLang,
  ``transformers serve``'s streaming path) stop generating: a retry never queues behind the
  abandoned attempt. A retry is sent only after the previous attempt's connection is closed.
  ``stream=False`` for servers whose streaming misbehaves.
* **Retries**: on timeouts, connection errors, 408/409/429 and 5xx, up to ``max_retries`` times,
  waiting ``initial_backoff_s * 2**i`` (at most ``max_backoff_s``, jittered) or the server's
  ``Retry-After``; after a connection error or timeout the retry also waits until the server answers
  again. A request that still fails ends only its episode, as an infrastructure failure.
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
import os
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any

from .chat import ChatRequest, Completion, RequestFailed, ServerRefused

__all__ = ["OpenAIChatConfig", "OpenAIChatModel", "is_context_length_error"]

#: Statuses worth retrying (the SDK's own rule): timeout, conflict, rate limit, server errors.
RETRY_STATUSES = frozenset({408, 409, 429})
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
        request_timeout_s: the whole of one attempt, and the longest single read.
        max_retries: retries after the first attempt.
        initial_backoff_s, max_backoff_s: the retry waits (see the module docstring).
        server_wait_s: how long to wait for the server to answer at the start and after a
            connection error or timeout.
        max_concurrency: requests in flight at most.
        stream: read answers as streams (see the module docstring).
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

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
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

    def public(self) -> dict[str, Any]:
        """The settings as stored in the results: the URL without credentials or query."""
        out = asdict(self)
        parsed = urllib.parse.urlparse(self.base_url)
        out["base_url"] = urllib.parse.urlunparse(parsed._replace(netloc=parsed.hostname + (f":{parsed.port}" if parsed.port else ""),
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


@dataclass
class _Attempts:
    count: int = 0
    started: float = field(default_factory=time.monotonic)


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
        self.client = openai.OpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env) or "no-key",
            max_retries=0,  # retries are ours: backoff, health waits and the refusal rule above
            timeout=openai.Timeout(config.request_timeout_s, connect=min(30.0, config.request_timeout_s)),
        )
        self._pool = ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="sopgym-openai")
        self._stop = threading.Event()
        self._health = threading.Lock()
        self._ready = False
        self.served_models: list[str] | None = None

    # -- readiness ----------------------------------------------------------------------------------
    def wait_until_ready(self, timeout_s: float | None = None) -> None:
        """Block until the server answers ``GET /models`` (at most ``timeout_s``, default
        ``server_wait_s``).

        Raises:
            ServerRefused: the server refused the key (401/403), or never answered in time.
        """
        if not self._healthy(self.config.server_wait_s if timeout_s is None else timeout_s):
            raise ServerRefused(None, f"the server at {self.config.public()['base_url']} did not answer GET /models within "
                                      f"{self.config.server_wait_s if timeout_s is None else timeout_s:.0f} s "
                                      "(is it running? raise --server-wait for a server still loading)")
        self._ready = True

    def _healthy(self, timeout_s: float) -> bool:
        openai = self._openai
        deadline = time.monotonic() + timeout_s
        with self._health:
            while True:
                try:
                    page = self.client.models.list(timeout=min(30.0, max(1.0, timeout_s)))
                    self.served_models = [m.id for m in page.data][:50]
                    return True
                except openai.APIStatusError as exc:
                    if exc.status_code in (401, 403):
                        raise ServerRefused(exc.status_code, f"the server refused the API key from ${self.config.api_key_env} "
                                                             f"(HTTP {exc.status_code}): {_server_message(exc)}") from None
                    if exc.status_code < 500:
                        return True  # it answered; some servers have no /models
                except (openai.APIConnectionError, openai.APIError):
                    pass
                if self._stop.is_set() or time.monotonic() >= deadline:
                    return False
                time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))

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
                self._stop.set()  # abandon the others: their streams close at the next chunk
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

    def _complete(self, request: ChatRequest) -> Completion | RequestFailed:
        openai = self._openai
        cfg = self.config
        tries = _Attempts()
        last = "no attempt"
        for retry in range(cfg.max_retries + 1):
            if self._stop.is_set():
                raise _Abandoned("the run stopped")
            tries.count += 1
            started = time.monotonic()
            wait_s = self._backoff(retry)
            recover = False
            try:
                message, finish, usage = self._send(request)
                prompt_tokens = getattr(usage, "prompt_tokens", None) if usage is not None else None
                completion_tokens = getattr(usage, "completion_tokens", None) if usage is not None else None
                return Completion(message, finish, prompt_tokens, completion_tokens, time.monotonic() - started, tries.count)
            except _Abandoned as exc:
                if self._stop.is_set():
                    raise
                last, recover = f"timed out after {cfg.request_timeout_s:.0f} s ({exc})", True
            except openai.APITimeoutError:
                last, recover = f"timed out after {cfg.request_timeout_s:.0f} s", True
            except openai.APIConnectionError as exc:
                last, recover = f"connection failed: {exc}", True
            except openai.APIStatusError as exc:
                status, text = exc.status_code, _server_message(exc)
                code = getattr(exc, "code", None)
                if status in RETRY_STATUSES or status >= 500:
                    last = f"HTTP {status}: {text}"
                    asked = _retry_after(exc)  # the server's word beats our backoff (bounded by the server wait)
                    wait_s = min(asked, cfg.server_wait_s) if asked is not None else wait_s
                elif is_context_length_error(status, text, code if isinstance(code, str) else None):
                    return RequestFailed("context_budget", f"the prompt does not fit the model's context (HTTP {status}): {text}",
                                         tries.count, time.monotonic() - tries.started)
                else:
                    raise ServerRefused(status, f"the server refused the request (HTTP {status}): {text}") from None
            except openai.APIError as exc:  # an error event inside a stream: the server failed mid-answer
                last = f"the server reported an error: {exc}"
            if retry == cfg.max_retries:
                break
            time.sleep(wait_s)
            if recover and not self._healthy(cfg.server_wait_s):
                last += f"; the server did not answer again within {cfg.server_wait_s:.0f} s"
                break
        return RequestFailed("inference", f"{cfg.public()['base_url']}: no answer after {tries.count} attempt(s): {last}",
                             tries.count, time.monotonic() - tries.started)

    def _backoff(self, retry: int) -> float:
        cfg = self.config
        return min(cfg.max_backoff_s, cfg.initial_backoff_s * 2**retry) * random.uniform(0.75, 1.0)

    def _send(self, request: ChatRequest) -> tuple[dict[str, Any], str | None, Any]:
        """One attempt: (assistant message, finish_reason, usage)."""
        body = self._body(request)
        if not body.get("stream"):
            response = self.client.chat.completions.create(**body)
            choice = response.choices[0]
            return _message_dict(choice.message), choice.finish_reason, response.usage
        from openai.lib.streaming.chat import ChatCompletionStreamState

        deadline = time.monotonic() + self.config.request_timeout_s
        state = ChatCompletionStreamState()
        stream = self.client.chat.completions.create(**body)
        try:
            for chunk in stream:
                state.handle_chunk(chunk)
                if self._stop.is_set():
                    raise _Abandoned("the run stopped")
                if time.monotonic() > deadline:
                    raise _Abandoned("the stream went past the request deadline")
        finally:
            stream.close()  # closes the connection: a server that aborts on disconnect stops generating
        snapshot = state.current_completion_snapshot
        choice = snapshot.choices[0]
        return _message_dict(choice.message), choice.finish_reason, snapshot.usage

    def describe(self) -> dict[str, Any]:
        import openai

        return {"policy": "openai", "model": self.config.model, "server": self.config.public(),
                "served_models": self.served_models, "openai_sdk": openai.__version__}

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


def _message_dict(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": getattr(message, "content", None)}
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls
        ]
    return out


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
