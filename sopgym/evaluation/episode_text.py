"""Episodes of a trajectory file, readably: reading the file and writing an episode as text
(``sopgym show``: :mod:`sopgym.cli.show`; the HTML viewer of many episodes: :mod:`.viewer`).

An episode shows the system message (the SOP) and the task input, then per turn the assistant's reply, the parsed tool calls with
their statuses, the tool results and the env's feedback, and what the model cost (tokens, latency,
``finish_reason``) when the run recorded it; at the end the answer, the expected answer, the
evaluator's verdict per field and overall, and the reward's components.

The text output never passes a control character through to the terminal: escape sequences, carriage
returns, bidirectional controls in model or tool text are printed as ``\x1b``-style escapes
(:func:`sopgym.evaluation.escaping.visible`). Every action the env accepted is shown, whatever its
shape: a native tool call that is not ``{"function": {"name", "arguments"}}`` is printed as its JSON.
"""

from __future__ import annotations

import json
from typing import Any

from sopgym.trajectory import check_format, loads_line, numbered_lines

from .escaping import visible

__all__ = ["read_trajectory", "format_episode", "action_text", "agent_text", "feedback", "verdict", "plain_json"]


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------
# What each kind of trajectory line must hold for `show` to print it: key -> (allowed types, description).
_LINE_FIELDS: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {
    "reset": {"observation": ((str, type(None)), "a string"), "system": ((str, type(None)), "a string")},
    "step": {
        "observation": ((str, type(None)), "a string"),
        "calls": ((list, type(None)), "a list of call objects"),
        "tool_results": ((list, type(None)), "a list of tool messages"),
        "reward": ((int, float, type(None)), "a number"),
        "status": ((str, type(None)), "a string"),
        "agent": ((dict, type(None)), "an object"),
    },
    "episode": {
        "reward": ((int, float, type(None)), "a number"),
        "truncated": ((bool, type(None)), "a boolean"),
        "extra": ((dict, type(None)), "an object"),
    },
}


def _check_line(kind: str, obj: dict[str, Any]) -> str | None:
    """Why a trajectory line cannot be shown (None when it can)."""
    for key, (types, what) in _LINE_FIELDS.get(kind, {}).items():
        value = obj.get(key)
        if not isinstance(value, types) or isinstance(value, bool) and bool not in types:
            return f"{kind} line: {key!r} must be {what}, got {type(value).__name__}"
    if kind == "step":
        for key in ("calls", "tool_results"):
            for item in obj.get(key) or []:
                if not isinstance(item, dict):
                    return f"step line: each of {key!r} must be an object, got {type(item).__name__}"
        for msg in obj.get("tool_results") or []:
            if not isinstance(msg.get("content"), (str, type(None))):
                return f"step line: a tool result's 'content' must be a string, got {type(msg['content']).__name__}"
    return None


def read_trajectory(path: str) -> tuple[dict[str, Any] | None, dict[int, dict[str, Any]]]:
    """``(run line or None, episodes by index)``; an episode is ``{"reset", "steps", "episode"}``.

    Raises:
        OSError: the file cannot be read.
        ValueError: a line that is not UTF-8 JSON (:class:`sopgym.trajectory.UnreadableLine`), not a JSON
            object or whose fields have the wrong types, or a run line of another format than this
            version's, naming the line.
    """
    run = None
    episodes: dict[int, dict[str, Any]] = {}
    for _number, where, line in numbered_lines(path):
        if not line.strip():
            continue
        obj = loads_line(line, where)
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected a JSON object per line, got {type(obj).__name__}")
        if obj.get("type") == "run" and "episode_index" not in obj:
            check_format(obj, where)
            run = obj
            continue
        index = obj.get("episode_index")
        if index is None:
            continue  # not a trajectory line (e.g. a bare record)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"{where}: 'episode_index' must be a non-negative integer, got {plain_json(index)[:60]}")
        kind = obj.get("type")
        if not isinstance(kind, (str, type(None))):
            raise ValueError(f"{where}: 'type' must be 'reset', 'step' or 'episode', got {type(kind).__name__}")
        problem = _check_line(kind, obj) if kind else None
        if problem:
            raise ValueError(f"{where}: {problem}")
        ep = episodes.setdefault(index, {"reset": None, "steps": [], "episode": None})
        if kind == "reset":
            ep["reset"] = obj
        elif kind == "step":
            ep["steps"].append(obj)
        elif kind == "episode":
            ep["episode"] = obj
    return run, episodes


# --------------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------------
def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}" if isinstance(value, float) else _plain(value, 60)


def _cut(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f" ...[{len(text) - limit} more characters]"
    return text


def _indent(text: str, prefix: str = "    ") -> str:
    """Each line of ``text`` indented. Lines end at line feeds only (``\r\n`` counts as one): any
    other line-breaking character stays in the line, to be shown escaped."""
    return "\n".join(prefix + line for line in str(text).replace("\r\n", "\n").split("\n"))


def plain_json(value: Any) -> str:
    """``json.dumps`` for display; never raises (a value read from JSON may still be too deep to write)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"<cannot display: {type(exc).__name__}>"


def _plain(value: Any, limit: int = 200) -> str:
    """A string as itself, None as ``None``, anything else as its JSON text; cut at ``limit`` (never raises)."""
    return (value if isinstance(value, str) else "None" if value is None else plain_json(value))[:limit]


def action_text(action: Any) -> str:
    """A reply as text: its content, and native tool calls as ``-> name(arguments)`` lines. Whatever
    the env accepted is shown: content that is not a string, ``tool_calls`` that is not a list, and a
    call that is not ``{"function": {"name", "arguments"}}`` (the env recorded it as ``ERROR_PARSE``)
    appear as their JSON, labelled."""
    if isinstance(action, str):
        return action
    if not isinstance(action, dict):
        return plain_json(action)
    content = action.get("content")
    parts = [content if isinstance(content, str) else f"{plain_json(content)} [content that is not text]"] if content else []
    calls = action.get("tool_calls")
    if calls and not isinstance(calls, list):
        parts.append(f"-> {plain_json(calls)} [tool_calls that is not a list]")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(f"-> {function.get('name')}({function.get('arguments')}) [native tool call]")
        else:
            parts.append(f"-> {plain_json(call)} [unreadable native tool call]")
    return "\n".join(p for p in parts if p)


def agent_text(agent: Any) -> str | None:
    if not isinstance(agent, dict):
        return None
    bits = [f"{_plain(agent.get('prompt_tokens'), 20)} prompt + {_plain(agent.get('completion_tokens'), 20)} completion tokens"]
    if isinstance(agent.get("latency_s"), (int, float)):
        bits.append(f"{agent['latency_s']:.2f} s")
    bits.append(f"finish_reason {_plain(agent.get('finish_reason'), 40)}"
                + (" (cut by max_tokens)" if agent.get("finish_reason") == "length" else ""))
    if agent.get("attempts", 1) != 1:
        bits.append(f"{_plain(agent['attempts'], 20)} attempts")
    return ", ".join(bits)


def verdict(index: int, record: dict[str, Any]) -> tuple[Any, str | None]:
    from sopgym.evaluation import score_record

    try:
        return score_record(record, where=f"episode {index}"), None
    except (ValueError, TypeError, RecursionError) as exc:
        return None, f"cannot score this record: {type(exc).__name__}: {_cut(str(exc), 300)}"


def format_episode(index: int, ep: dict[str, Any], max_chars: int = 1500) -> str:
    """One recorded episode as readable text (see the module docstring)."""
    record = ep["episode"] or {}
    task_id = record.get("task_id") or (ep["reset"] or {}).get("task_id", "?")
    out = [f"== episode {index} | {_plain(task_id)} =="]
    if record.get("env_id"):
        out.append(f"env: {_plain(record['env_id'])}")
    if ep["reset"] is not None:
        if isinstance(ep["reset"].get("system"), str):
            out += ["system:", _indent(_cut(ep["reset"]["system"], max_chars))]
        out += ["task input:", _indent(_cut(str(ep["reset"].get("observation") or ""), max_chars))]
    for step in ep["steps"]:
        out.append(f"-- turn {_plain(step.get('turn'), 60)} | {_plain(step.get('status'), 60)} | reward {_fmt(step.get('reward'))}")
        agent = agent_text(step.get("agent"))
        if agent:
            out.append(f"  model: {agent}")
        out += ["  assistant:", _indent(_cut(action_text(step.get("action")), max_chars))]
        for call in step.get("calls") or []:
            if isinstance(call, dict):
                out.append(f"  call {_plain(call.get('name'))}({_cut(plain_json(call.get('arguments')), max_chars)}) -> "
                           f"{_plain(call.get('status'), 60)}")
        results = [m for m in step.get("tool_results") or [] if isinstance(m, dict)]
        for msg in results:
            out += [f"  tool {_plain(msg.get('name'))}:", _indent(_cut(msg.get("content") or "", max_chars))]
        env_text = feedback(step)
        if env_text:
            out += ["  env:", _indent(_cut(env_text, max_chars))]
    if ep["episode"] is None:
        out.append("(episode not finished in this file)")
        return visible("\n".join(out))
    end = f"truncated ({_plain(record.get('truncation_cause'), 60)})" if record.get("truncated") else "terminated"
    out.append(f"== end: {end} | {_plain(record.get('turns'), 60)} turns | reward {_fmt(record.get('reward'))}")
    failed = (ep["episode"].get("extra") or {}).get("failed_request") if isinstance(ep["episode"].get("extra"), dict) else None
    if failed:
        out.append(f"  ended by the harness: {_plain(failed.get('cause'), 60)}: {_cut(_plain(failed.get('message'), 10_000), max_chars)}")
    out.append(f"  answer:   {_cut(plain_json(record.get('answer')), max_chars)}")
    out.append(f"  expected: {_cut(plain_json(record.get('expected')), max_chars)}")
    score, problem = verdict(index, record)
    if problem:
        out.append(f"  evaluator: {problem}")
    else:
        fields = "  ".join(f"{name} {'right' if ok else 'WRONG'}" for name, ok in score.fields.items())
        out.append(f"  fields: {fields}")
        out.append(f"  evaluator: success={score.success} completed={score.completed} state_ok={score.state_ok} "
                   f"infrastructure_failure={score.infrastructure_failure}")
    components = record.get("reward_components")
    if isinstance(components, dict) and components:
        out.append("  reward components: " + "  ".join(f"{_plain(k, 80)} {_fmt(v)}" for k, v in components.items()))
    return visible("\n".join(out))


def feedback(step: dict[str, Any]) -> str:
    """The env's text for the turn that is not a tool result (e.g. "No tool call found ...")."""
    observation = step.get("observation")
    if not isinstance(observation, str) or not observation:
        return ""
    parts = [p for p in observation.split("\n") if p]
    if step.get("tool_results"):
        kept, inside = [], False
        for line in observation.split("\n"):
            if line == "<tool_response>":
                inside = True
            elif line == "</tool_response>":
                inside = False
            elif not inside:
                kept.append(line)
        parts = [p for p in kept if p]
    return "\n".join(parts)
