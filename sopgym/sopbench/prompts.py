"""Prompt layouts for SOP-Bench tasks.

* ``chat`` (default): our format, like every sopgym domain: system message with the SOP, a user
  message listing the task inputs as JSON values (missing cells are ``null``), tools as functions,
  the answer through ``submit_answer``.
* ``upstream``: upstream's function-calling agent layout, for comparison runs: no system message; one
  user message with an instruction to follow the SOP, the SOP inside ``<sop>...</sop>``, "Task to
  process:" and one ``key: value`` line per input in CSV column order with raw pandas values (NaN as
  ``nan``), an instruction to use the tools, and the final decision inside
  ``<final_decision>...</final_decision>``. The env then also accepts a reply without a tool call
  that carries ``<final_decision>`` as the submission (upstream stops at the first such reply).
  Difference kept on purpose: for domains without ``input_columns`` upstream lists the whole row,
  ground truth included; we list only the shown inputs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PROMPT_STYLES", "chat_user_message", "upstream_user_message", "final_decision", "UPSTREAM_MAX_TURNS"]

PROMPT_STYLES = ("chat", "upstream")
#: Upstream's agent makes at most 10 model calls.
UPSTREAM_MAX_TURNS = 10

_UPSTREAM = (
    "Please follow this Standard Operating Procedure to process the given task:\n\n"
    "<sop>\n{sop}\n</sop>\n\n"
    "Task to process:\n{inputs}\n\n"
    "Follow the SOP step by step. Use the available tools to gather information and make decisions.\n\n"
    "IMPORTANT: Once you have completed all steps, provide your final decision in the following XML format:\n\n"
    "<final_decision>your_decision_value</final_decision>\n\n"
    "Where your_decision_value should be the final decision as specified in the SOP. \n"
    "Provide ONLY the decision value inside the tags, without any additional explanation or formatting."
)


def chat_user_message(inputs: Mapping[str, Any]) -> str:
    lines = [f"- {k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}" for k, v in inputs.items()]
    return "Process this case according to the SOP.\n\nCase inputs:\n" + "\n".join(lines)


def upstream_user_message(sop: str, raw_row: Mapping[str, Any], shown: Sequence[str]) -> str:
    """Upstream's single user message; ``raw_row`` as pandas gives it, ``shown`` the input columns."""
    keep = set(shown)
    inputs = "\n".join(f"{k}: {v}" for k, v in raw_row.items() if k in keep)
    return _UPSTREAM.format(sop=sop, inputs=inputs)


_OPEN, _CLOSE = "<final_decision>", "</final_decision>"


def final_decision(text: str) -> str | None:
    """The content of the last ``<final_decision>`` block, stripped (None if there is none).

    Blocks are matched left to right, each open tag with the next close tag (what the non-greedy
    pattern ``<final_decision>(.*?)</final_decision>`` finds), in one linear scan: a reply full of
    unclosed tags costs the same as any other reply of its length.
    """
    text = text or ""
    found, position = None, 0
    while (start := text.find(_OPEN, position)) >= 0:
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            break
        found, position = text[start + len(_OPEN):end], end + len(_CLOSE)
    return found.strip() if found is not None else None
