"""How the env writes messages and observations. Pure functions of their inputs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sopgym.sop_tasks.pack import SUBMIT_TOOL, DomainPack
from sopgym.status import Status

__all__ = [
    "system_message", "tool_call_entry", "feedback", "observation", "cap", "status_message",
    "transcript", "tool_calls_text", "NO_TOOL_CALL_TEXT",
]

_ARGS_ENCODER = json.JSONEncoder(ensure_ascii=False)

NO_TOOL_CALL_TEXT = (
    "No tool call found in your reply. Call a tool as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>, "
    f"or call {SUBMIT_TOOL} to give the final answer."
)

_INSTRUCTIONS = """You are an operations agent. Follow the Standard Operating Procedure (SOP) below exactly.

Use the tools to obtain every fact the SOP needs; do not guess facts you can look up. Call tools as
<tool_call>{{"name": "<tool name>", "arguments": {{...}}}}</tool_call> (several calls per reply are allowed).
When the SOP's decision is reached, call {submit} with the fields it asks for. Calling {submit} ends the task.

<sop>
{sop}
</sop>"""


def system_message(pack: DomainPack) -> dict[str, Any]:
    return {"role": "system", "content": _INSTRUCTIONS.format(submit=SUBMIT_TOOL, sop=pack.sop.strip())}


def tool_call_entry(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": _ARGS_ENCODER.encode(arguments)},
    }


def feedback(text: str) -> dict[str, Any]:
    """Env feedback that is not the result of a named call (no call found, unreadable call)."""
    return {"role": "user", "content": text}


def cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"...[truncated {len(text) - limit + 40} characters]"
    return text[: limit - len(marker)] + marker if limit > len(marker) else text[:limit]


def observation(results: Iterable[Mapping[str, Any]]) -> str:
    """The next turn's observation: each result inside a ``<tool_response>`` block."""
    parts = []
    for msg in results:
        if msg["role"] == "tool":
            parts.append(f"<tool_response>\n{msg['content']}\n</tool_response>")
        else:
            parts.append(msg["content"])
    return "\n".join(parts)


def status_message(status: Status, calls: list[dict[str, Any]], reply_error: str | None, truncation: str | None = None) -> str:
    """What the step did, for ``info["status_message"]``; ``truncation`` (why the env truncated the
    episode, when it says more than the status) is added at the end."""
    text = _turn_message(status, calls, reply_error)
    return f"{text}; truncated: {truncation}" if truncation else text


def _turn_message(status: Status, calls: list[dict[str, Any]], reply_error: str | None) -> str:
    if reply_error:
        return reply_error
    if status is Status.NO_TOOL_CALL:
        return "the reply contained no tool call"
    if status is Status.SUBMITTED:
        return "answer submitted"
    bad = [c for c in calls if c["status"] != Status.OK.value]
    if not bad:
        return f"{len(calls)} tool call(s) answered"
    return "; ".join(f"{c['name'] or '<unreadable>'}: {c['status']}" for c in bad)


def tool_calls_text(message: Mapping[str, Any]) -> str:
    """Text of an assistant message's structured tool calls (counted in the context budget when the
    reply was a dict whose content does not already hold them)."""
    if message.get("content"):
        return ""
    return "".join(tc["function"]["name"] + tc["function"]["arguments"] for tc in message.get("tool_calls", ()))


def transcript(messages: Iterable[Mapping[str, Any]]) -> str:
    lines = []
    for msg in messages:
        head = msg["role"].upper()
        if msg.get("name"):
            head += f" ({msg['name']})"
        body = msg.get("content") or ""
        for tc in msg.get("tool_calls", ()):
            body += f"\n-> {tc['function']['name']}({tc['function']['arguments']})"
        lines.append(f"[{head}]\n{body.strip()}")
    return "\n\n".join(lines)
