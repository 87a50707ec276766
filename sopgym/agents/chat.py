"""Chat models as agents of the episode runner: what every message-level model agent shares.

A **chat model** (:class:`ChatModel`) answers a batch of chat requests: an OpenAI-compatible server
(:mod:`.openai_chat`) or a local Hugging Face model (:mod:`.hf_local`). :class:`ChatAgent` turns the
env's chat into those requests and the answers into env actions, one round of the runner at a time:

* **History form** (chosen per server, see :func:`history_messages`): the env's assistant messages
  hold both the reply's text (``<tool_call>`` blocks included) and the parsed ``tool_calls``; sending
  both makes servers drop one (``transformers serve`` drops the content) or templates show each call
  twice. ``native`` sends structured ``tool_calls`` and ``tool`` messages (the call text removed from
  the content); ``text`` sends the reply's text as written (native calls written as ``<tool_call>``
  blocks) and each turn's tool results as one user message of ``<tool_response>`` blocks, which any
  server and template accepts.
* **Tools** (``tools_mode``): ``native`` sends the schemas as the request's ``tools``; ``prompt``
  writes them into the system message (:mod:`.tool_prompt`) for servers or templates without tool
  support.
* **Replies**: native ``tool_calls`` go to the env as an assistant-message dict, text replies as the
  text (the env reads Hermes ``<tool_call>`` blocks and bare JSON calls).
* **Failures**: a request that failed after its retries ends only its own episode, as an
  infrastructure failure (``EndEpisode("inference")``, excluded from success and counted); a prompt
  the model's context cannot hold ends it as the policy's (``EndEpisode("context_budget")``). A
  request the server refuses outright (a 4xx such as tools without auto tool choice) raises
  :class:`ServerRefused` out of the run: no retry or other episode can fix the configuration.
* **Accounting**: per turn, prompt and completion tokens, latency, ``finish_reason`` (``length``:
  cut by ``max_tokens``), attempts, ``truncated`` (``max_reply_bytes``: cut by the client's byte cap),
  ``cached`` (answered by the response cache, :mod:`.response_cache`) and, when the server's counts were dropped, ``usage_warnings``; per episode their sums and, with
  prices, the cost. They go to ``EpisodeResult.extra`` (``turns``: one entry per env turn;
  ``model``: the episode's totals) and from there into the trajectory lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .tool_prompt import with_tools_in_system

__all__ = [
    "ChatRequest", "Completion", "RequestFailed", "ServerRefused", "ChatModel", "Prices", "ChatAgent",
    "TOOLS_MODES", "HISTORY_FORMS", "history_messages", "hermes_text", "usage_totals",
]

TOOLS_MODES = ("native", "prompt")
HISTORY_FORMS = ("native", "text")
_BLOCK_RE = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)


# --------------------------------------------------------------------------------------------------
# Requests and answers
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChatRequest:
    """One chat to complete.

    Args:
        messages: the chat in the agent's history form (tools already in the system message when
            ``tools_mode == "prompt"``).
        tools: OpenAI-style tool schemas to send natively, or None.
        seed: the sampling seed of this request (None: the server's or the sampler's default).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    seed: int | None = None


@dataclass(frozen=True)
class Completion:
    """A model's answer to one request.

    Args:
        message: the assistant message: ``content`` (str or None) and, when the model called tools
            natively, ``tool_calls`` (OpenAI entries).
        finish_reason: ``stop``, ``length`` (cut by ``max_tokens``), ``tool_calls``, ... as reported.
        prompt_tokens, completion_tokens: usage as reported (None when the server gave none).
        latency_s: seconds of the attempt that answered (or of the batch, for a local model).
        attempts: requests sent, retries included.
        truncated: ``max_reply_bytes`` when the client cut the reply at its byte cap (the server
            ignored ``max_tokens``), else None.
        usage_warnings: why reported token counts were dropped (recorded as missing).
        cached: the answer came from the response cache (:mod:`.response_cache`): no request was
            sent (``attempts`` 0, ``latency_s`` 0).
    """

    message: dict[str, Any]
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    attempts: int = 1
    truncated: str | None = None
    usage_warnings: tuple[str, ...] = ()
    cached: bool = False


@dataclass(frozen=True)
class RequestFailed:
    """A request that got no answer for its episode (the episode ends; other episodes go on).

    Args:
        cause: ``inference`` (the server failed after the retries: an infrastructure failure) or
            ``context_budget`` (the prompt does not fit the model's context: the policy's).
        message: what the server or the client said.
        attempts: requests sent.
        latency_s: seconds spent on it, waits included.
    """

    cause: str
    message: str
    attempts: int = 1
    latency_s: float = 0.0


class ServerRefused(RuntimeError):
    """The server refused a request in a way no retry can fix (a 4xx other than 408/409/429 and
    context-length errors: a bad model name, tools the server was not started for, a bad key). The
    run stops at once with the server's message."""

    def __init__(self, status_code: int | None, message: str):
        super().__init__(message)
        self.status_code = status_code


class ChatModel(Protocol):
    """What :class:`ChatAgent` needs from a model.

    ``complete_batch`` answers every request (in order) with a :class:`Completion` or a
    :class:`RequestFailed`, raising :class:`ServerRefused` only for a refusal that ends the run;
    ``describe`` returns the model's configuration as stored in the results (never a secret);
    ``native_tools`` says whether ``tools_mode="native"`` reaches the model (None: unknown, as for a
    remote server).
    """

    def complete_batch(self, requests: Sequence[ChatRequest]) -> list[Completion | RequestFailed]: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Prices:
    """Prices in US dollars per million tokens (the unit providers publish)."""

    prompt_per_million: float
    completion_per_million: float

    def __post_init__(self) -> None:
        for name in ("prompt_per_million", "completion_per_million"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not np.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0 (USD per million tokens), got {value!r}")

    def cost(self, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        if prompt_tokens is None or completion_tokens is None:
            return None
        return (prompt_tokens * self.prompt_per_million + completion_tokens * self.completion_per_million) / 1e6


# --------------------------------------------------------------------------------------------------
# History forms
# --------------------------------------------------------------------------------------------------
def hermes_text(tool_calls: Sequence[dict[str, Any]]) -> str:
    """OpenAI ``tool_calls`` entries as ``<tool_call>`` blocks (arguments kept as the JSON text sent)."""
    blocks = []
    for call in tool_calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        name = json.dumps(function.get("name"), ensure_ascii=False)
        blocks.append(f'<tool_call>\n{{"name": {name}, "arguments": {arguments or "{}"}}}\n</tool_call>')
    return "\n".join(blocks)


def _carries_calls_as_text(content: str | None) -> bool:
    """Whether a reply's text already holds its calls (a text reply), as opposed to a native one."""
    from sopgym.envs.parsing import parse_reply

    return bool(content) and bool(parse_reply(content).calls)


def history_messages(messages: Sequence[dict[str, Any]], form: str) -> list[dict[str, Any]]:
    """The env's chat (``info["messages"]``) in one history form.

    Args:
        messages: the env's messages (system, user, assistant with ``content`` and ``tool_calls``,
            ``tool`` results, user feedback).
        form: ``native`` or ``text`` (see the module docstring).

    Returns:
        New message dicts (the input is not changed).

    Raises:
        ValueError: an unknown form.
    """
    from sopgym.envs.rendering import observation

    if form not in HISTORY_FORMS:
        raise ValueError(f"history form must be one of {HISTORY_FORMS}, got {form!r}")
    out: list[dict[str, Any]] = []
    if form == "native":
        for msg in messages:
            role = msg["role"]
            if role == "assistant" and msg.get("tool_calls"):
                text = _BLOCK_RE.sub("", msg.get("content") or "").strip()
                if _carries_calls_as_text(text):  # a bare-JSON call: the whole text is the call
                    text = ""
                out.append({"role": "assistant", "content": text or None, "tool_calls": [dict(c) for c in msg["tool_calls"]]})
            elif role == "tool":
                out.append({"role": "tool", "tool_call_id": msg.get("tool_call_id"), "content": msg.get("content") or ""})
            else:
                out.append({"role": role, "content": msg.get("content") or ""})
        return out
    pending: list[dict[str, Any]] = []  # env messages after an assistant turn, sent as one user message

    def flush() -> None:
        if pending:
            out.append({"role": "user", "content": observation(pending)})
            pending.clear()

    after_assistant = False
    for msg in messages:
        role = msg["role"]
        if role == "assistant":
            flush()
            content = msg.get("content") or ""
            calls = msg.get("tool_calls") or []
            if calls and not _carries_calls_as_text(content):
                content = f"{content}\n{hermes_text(calls)}".strip()
            out.append({"role": "assistant", "content": content})
            after_assistant = True
        elif after_assistant and role in ("tool", "user"):
            pending.append(msg)
        else:
            out.append({"role": role, "content": msg.get("content") or ""})
    flush()
    return out


# --------------------------------------------------------------------------------------------------
# The agent
# --------------------------------------------------------------------------------------------------
@dataclass
class _Episode:
    seed: int | None
    tools: list[dict[str, Any]] | None
    turns: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[str, Any] | None = None


def usage_totals(turns: Sequence[dict[str, Any]], prices: Prices | None = None) -> dict[str, Any]:
    """An episode's (or a run's) totals from per-turn entries: tokens (None when any turn lacks them),
    latency, requests, turns cut by ``max_tokens`` and by the reply byte cap, turns answered from the
    response cache, and the cost when prices are given (of the turns asked of the model: a cached
    answer costs nothing)."""
    prompt_total, completion_total = _token_totals(turns)
    totals: dict[str, Any] = {
        "requests": int(sum(t.get("attempts", 1) for t in turns)),
        "turns": len(turns),
        "prompt_tokens": prompt_total,
        "completion_tokens": completion_total,
        "latency_s": float(sum(t.get("latency_s") or 0.0 for t in turns)),
        "max_tokens_cuts": sum(t.get("finish_reason") == "length" for t in turns),
        "reply_byte_cuts": sum(t.get("truncated") == "max_reply_bytes" for t in turns),
        "cached_turns": sum(bool(t.get("cached")) for t in turns),
    }
    if prices is not None:
        totals["cost_usd"] = prices.cost(*_token_totals([t for t in turns if not t.get("cached")]))
    return totals


def _token_totals(turns: Sequence[dict[str, Any]]) -> tuple[int | None, int | None]:
    """Summed prompt and completion tokens (each None when a turn lacks its count)."""
    prompt: list[Any] = [t.get("prompt_tokens") for t in turns]
    completion: list[Any] = [t.get("completion_tokens") for t in turns]
    return (None if any(x is None for x in prompt) else int(sum(prompt)),
            None if any(x is None for x in completion) else int(sum(completion)))


class ChatAgent:
    """A :class:`ChatModel` as a batched agent of :func:`sopgym.episodes.runner.run_episodes`.

    Args:
        model: answers the requests.
        tools_mode: ``native`` (tools in the request) or ``prompt`` (tools in the system message).
        history: ``native`` or ``text``; None picks ``native`` with native tools, ``text`` otherwise.
        seed: when set, each request carries a seed derived from (seed, the episode's seed, the
            turn), so runs repeat and samples of one task differ.
        prices: per-token prices for the cost (None: no cost reported).

    Raises:
        ValueError: an unknown mode, or native history without native tools (the server would see
            tool calls of tools it was never given).
    """

    def __init__(self, model: ChatModel, *, tools_mode: str = "native", history: str | None = None,
                 seed: int | None = None, prices: Prices | None = None):
        if tools_mode not in TOOLS_MODES:
            raise ValueError(f"tools_mode must be one of {TOOLS_MODES}, got {tools_mode!r}")
        history = history or ("native" if tools_mode == "native" else "text")
        if history not in HISTORY_FORMS:
            raise ValueError(f"history must be one of {HISTORY_FORMS}, got {history!r}")
        if history == "native" and tools_mode == "prompt":
            raise ValueError("history='native' sends structured tool calls, which needs tools_mode='native'; "
                             "with tools in the prompt use history='text'")
        self.model = model
        self.tools_mode, self.history, self.seed, self.prices = tools_mode, history, seed, prices
        self._episodes: dict[int, _Episode] = {}

    def describe(self) -> dict[str, Any]:
        """The agent's settings and its model's, for the results."""
        model = self.model.describe()
        native_via = model.pop("native_tools_via", "request")
        tools_via = "system_message" if self.tools_mode == "prompt" else native_via
        return {**model, "tools_mode": self.tools_mode, "tools_via": tools_via, "history": self.history, "seed": self.seed,
                "prices_usd_per_million": None if self.prices is None else
                {"prompt": self.prices.prompt_per_million, "completion": self.prices.completion_per_million}}

    def request(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None,
                seed: int | None = None) -> ChatRequest:
        """The request for an env chat in this agent's history form and tools mode."""
        chat = history_messages(messages, self.history)
        if self.tools_mode == "prompt" and tools:
            return ChatRequest(with_tools_in_system(chat, tools), None, seed)
        return ChatRequest(chat, list(tools) if tools else None, seed)

    def _request_seed(self, episode: _Episode) -> int | None:
        if self.seed is None:
            return None
        entropy = [self.seed, episode.seed if episode.seed is not None else 0, len(episode.turns)]
        return int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)  # 31 bits: any server takes it

    # -- BatchAgent -------------------------------------------------------------------------------
    def start(self, slot: int, spec: Any, observation: str, info: dict[str, Any]) -> None:
        self._episodes[slot] = _Episode(spec.seed, info.get("tools"))

    def act(self, slots: list[int], observations: list[str], infos: list[dict[str, Any]]) -> list[Any]:
        from sopgym.episodes.specs import EndEpisode

        episodes = [self._episodes[s] for s in slots]
        requests = [self.request(info["messages"], ep.tools, self._request_seed(ep)) for ep, info in zip(episodes, infos)]
        answers = self.model.complete_batch(requests)
        if len(answers) != len(requests):
            raise AssertionError(f"complete_batch answered {len(answers)} requests, expected {len(requests)}")
        actions: list[Any] = []
        for ep, answer in zip(episodes, answers):
            if isinstance(answer, RequestFailed):
                ep.failed = {"cause": answer.cause, "message": answer.message, "attempts": answer.attempts,
                             "latency_s": answer.latency_s}
                actions.append(EndEpisode(answer.cause, answer.message))
                continue
            turn: dict[str, Any] = {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                    "latency_s": answer.latency_s, "finish_reason": answer.finish_reason, "attempts": answer.attempts,
                    "truncated": answer.truncated}
            if answer.usage_warnings:
                turn["usage_warnings"] = list(answer.usage_warnings)
            if answer.cached:
                turn["cached"] = True
            ep.turns.append(turn)
            actions.append(reply_action(answer.message))
        return actions

    def observe(self, slot: int, turn: Any, info: dict[str, Any], result: Any) -> None:
        if result is None:
            return
        ep = self._episodes.pop(slot)
        result.extra["turns"] = ep.turns
        result.extra["model"] = usage_totals(ep.turns, self.prices)
        if ep.failed is not None:
            result.extra["failed_request"] = ep.failed


def reply_action(message: dict[str, Any]) -> Any:
    """What the env gets for an assistant message: the message dict when it has native tool calls
    (the env reads them), else its text (the env reads ``<tool_call>`` blocks and bare JSON)."""
    content = message.get("content")
    content = content if isinstance(content, str) else ""
    calls = message.get("tool_calls")
    if calls:
        return {"role": "assistant", "content": content,
                "tool_calls": [{"id": c.get("id"), "type": "function",
                                "function": {"name": (c.get("function") or {}).get("name"),
                                             "arguments": (c.get("function") or {}).get("arguments")}} for c in calls]}
    return content
