"""A response cache for chat models: a re-run with the same settings asks the model nothing.

``sopgym eval --cache DIR`` wraps the run's model (:class:`~.openai_chat.OpenAIChatModel` or
:class:`~.hf_local.HFChatModel`) in :class:`CachedChatModel`. Each request is looked up by its **key**:
the SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8) of what the model's
``cache_key(request)`` returns, which is everything that changes the answer:

* ``openai``: the request body exactly as sent (model name, messages, tools, ``tool_choice``,
  ``temperature``, ``top_p``, ``max_tokens``, ``stop``, the request's ``seed``, ``extra_body``,
  ``chat_template_kwargs``; the stream flags left out: they change how the answer travels, not what
  it says), the server's URL without credentials and ``max_reply_bytes``;
* ``hf``: the model path, dtype, ``temperature``, ``top_p``, ``max_tokens``, the context limit,
  ``chat_template_kwargs``, the messages, tools and seed (not the device or the thread count).

A hit answers without calling the model: the stored answer comes back with ``attempts=0``,
``latency_s=0`` and ``cached=True`` (the turn records ``"cached": true``; the results count
``cached_turns``, leave those turns out of the latency figures and of the cost). Only whole answers
are stored: a failed request (:class:`~.chat.RequestFailed`), an answer cut by the client's byte cap
(``truncated``) or one whose end the server did not report (``finish_reason`` null) is never kept, so
the next run asks again.

Store: one SQLite file (``DIR/responses.sqlite3``, standard library ``sqlite3``) in WAL mode with a
30 s busy timeout, so episodes in threads of one run and several runs in other processes read and
write it at once; each answer is one autocommitted ``INSERT OR REPLACE``. Entries older than the
expiry (``--cache-expiry``, default 7 days; ``never``) miss and are replaced when the answer comes.
A file that is not this cache (not SQLite, damaged, another schema, a row that does not read back)
raises :class:`CacheError` naming the file: a damaged cache is never taken for an empty one.

Honest simplifications: with ``hf`` and ``--temperature > 0`` an answer depends on the requests it
was batched with (one generator per round, see :mod:`.hf_local`), so a partly cached sampled run is
not the run it would have been uncached; greedy runs are. The server's weights are not part of the
key: a different model served under the same name and URL would hit (clear the folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .chat import ChatRequest, Completion, RequestFailed

__all__ = ["CacheError", "ResponseCache", "CachedChatModel", "request_key", "CACHE_FILE", "DEFAULT_EXPIRY_S"]

CACHE_FILE = "responses.sqlite3"
CACHE_FORMAT = "sopgym-response-cache/1"
DEFAULT_EXPIRY_S = 7 * 24 * 3600.0
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, created REAL NOT NULL, model TEXT NOT NULL, "
    "answer TEXT NOT NULL)",
)
_ANSWER_KEYS = ("message", "finish_reason", "prompt_tokens", "completion_tokens", "latency_s", "usage_warnings")


class CacheError(ValueError):
    """The cache file cannot be used: not SQLite, damaged, not this cache's schema, a row that does not
    read back, or locked past the busy timeout. The message names the file."""


def request_key(fields: dict[str, Any]) -> str:
    """The key of a request: SHA-256 of the canonical JSON of ``fields`` (and the cache's format).

    Raises:
        TypeError: a value JSON cannot hold.
    """
    text = json.dumps({"format": CACHE_FORMAT, **fields}, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cacheable(answer: Completion | RequestFailed) -> bool:
    """A whole answer: not a failure, not cut by the client's byte cap, its end reported by the server."""
    return isinstance(answer, Completion) and answer.truncated is None and answer.finish_reason is not None


class ResponseCache:
    """Answers by request key in one SQLite file (see the module docstring).

    Args:
        folder: the cache folder (created); the file is ``folder/responses.sqlite3``.
        expiry_s: entries older than this many seconds miss (None: never).
        clock: seconds since the epoch (tests pass a fake one).

    Raises:
        CacheError: the file exists but is not a usable cache.
    """

    def __init__(self, folder: str | os.PathLike, expiry_s: float | None = DEFAULT_EXPIRY_S,
                 clock: Callable[[], float] = time.time):
        if expiry_s is not None and not expiry_s > 0:
            raise ValueError(f"expiry_s must be a number of seconds > 0 or None (never), got {expiry_s!r}")
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise CacheError(f"cache folder {str(folder)!r} is a file; expected a folder")
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / CACHE_FILE
        self.expiry_s, self.clock = expiry_s, clock
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "misses": 0, "expired": 0, "stored": 0, "not_stored": 0}
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise CacheError(f"{self.path}: cannot open the response cache ({exc})") from None
        self._open()

    def _fail(self, exc: Exception, doing: str) -> CacheError:
        return CacheError(f"{self.path}: {doing}: {type(exc).__name__}: {exc} (a damaged response cache? move the file "
                          "away or choose another --cache folder)")

    def _open(self) -> None:
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            check = [row[0] for row in self._db.execute("PRAGMA quick_check")]
            if check != ["ok"]:
                raise CacheError(f"{self.path}: the response cache is damaged (SQLite quick_check: {'; '.join(check)[:300]}); "
                                 "move the file away or choose another --cache folder")
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables - {"meta", "answers"}:
                raise CacheError(f"{self.path}: expected a sopgym response cache (tables meta, answers), got tables "
                                 f"{sorted(tables)}")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA:
                    self._db.execute(statement)
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (CACHE_FORMAT,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            (found,) = self._db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
        except sqlite3.Error as exc:
            self._db.close()
            raise self._fail(exc, "cannot read the response cache") from None
        except CacheError:
            self._db.close()
            raise
        if found != CACHE_FORMAT:
            self._db.close()
            raise CacheError(f"{self.path}: the response cache's format is {found!r}; this version reads {CACHE_FORMAT!r}")

    def get(self, key: str) -> Completion | None:
        """The stored answer of ``key`` (None: absent or expired)."""
        try:
            with self._lock:
                row = self._db.execute("SELECT created, answer FROM answers WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise self._fail(exc, "cannot read an answer") from None
        if row is None:
            self._count("misses")
            return None
        created, text = row
        if self.expiry_s is not None and self.clock() - float(created) > self.expiry_s:
            self._count("misses")
            self._count("expired")
            return None
        completion = self._decode(key, text)
        self._count("hits")
        return completion

    def _decode(self, key: str, text: Any) -> Completion:
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or set(_ANSWER_KEYS) - set(data) or not isinstance(data["message"], dict):
                raise ValueError(f"expected an object with {list(_ANSWER_KEYS)}")
            return Completion(data["message"], data["finish_reason"], data["prompt_tokens"], data["completion_tokens"],
                              0.0, attempts=0, usage_warnings=tuple(data["usage_warnings"]), cached=True)
        except (TypeError, ValueError, RecursionError) as exc:
            raise CacheError(f"{self.path}: the answer stored under key {key[:16]}... does not read back "
                             f"({type(exc).__name__}: {str(exc)[:200]}); a damaged response cache?") from None

    def put(self, key: str, model: str, answer: Completion) -> None:
        """Store ``answer`` under ``key`` (replacing an expired one)."""
        text = json.dumps({"message": answer.message, "finish_reason": answer.finish_reason,
                           "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                           "latency_s": answer.latency_s, "usage_warnings": list(answer.usage_warnings)},
                          ensure_ascii=False, allow_nan=False)
        try:
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?)", (key, self.clock(), model, text))
        except sqlite3.Error as exc:
            raise self._fail(exc, "cannot store an answer") from None
        self._count("stored")

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    def describe(self) -> dict[str, Any]:
        """Where the cache is, its expiry, and this run's counts (hits, misses, expired, stored, not stored)."""
        with self._lock:
            return {"path": str(self.path), "expiry_s": self.expiry_s, **self.stats}

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedChatModel:
    """A :class:`~.chat.ChatModel` that answers from a :class:`ResponseCache` and asks ``model`` only for
    the requests the cache misses (in one batch, in order), storing the whole answers.

    Args:
        model: the model; it must have ``cache_key(request) -> dict`` (what changes its answer).
        cache: the store.

    Raises:
        TypeError: ``model`` has no ``cache_key``.
    """

    def __init__(self, model: Any, cache: ResponseCache):
        if not callable(getattr(model, "cache_key", None)):
            raise TypeError(f"{type(model).__name__} has no cache_key(request): its answers cannot be cached")
        self.inner, self.cache = model, cache
        self._name = str(model.describe().get("model"))

    def complete_batch(self, requests: Sequence[ChatRequest]) -> list[Completion | RequestFailed]:
        keys = [request_key(self.inner.cache_key(r)) for r in requests]
        answers: list[Completion | RequestFailed | None] = [self.cache.get(k) for k in keys]
        missing = [i for i, a in enumerate(answers) if a is None]
        if missing:
            fresh = self.inner.complete_batch([requests[i] for i in missing])
            for i, answer in zip(missing, fresh):
                answers[i] = answer
                if _cacheable(answer):
                    self.cache.put(keys[i], self._name, answer)
                else:
                    self.cache._count("not_stored")
        return [a for a in answers if a is not None]  # every slot is filled: from the cache or fresh

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "response_cache": self.cache.describe()}

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.cache.close()
