"""``sopgym show``: episodes of a trajectory file, readably, as text or as one self-contained HTML page.

An episode shows the system message (the SOP) and the task input, then per turn the assistant's reply, the parsed tool calls with
their statuses, the tool results and the env's feedback, and what the model cost (tokens, latency,
``finish_reason``) when the run recorded it; at the end the answer, the expected answer, the
evaluator's verdict per field and overall, and the reward's components. ``--html PAGE`` writes every
episode of the file (or those picked with ``--episode``) into one page that needs nothing else: no
script, no stylesheet or font from elsewhere; every text from the file is escaped.

The text output never passes a control character through to the terminal: escape sequences, carriage
returns, bidirectional controls in model or tool text are printed as ``\x1b``-style escapes
(:func:`sopgym.evaluation.escaping.visible`). Every action the env accepted is shown, whatever its
shape: a native tool call that is not ``{"function": {"name", "arguments"}}`` is printed as its JSON.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Sequence
from typing import Any

from .escaping import visible

__all__ = ["add_show_parser", "cmd_show", "read_trajectory", "format_episode", "episodes_html"]


def add_show_parser(subparsers) -> argparse.ArgumentParser:
    from sopgym.cli.arguments import non_negative_int as _non_negative_int

    parser = subparsers.add_parser("show", help="print an episode of a trajectory file readably (or write HTML)")
    parser.add_argument("path", help="JSONL written by `sopgym eval --trajectories` or RecordTrajectory")
    parser.add_argument("--episode", type=_non_negative_int, action="append", default=None,
                        help="episode index (default: the first; repeatable)")
    parser.add_argument("--max-chars", type=_non_negative_int, default=1500,
                        help="cut each text block to this length (0: no cut)")
    parser.add_argument("--html", default=None, metavar="PAGE",
                        help="write the episodes (all, or those of --episode) to this self-contained HTML page")
    parser.set_defaults(func=cmd_show)
    return parser


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
        ValueError: a line that is not a JSON object or whose fields have the wrong types, naming the line.
    """
    run = None
    episodes: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except RecursionError:
                raise ValueError(f"{where}: the line is nested too deeply to read") from None
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: expected a JSON object per line, got invalid JSON ({exc})") from None
            except ValueError as exc:  # e.g. an integer beyond Python's int-string limit
                raise ValueError(f"{where}: cannot read the line: {str(exc).split(';')[0]}") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: expected a JSON object per line, got {type(obj).__name__}")
            if obj.get("type") == "run" and "episode_index" not in obj:
                run = obj
                continue
            index = obj.get("episode_index")
            if index is None:
                continue  # not a trajectory line (e.g. a bare record)
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise ValueError(f"{where}: 'episode_index' must be a non-negative integer, got {_json(index)[:60]}")
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


def _json(value: Any) -> str:
    """``json.dumps`` for display; never raises (a value read from JSON may still be too deep to write)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"<cannot display: {type(exc).__name__}>"


def _plain(value: Any, limit: int = 200) -> str:
    """A string as itself, None as ``None``, anything else as its JSON text; cut at ``limit`` (never raises)."""
    return (value if isinstance(value, str) else "None" if value is None else _json(value))[:limit]


def _action_text(action: Any) -> str:
    """A reply as text: its content, and native tool calls as ``-> name(arguments)`` lines. Whatever
    the env accepted is shown: content that is not a string, ``tool_calls`` that is not a list, and a
    call that is not ``{"function": {"name", "arguments"}}`` (the env recorded it as ``ERROR_PARSE``)
    appear as their JSON, labelled."""
    if isinstance(action, str):
        return action
    if not isinstance(action, dict):
        return _json(action)
    content = action.get("content")
    parts = [content if isinstance(content, str) else f"{_json(content)} [content that is not text]"] if content else []
    calls = action.get("tool_calls")
    if calls and not isinstance(calls, list):
        parts.append(f"-> {_json(calls)} [tool_calls that is not a list]")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(f"-> {function.get('name')}({function.get('arguments')}) [native tool call]")
        else:
            parts.append(f"-> {_json(call)} [unreadable native tool call]")
    return "\n".join(p for p in parts if p)


def _agent_text(agent: Any) -> str | None:
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


def _verdict(index: int, record: dict[str, Any]) -> tuple[Any, str | None]:
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
        agent = _agent_text(step.get("agent"))
        if agent:
            out.append(f"  model: {agent}")
        out += ["  assistant:", _indent(_cut(_action_text(step.get("action")), max_chars))]
        for call in step.get("calls") or []:
            if isinstance(call, dict):
                out.append(f"  call {_plain(call.get('name'))}({_cut(_json(call.get('arguments')), max_chars)}) -> "
                           f"{_plain(call.get('status'), 60)}")
        results = [m for m in step.get("tool_results") or [] if isinstance(m, dict)]
        for msg in results:
            out += [f"  tool {_plain(msg.get('name'))}:", _indent(_cut(msg.get("content") or "", max_chars))]
        feedback = _feedback(step)
        if feedback:
            out += ["  env:", _indent(_cut(feedback, max_chars))]
    if ep["episode"] is None:
        out.append("(episode not finished in this file)")
        return visible("\n".join(out))
    end = f"truncated ({_plain(record.get('truncation_cause'), 60)})" if record.get("truncated") else "terminated"
    out.append(f"== end: {end} | {_plain(record.get('turns'), 60)} turns | reward {_fmt(record.get('reward'))}")
    failed = (ep["episode"].get("extra") or {}).get("failed_request") if isinstance(ep["episode"].get("extra"), dict) else None
    if failed:
        out.append(f"  ended by the harness: {_plain(failed.get('cause'), 60)}: {_cut(_plain(failed.get('message'), 10_000), max_chars)}")
    out.append(f"  answer:   {_cut(_json(record.get('answer')), max_chars)}")
    out.append(f"  expected: {_cut(_json(record.get('expected')), max_chars)}")
    score, problem = _verdict(index, record)
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


def _feedback(step: dict[str, Any]) -> str:
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


# --------------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem;color:#1d1d1f;max-width:1100px}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;font-size:.9rem}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:.5rem;border-radius:4px;margin:.3rem 0}
details{border:1px solid #ddd;border-radius:6px;padding:.3rem .7rem;margin:.5rem 0}summary{cursor:pointer;font-weight:600}
.ok{color:#0a7d27}.bad{color:#b3261e}.muted{color:#666;font-size:.85rem}.turn{border-left:3px solid #8ab4f8;padding-left:.6rem;margin:.6rem 0}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _episode_html(index: int, ep: dict[str, Any]) -> str:
    record = ep["episode"] or {}
    score, problem = _verdict(index, record) if ep["episode"] is not None else (None, "episode not finished in this file")
    verdict = ("unscored" if score is None else "success" if score.success else "failure")
    css = "ok" if score is not None and score.success else "bad"
    task_id = record.get("task_id") or (ep["reset"] or {}).get("task_id", "?")
    parts = [f'<details id="ep-{index}"><summary>episode {index} · {_e(task_id)} · '
             f'<span class="{css}">{verdict}</span> · {_e(record.get("turns", len(ep["steps"])))} turns</summary>']
    if ep["reset"] is not None:
        if isinstance(ep["reset"].get("system"), str):
            parts.append(f"<details><summary>System message (the SOP)</summary><pre>{_e(ep['reset']['system'])}</pre></details>")
        parts.append(f"<h4>Task input</h4><pre>{_e(ep['reset'].get('observation') or '')}</pre>")
    for step in ep["steps"]:
        parts.append(f'<div class="turn"><b>turn {_e(step.get("turn"))}</b> · {_e(step.get("status"))} · '
                     f'reward {_e(_fmt(step.get("reward")))}')
        agent = _agent_text(step.get("agent"))
        if agent:
            parts.append(f'<div class="muted">model: {_e(agent)}</div>')
        parts.append(f"<pre>{_e(_action_text(step.get('action')))}</pre>")
        calls = [c for c in step.get("calls") or [] if isinstance(c, dict)]
        if calls:
            parts.append("<table><tr><th>call</th><th>arguments</th><th>status</th></tr>" + "".join(
                f"<tr><td>{_e(c.get('name'))}</td><td><code>{_e(_json(c.get('arguments')))}</code></td>"
                f"<td>{_e(c.get('status'))}</td></tr>" for c in calls) + "</table>")
        for msg in [m for m in step.get("tool_results") or [] if isinstance(m, dict)]:
            parts.append(f'<div class="muted">tool {_e(msg.get("name"))}</div><pre>{_e(msg.get("content") or "")}</pre>')
        feedback = _feedback(step)
        if feedback:
            parts.append(f'<div class="muted">env</div><pre>{_e(feedback)}</pre>')
        parts.append("</div>")
    if ep["episode"] is not None:
        end = f"truncated ({record.get('truncation_cause')})" if record.get("truncated") else "terminated"
        parts.append(f"<h4>End: {_e(end)} · reward {_e(_fmt(record.get('reward')))}</h4>")
        if problem:
            parts.append(f'<p class="bad">evaluator: {_e(problem)}</p>')
        else:
            answer = record.get("answer") if isinstance(record.get("answer"), dict) else {}
            expected = record.get("expected") if isinstance(record.get("expected"), dict) else {}
            parts.append("<table><tr><th>field</th><th>answer</th><th>expected</th><th>verdict</th></tr>" + "".join(
                f"<tr><td>{_e(name)}</td><td>{_e(_json(answer.get(name)))}</td><td>{_e(_json(expected.get(name)))}</td>"
                f'<td class="{"ok" if ok else "bad"}">{"right" if ok else "wrong"}</td></tr>'
                for name, ok in score.fields.items()) + "</table>")
            parts.append(f'<p>evaluator: success={score.success} · completed={score.completed} · state_ok={score.state_ok} · '
                         f"infrastructure_failure={score.infrastructure_failure}</p>")
        components = record.get("reward_components")
        if isinstance(components, dict) and components:
            parts.append("<p class=\"muted\">reward components: " + " · ".join(f"{_e(k)} {_e(_fmt(v))}" for k, v in components.items()) + "</p>")
    parts.append("</details>")
    return "\n".join(parts)


def episodes_html(path: str, run: dict[str, Any] | None, episodes: dict[int, dict[str, Any]], indices: Sequence[int]) -> str:
    """A self-contained page of the given episodes: a summary table, then one collapsible block each."""
    rows = []
    for i in indices:
        ep = episodes[i]
        record = ep["episode"] or {}
        score, _ = _verdict(i, record) if ep["episode"] is not None else (None, None)
        tokens = sum((s.get("agent") or {}).get("completion_tokens") or 0 for s in ep["steps"] if isinstance(s.get("agent"), dict))
        verdict = "unscored" if score is None else "success" if score.success else "failure"
        rows.append(f'<tr><td><a href="#ep-{i}">{i}</a></td><td>{_e(record.get("env_id", ""))}</td>'
                    f'<td>{_e(record.get("task_id") or (ep["reset"] or {}).get("task_id", ""))}</td>'
                    f'<td class="{"ok" if score is not None and score.success else "bad"}">{verdict}</td>'
                    f'<td>{_e(record.get("turns", len(ep["steps"])))}</td><td>{_e(record.get("truncation_cause") or "")}</td>'
                    f"<td>{tokens or ''}</td></tr>")
    identity = f"<pre>{_e(json.dumps(run.get('identity'), indent=1, ensure_ascii=False))}</pre>" if run else ""
    successes = sum('class="ok">success' in r for r in rows)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sopgym episodes: "
        f"{_e(path)}</title><style>{_CSS}</style></head><body>\n<h1>Episodes of {_e(path)}</h1>\n"
        f"<p>{len(indices)} episodes, {successes} successes (the evaluator's verdict).</p>\n"
        + (f"<details><summary>run configuration</summary>{identity}</details>\n" if identity else "")
        + "<table><tr><th>#</th><th>env</th><th>task</th><th>verdict</th><th>turns</th><th>truncated</th>"
        "<th>completion tokens</th></tr>\n" + "\n".join(rows) + "</table>\n"
        + "\n".join(_episode_html(i, episodes[i]) for i in indices) + "\n</body></html>\n"
    )


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------
def cmd_show(args: argparse.Namespace) -> int:
    try:
        run, episodes = read_trajectory(args.path)
    except (OSError, ValueError) as exc:
        print(f"sopgym show: {visible(str(exc), newlines=False)}", file=sys.stderr)
        return 2
    if not episodes:
        print(f"sopgym show: no episodes in {args.path} (expected lines with an episode_index)", file=sys.stderr)
        return 2
    indices = sorted(episodes)
    missing = [i for i in args.episode or [] if i not in episodes]
    if missing:
        print(f"sopgym show: no episode {missing[0]} in {args.path}; it has episodes {indices[0]}..{indices[-1]} "
              f"({len(indices)} in all)", file=sys.stderr)
        return 2
    if args.html:
        chosen = list(args.episode) if args.episode else indices
        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(episodes_html(args.path, run, episodes, chosen))
        except OSError as exc:
            print(f"sopgym show: cannot write {args.html}: {exc}", file=sys.stderr)
            return 2
        print(f"{len(chosen)} episodes: {args.html}")
        return 0
    chosen = list(args.episode) if args.episode else [indices[0]]
    print("\n\n".join(format_episode(i, episodes[i], args.max_chars) for i in chosen))
    if not args.episode and len(indices) > 1:
        print(f"\n({len(indices)} episodes in this file: {indices[0]}..{indices[-1]}; pick one with --episode i)")
    return 0
