"""The episode viewer: every episode of one or more runs in one self-contained HTML file
(``sopgym show TRAJECTORIES... --html PAGE``, ``sopgym report ... --viewer``).

The page works offline and alone: its script and stylesheet are inline (``viewer.js`` and
``viewer.css`` beside this module), a Content-Security-Policy allows only those two (by hash) and no
network at all (``default-src 'none'``), and nothing is loaded from elsewhere. The episodes are data:
one JSON document inside ``<script type="application/json">`` whose ``<``, ``>`` and ``&`` are
written as ``\\u003c``-style escapes (and every non-ASCII character as ``\\uXXXX``), so no text a model
or a tool wrote (``</script>``, ``<!--``) can end the element; the page's script reads it with
``JSON.parse`` and builds the page with ``textContent`` only, so no such text is ever read as HTML.
Texts are also passed through :func:`sopgym.evaluation.escaping.visible` (control and bidirectional
characters shown as escapes), as ``sopgym show`` prints them.

What the page offers: a leaderboard (runs x envs, success over episodes) whose cells link to the
episodes behind them; search over the episodes' text (task input, replies, calls, tool results, the
env's feedback, answers; not the SOP, which every episode of an env shares); filters by run, env,
verdict (the evaluator's ``score_record``), turn status, truncation cause and infrastructure failure;
an episode's turns, its answer against the expected one field by field and, for stateful domains, the
final state against the expected state key by key and record by record; two runs of the same tasks
side by side (episodes matched by env, task and sample), turns aligned, replies that diverge marked
from the first differing character, verdicts that differ flagged.

Addresses (the fragment after ``#``, ``application/x-www-form-urlencoded`` as ``urllib.parse.urlencode``
writes it), made by :func:`viewer_link`:

* ``run=NAME``, ``env=ID``, ``verdict=success|failure|unscored``, ``status=STATUS`` (a turn with it),
  ``cause=CAUSE|none`` (truncation cause; ``none``: not truncated), ``infra=yes|no``, ``q=TEXT``: filters;
* ``episode=NAME/INDEX`` (or ``episode=INDEX`` for the run of the ``run`` filter, else the first run): the
  episode opened;
* ``compare=NAME``: the runs side by side (``run`` against ``compare``), ``differ=1``: only the tasks whose
  verdicts differ.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from .episode_text import action_text, agent_text, feedback, plain_json, read_trajectory, verdict
from .escaping import visible
from .metrics import state_keys_ok

__all__ = ["VIEWER_FORMAT", "run_name", "viewer_link", "viewer_data", "viewer_html", "write_viewer"]

VIEWER_FORMAT = "sopgym-viewer/1"
_ASSETS = Path(__file__).resolve().parent
#: Nesting kept as structure in states and answers; deeper values are shown as their JSON text.
_MAX_DEPTH = 24
_LINK_KEYS = ("run", "env", "verdict", "status", "cause", "infra", "q", "episode", "compare", "differ")


def run_name(path: str | os.PathLike) -> str:
    """A run's default name in the viewer: its trajectory file's name without ``.jsonl`` (and without
    ``.trajectories``, the suffix ``sopgym eval`` gives the file beside ``--out``)."""
    name = Path(path).name
    for suffix in (".jsonl", ".trajectories"):
        name = name[: -len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else name
    return name


def viewer_link(page: str = "", **params: Any) -> str:
    """``page#key=value&...``: an address in the viewer (keys in the module docstring; None values left out).

    >>> viewer_link("viewer.html", run="oracle", env="sopgym/WarehouseReceiving-v0", verdict="failure")
    'viewer.html#run=oracle&env=sopgym%2FWarehouseReceiving-v0&verdict=failure'

    Raises:
        ValueError: a key the viewer does not read.
    """
    unknown = sorted(set(params) - set(_LINK_KEYS))
    if unknown:
        raise ValueError(f"viewer_link: expected keys among {list(_LINK_KEYS)}, got {unknown}")
    pairs = [(key, str(params[key])) for key in _LINK_KEYS if params.get(key) is not None]
    return f"{page}#{urlencode(pairs)}"


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------
def _text(value: Any) -> str:
    """Any value as display text: a string as itself, anything else as its JSON; control characters escaped."""
    return visible(value if isinstance(value, str) else "" if value is None else plain_json(value))


def _value(value: Any, depth: int = 0) -> Any:
    """A JSON value with every string made visible; nesting past :data:`_MAX_DEPTH` becomes its JSON text."""
    if isinstance(value, str):
        return visible(value)
    if depth >= _MAX_DEPTH and isinstance(value, (dict, list)):
        return _text(value)
    if isinstance(value, Mapping):
        return {visible(str(k)): _value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_value(v, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity
    return value


def _step(step: dict[str, Any]) -> dict[str, Any]:
    calls = [c for c in step.get("calls") or [] if isinstance(c, dict)]
    results = [m for m in step.get("tool_results") or [] if isinstance(m, dict)]
    return {
        "turn": _value(step.get("turn")),
        "status": _text(step.get("status")),
        "reward": _value(step.get("reward")),
        "model": visible(agent_text(step.get("agent")) or ""),
        "reply": visible(action_text(step.get("action"))),
        "calls": [{"name": _text(c.get("name")), "arguments": _text(c.get("arguments")), "status": _text(c.get("status"))}
                  for c in calls],
        "results": [{"name": _text(m.get("name")), "content": _text(m.get("content"))} for m in results],
        "feedback": visible(feedback(step)),
    }


def _ending(index: int, ep: dict[str, Any]) -> dict[str, Any]:
    """What the episode's end says: the evaluator's verdict, fields, states, truncation, infrastructure."""
    record = ep["episode"]
    if record is None:
        return {"verdict": "unscored", "end": "unfinished", "cause": None, "infra": False,
                "problem": "episode not finished in this file"}
    score, problem = verdict(index, record)
    extra = record.get("extra") if isinstance(record.get("extra"), dict) else {}
    failed = extra.get("failed_request") if isinstance(extra.get("failed_request"), dict) else None
    answer = record.get("answer") if isinstance(record.get("answer"), dict) else {}
    expected = record.get("expected") if isinstance(record.get("expected"), dict) else {}
    out: dict[str, Any] = {
        "verdict": "unscored" if score is None else "success" if score.success else "failure",
        "end": "truncated" if record.get("truncated") else "terminated",
        "cause": _text(record.get("truncation_cause") or "unknown") if record.get("truncated") else None,
        "infra": bool(score.infrastructure_failure) if score is not None else bool(record.get("infrastructure_failure")),
        "problem": problem,
        "reward": _value(record.get("reward")),
        "answer_text": _text(record.get("answer")),
        "fields": [{"name": visible(str(name)), "answer": _text(answer.get(name)), "expected": _text(expected.get(name)),
                    "ok": bool(ok)} for name, ok in (score.fields.items() if score is not None else ())],
        "components": _value(record.get("reward_components")) if isinstance(record.get("reward_components"), dict) else {},
        "failed_request": _text(failed.get("cause")) + ": " + _text(failed.get("message")) if failed else None,
    }
    if score is not None:
        out.update(state_ok=score.state_ok, completed=score.completed)
    out["state"] = _state(record.get("final_state"), record.get("expected_state"))
    return out


def _state(final_state: Any, expected_state: Any) -> dict[str, Any] | None:
    """The final state against the expected one, per expected key (the evaluator's check), and the final
    state's other keys (not checked); None for a stateless episode."""
    if not isinstance(expected_state, Mapping) or not expected_state:
        return None
    oks = state_keys_ok(final_state, expected_state)
    final = final_state if isinstance(final_state, Mapping) else {}
    return {
        "keys": [{"key": visible(str(key)), "ok": oks[str(key)] if str(key) in oks else False,
                  "present": key in final, "final": _value(final.get(key)), "expected": _value(want)}
                 for key, want in expected_state.items()],
        "unchecked": {visible(str(k)): _value(v) for k, v in final.items() if k not in expected_state},
    }


def _episode(run: int, index: int, ep: dict[str, Any], sample: int, systems: dict[str, int]) -> dict[str, Any]:
    record = ep["episode"] or {}
    reset = ep["reset"] or {}
    system = reset.get("system") if isinstance(reset.get("system"), str) else None
    if system is not None:
        system = systems.setdefault(visible(system), len(systems))
    steps = [_step(s) for s in ep["steps"]]
    turns = record.get("turns") if isinstance(record.get("turns"), int) else len(steps)
    return {
        "run": run, "index": index, "sample": sample, "env": _text(record.get("env_id") or ""),
        "task": _text(record.get("task_id") or reset.get("task_id") or "?"), "turns": turns,
        "system": system, "input": _text(reset.get("observation")), "steps": steps,
        "statuses": sorted({s["status"] for s in steps}),
        **_ending(index, ep),
    }


def viewer_data(runs: Sequence[tuple[str, str, dict[str, Any] | None, dict[int, dict[str, Any]]]],
                episodes: Sequence[int] | None = None) -> dict[str, Any]:
    """The viewer's document: ``{"format", "runs": [{name, path, identity}], "systems": [texts], "episodes": [...]}``.

    Args:
        runs: ``(name, path, run line or None, episodes by index)`` per run (:func:`read_trajectory`).
        episodes: the episode indices to keep of every run (None: all).
    """
    systems: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for number, (_, _, _, by_index) in enumerate(runs):
        seen: dict[tuple[Any, Any], int] = {}
        for index in sorted(by_index):
            ep = by_index[index]
            record, reset = ep["episode"] or {}, ep["reset"] or {}
            key = (record.get("env_id"), record.get("task_id") or reset.get("task_id"))
            sample = seen[key] = seen.get(key, -1) + 1
            if episodes is None or index in episodes:
                out.append(_episode(number, index, ep, sample, systems))
    return {
        "format": VIEWER_FORMAT,
        "runs": [{"name": visible(name, newlines=False), "path": visible(str(path), newlines=False),
                  "identity": _value((line or {}).get("identity"))} for name, path, line, _ in runs],
        "systems": list(systems),
        "episodes": out,
    }


# --------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------
def _script_json(data: Any) -> str:
    """JSON to sit inside ``<script type="application/json">``: ASCII only, and ``<``, ``>``, ``&``
    (which JSON has only inside strings) as ``\\u`` escapes, so the text can hold no ``</script>``,
    ``<!--`` or ``<script`` and reads back as the same value."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def viewer_html(data: dict[str, Any], title: str = "sopgym episodes") -> str:
    """The page for :func:`viewer_data`'s document."""
    script = (_ASSETS / "viewer.js").read_text(encoding="utf-8")
    style = (_ASSETS / "viewer.css").read_text(encoding="utf-8")
    policy = f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; img-src data:"
    escaped_title = visible(title, newlines=False).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{escaped_title}</title>\n<style>{style}</style>\n</head><body>\n"
        "<noscript>The viewer needs JavaScript (inline; the page loads nothing from the network).</noscript>\n"
        f"<script type=\"application/json\" id=\"sopgym-data\">{_script_json(data)}</script>\n"
        f"<script>{script}</script>\n</body></html>\n"
    )


def write_viewer(paths: Sequence[str | os.PathLike], page: str | os.PathLike, *, names: Sequence[str] | None = None,
                 episodes: Sequence[int] | None = None) -> dict[str, int]:
    """Write the viewer of the trajectory files ``paths`` to ``page``.

    Args:
        names: each run's name (default: :func:`run_name` of its file, ``#2``... added to repeated names).
        episodes: episode indices to keep of every run (None: all); each must exist in some run.

    Returns:
        ``{"runs": number of runs, "episodes": number of episodes in the page}``.

    Raises:
        OSError: a file cannot be read or the page cannot be written.
        ValueError: a malformed trajectory file, names that do not match the files, an episode index
            no file has, or no episodes at all.
    """
    if names is not None and len(names) != len(paths):
        raise ValueError(f"expected one name per trajectory file ({len(paths)}), got {len(names)}")
    chosen = list(names) if names is not None else [run_name(p) for p in paths]
    counts: dict[str, int] = {}
    unique = []
    for name in chosen:
        counts[name] = counts.get(name, 0) + 1
        unique.append(name if counts[name] == 1 else f"{name} #{counts[name]}")
    runs = []
    for name, path in zip(unique, paths):
        line, by_index = read_trajectory(str(path))
        runs.append((name, str(path), line, by_index))
    if not any(r[3] for r in runs):
        raise ValueError(f"no episodes in {', '.join(map(str, paths))} (expected lines with an episode_index)")
    missing = [i for i in episodes or [] if not any(i in r[3] for r in runs)]
    if missing:
        raise ValueError(f"no episode {missing[0]} in {', '.join(map(str, paths))}")
    data = viewer_data(runs, episodes)
    text = viewer_html(data, title="sopgym episodes: " + ", ".join(unique))
    Path(page).write_text(text, encoding="utf-8")
    return {"runs": len(runs), "episodes": len(data["episodes"])}
