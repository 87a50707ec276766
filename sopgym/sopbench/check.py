"""``sopgym sopbench record`` and ``check``: pre-record the ground-truth plan and audit a checkout.

Per domain, :func:`check_domain` reports

* how many tasks a ground-truth-following agent can solve: tasks whose every label value appears
  (strict normalised match) among the values the plan's tool results contain;
* which labels no tool result reaches (distinct label values never seen in any result);
* stub tools (every successful call returned ``null``), tools that never succeeded, tools whose
  results differ between two identical calls (non-deterministic), results that are not JSON;
* the loader's notes (missing ``input_columns``, missing ``tools.py``), the licence, drift.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sopgym.scoring import normalize_text

from .groundtruth import decode, iter_values, run_plan
from .loader import SopBenchDomain
from .replay import Recording, record_calls
from .sopbench_toolbox import to_tool_result

__all__ = ["DomainCheck", "record_groundtruth", "check_domain", "ReplayRunner"]


class ReplayRunner:
    """A runner that answers only from a recording (for checkouts without tools.py)."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording

    def call_many(self, calls):
        out = []
        for name, args in calls:
            hit = self.recording.get(name, args)
            out.append(hit if hit is not None else {"kind": "missing", "exc_type": "", "text": "Error: not recorded"})
        return out

    def close(self) -> None:
        pass


def record_groundtruth(domain: SopBenchDomain, runner_factory: Callable[[], Any], *, repeats: int = 2,
                       indices=None) -> tuple[Recording, dict[int, list]]:
    """Run the ground-truth plan for every task and record it (plus ``repeats - 1`` fresh re-runs).

    Returns:
        ``(recording, plan)``; ``plan[i]`` is task ``i``'s list of ``(name, args, response)``.
    """
    runner = runner_factory()
    try:
        plan = run_plan(domain, runner, indices)
        pandas_version = runner.pandas_version
    finally:
        runner.close()
    calls = [(name, args) for steps in plan.values() for name, args, _ in steps]
    primary = [resp for steps in plan.values() for _, _, resp in steps]
    rec = record_calls(domain, runner_factory, calls, repeats=repeats, primary=primary, pandas_version=pandas_version)
    return rec, plan


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return normalize_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return value


@dataclass
class DomainCheck:
    domain: str
    num_tasks: int
    inputs_rule: str
    hidden_columns: list[str]
    training_allowed: bool
    tools_run: str  # "live", "recording" or "no" (why in notes)
    num_solvable: int | None = None
    unreachable_labels: list[str] = field(default_factory=list)
    stub_tools: list[str] = field(default_factory=list)
    never_ok_tools: list[str] = field(default_factory=list)
    nondeterministic_tools: list[str] = field(default_factory=list)
    unserialisable_tools: list[str] = field(default_factory=list)
    error_texts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        solv = "n/a" if self.num_solvable is None else f"{self.num_solvable}/{self.num_tasks}"
        lines = [
            f"sopbench/{self.domain}: {self.num_tasks} tasks, inputs rule {self.inputs_rule}, "
            f"training {'allowed' if self.training_allowed else 'NOT allowed (licence)'}, tools {self.tools_run}",
            f"  solvable by a ground-truth-following agent: {solv}",
        ]
        for label, items in (("unreachable labels", self.unreachable_labels), ("stub tools (always null)", self.stub_tools),
                             ("tools never succeeding", self.never_ok_tools), ("non-deterministic tools", self.nondeterministic_tools),
                             ("tools with non-JSON results", self.unserialisable_tools)):
            if items:
                lines.append(f"  {label}: {', '.join(map(str, items))}")
        for tool, text in self.error_texts.items():
            lines.append(f"  first error of {tool}: {text[:160]}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def check_domain(domain: SopBenchDomain, runner_factory: Callable[[], Any] | None, *,
                 recording: Recording | None = None, repeats: int = 2) -> tuple[DomainCheck, Recording | None]:
    """Audit one domain. Runs the tools live when ``runner_factory`` is given (and tools.py exists),
    else replays ``recording`` if it matches the checkout. Returns the report and the recording made."""
    licence = [] if domain.training_allowed else [f"training not allowed: {domain.training_note}"]
    report = DomainCheck(domain.name, domain.num_tasks, domain.inputs_rule, list(domain.hidden_columns),
                         domain.training_allowed, "no", notes=list(domain.problems) + licence)
    made = None
    if runner_factory is not None and domain.has_tools:
        made, plan = record_groundtruth(domain, runner_factory, repeats=repeats)
        report.tools_run = "live"
        rec = made
    elif recording is not None and recording.check_drift(domain) is None:
        plan = run_plan(domain, ReplayRunner(recording))
        report.tools_run = "recording"
        rec = recording
    else:
        if recording is not None:
            report.notes.append(recording.check_drift(domain) or "")
        return report, None

    ok_null: Counter = Counter()
    ok_any: Counter = Counter()
    unserialisable = set()
    for steps in plan.values():
        for name, _, resp in steps:
            if resp["kind"] == "ok":
                ok_any[name] += 1
                ok_null[name] += resp["text"] == "null"
            elif resp["kind"] == "unserialisable":
                unserialisable.add(name)
            if resp["kind"] != "ok" and name not in report.error_texts:
                report.error_texts[name] = to_tool_result(resp).render()
    names = domain.tool_names
    report.stub_tools = [n for n in names if ok_any[n] and ok_null[n] == ok_any[n]]
    report.never_ok_tools = [n for n in names if not ok_any[n]]
    report.nondeterministic_tools = [n for n in names if n in rec.nondeterministic()]
    report.unserialisable_tools = [n for n in names if n in unserialisable]

    solvable = 0
    reached: set = set()
    all_labels: set = set()
    for i, steps in plan.items():
        seen = set()
        for _, _, resp in steps:
            if resp["kind"] == "ok":
                for v in iter_values(decode(resp["text"])):
                    try:
                        seen.add(_norm(v))
                    except TypeError:
                        continue
        labels = {_norm(v) for v in domain.labels(i).values()}
        all_labels |= labels
        hit = labels & seen
        reached |= hit
        solvable += hit == labels
    report.num_solvable = solvable
    report.unreachable_labels = sorted(str(v) for v in all_labels - reached)
    return report, made


def default_recording_file(domain: SopBenchDomain, directory: str | Path | None) -> Path:
    from .replay import recording_path

    return recording_path(domain, directory)
