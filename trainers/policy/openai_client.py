"""A message-level policy over an OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, SGLang, hosted).

Used for evaluation and remote generation. It speaks messages, not tokens, so its episodes cannot be
trained on token-exactly; use ``policy.hf`` for training rollouts. Standard library only (urllib).

Example:
    >>> policy = OpenAIChatPolicy("http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
    >>> reply = policy.complete(info["messages"], info["tools"])   # Hermes <tool_call> text  # doctest: +SKIP
    >>> results = run_episodes(specs, ChatAgent(policy), pool)  # the episode runner  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class EndpointError(RuntimeError):
    """The endpoint failed after all retries (an infrastructure failure, not the policy's fault)."""


def tool_calls_to_hermes(message: dict[str, Any]) -> str:
    """Assistant message -> the text the env parses: content plus ``<tool_call>`` blocks for structured calls."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        args = fn.get("arguments", "{}")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            pass  # the env reports ERROR_PARSE / ERROR_BAD_ARGUMENTS
        parts.append("<tool_call>" + json.dumps({"name": fn.get("name"), "arguments": args}) + "</tool_call>")
    return "\n".join(p for p in parts if p)


class OpenAIChatPolicy:
    """One chat completion per episode turn; ``complete_batch`` runs a batch concurrently.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        api_key: sent as a bearer token when given.
        pass_tools: send ``tools`` so servers with native tool calling return ``tool_calls``
            (converted to Hermes text); False keeps the tool list only in the prompt.
        retries: attempts on connection errors and 5xx/429 before ``EndpointError``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 512,
        timeout_s: float = 60.0,
        retries: int = 3,
        pass_tools: bool = True,
        max_workers: int = 8,
    ):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.timeout_s, self.retries, self.pass_tools, self.max_workers = timeout_s, retries, pass_tools, max_workers

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(self.retries):
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as exc:
                last = exc
                if exc.code < 500 and exc.code != 429:
                    raise EndpointError(f"{self.url}: HTTP {exc.code}: {exc.read()[:500]!r}") from exc
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = exc
            time.sleep(min(2.0, 0.1 * 2**attempt))
        raise EndpointError(f"{self.url}: failed after {self.retries} attempts: {last}")

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        """The assistant's reply text (tool calls as Hermes blocks) for one chat."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if tools and self.pass_tools:
            body["tools"] = tools
        reply = self._post(body)
        return tool_calls_to_hermes(reply["choices"][0]["message"])

    def complete_batch(self, chats: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]) -> list[str | EndpointError]:
        """Replies for many chats at once (at most ``max_workers`` requests in flight); a request that
        failed after its retries gives its :class:`EndpointError` in place of a reply, so one failure
        fails only its own chat."""

        def one(chat):
            try:
                return self.complete(*chat)
            except EndpointError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            return list(pool.map(one, chats))


class ChatAgent:
    """An :class:`OpenAIChatPolicy` as an agent of the episode runner (:mod:`sopgym.evaluation.runner`).

    Each round sends every running episode's chat (``info["messages"]`` and ``info["tools"]``); an
    episode whose request failed after its retries is ended as an infrastructure failure
    (``EndEpisode("inference")``), never scored as the policy's, and the others carry on.
    """

    def __init__(self, policy: OpenAIChatPolicy):
        self.policy = policy
        self._tools: dict[int, Any] = {}

    def start(self, slot, spec, observation, info) -> None:
        self._tools[slot] = info.get("tools")

    def act(self, slots, observations, infos) -> list[Any]:
        from sopgym.evaluation.runner import EndEpisode

        replies = self.policy.complete_batch([(info["messages"], self._tools[s]) for s, info in zip(slots, infos)])
        return [EndEpisode("inference", str(r)) if isinstance(r, EndpointError) else r for r in replies]

    def observe(self, slot, turn, info, result) -> None:
        if result is not None:
            self._tools.pop(slot, None)
