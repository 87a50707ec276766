"""Tools written into the system message, for servers and chat templates without native tool support.

``--tools prompt`` keeps ``tools`` out of the request and appends this block to the system message
(a system message is added when the chat has none, e.g. SOP-Bench's upstream prompt style). The
format is Hermes', the one Qwen2.5's chat template renders for ``tools=`` and many open models were
trained on, so a model that knows it sees the same text either way:

.. code-block:: text

    # Tools

    You may call one or more functions to assist with the user query.

    You are provided with function signatures within <tools></tools> XML tags:
    <tools>
    {"type": "function", "function": {"name": ..., "description": ..., "parameters": {...JSON Schema...}}}
    ...one line per tool, in the env's order (submit_answer last)...
    </tools>

    For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call>

The env accepts exactly that reply (and bare JSON, see :mod:`sopgym.envs.parsing`). Each tool is one
line of JSON (keys in the env's order, non-ASCII kept), so the block is stable across runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["TOOLS_HEADER", "render_tools", "with_tools_in_system"]

TOOLS_HEADER = "# Tools"

_TEMPLATE = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def render_tools(tools: Sequence[dict[str, Any]]) -> str:
    """The tools block (see the module docstring) for OpenAI-style tool schemas.

    Raises:
        ValueError: a tool that is not ``{"type": "function", "function": {"name": ...}}``.
    """
    lines = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"expected tools as {{'type': 'function', 'function': {{'name': ...}}}}, got {tool!r}")
        lines.append(json.dumps(tool, ensure_ascii=False))
    return _TEMPLATE.format(tools="\n".join(lines))


def with_tools_in_system(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the tools block appended to the system message (or a system message of its
    own put first when there is none). The input list is not changed."""
    block = render_tools(tools)
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content') or ''}\n\n{block}".lstrip("\n")
    else:
        out.insert(0, {"role": "system", "content": block})
    return out
