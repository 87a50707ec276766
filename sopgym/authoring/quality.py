"""Quality checks of a domain pack (``sopgym validate-domain``) and the suite table (``sopgym domains-table``;
the commands are :mod:`sopgym.cli.validate_domain` and :mod:`sopgym.cli.domains_table`).

A pack passes when:

* ``schema``: 5 to 25 tools, every schema understood by our validator, at least one distractor;
* ``sop``: 2,500 to 12,000 characters with at least 4 numbered steps;
* ``determinism``: the same (split, index) generates the same task twice;
* ``difficulty``: every task records easy/medium/hard and at least two levels occur on test;
* ``oracle``: the reference solver, acting through the env, succeeds on 100% of val, test and the first
  ``train_tasks`` train tasks (this is how labels are known to be right: the solver is written
  independently of the generator's labelling code);
* ``tool_calls``: the oracle's mean tool calls per task is between 4 and 15;
* ``coverage``: every non-distractor tool is called by the oracle on some task;
* ``balance``: on val and test, no value of the primary label (the first output field) above 40%
  (60% when it has two values); the other fields' largest shares are reported;
* ``difficulty_label``: on val and test, a guess of the primary label from the task's difficulty
  alone (the most common label of each difficulty level, fitted on the split itself: an upper
  bound) is right on at most the primary label's balance limit (40%, 60% for two values). The
  balance check keeps a constant guess under that limit; this one keeps a guess that also knows
  the difficulty under it. ``info["difficulty"]`` is bookkeeping and never reaches a model (see
  docs/environments.md), but a label the difficulty predicts makes per-difficulty metrics describe
  labels, not difficulty, and leaks the answer to anything that does see it;
* ``baselines``: majority, random and inputs-only success on test at most ``max_baseline`` (they must
  stay far below the oracle's 100%).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import math
import re
import sys
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sopgym.sandboxes.schema import check_schema
from sopgym.sop_tasks.pack import DomainPack
from sopgym.sop_tasks.registry import get_pack, register_pack

__all__ = [
    "Check", "DomainReport", "validate_pack", "load_pack_from_path", "domains_table", "domains_page", "label_entropy",
    "balance_limit", "difficulty_guess_accuracy", "check_difficulty_label",
]

MAX_BASELINE = 0.6


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class DomainReport:
    domain: str
    env_id: str
    checks: list[Check] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, bool(ok), detail))

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "env_id": self.env_id, "ok": self.ok, "checks": [asdict(c) for c in self.checks], "figures": self.figures}

    def format(self) -> str:
        lines = [f"{self.env_id}: {'PASS' if self.ok else 'FAIL'}"]
        lines += [f"  [{'ok' if c.ok else 'FAIL'}] {c.name:12s} {c.detail}" for c in self.checks]
        return "\n".join(lines)


def load_pack_from_path(path: str | Path) -> DomainPack:
    """Import the pack at ``path`` (a folder with ``__init__.py`` defining PACK) or look up a registered name."""
    folder = Path(path)
    if not (folder / "__init__.py").is_file():
        try:
            return get_pack(str(path).rsplit("-v", 1)[0])
        except KeyError:
            raise ValueError(f"{path}: expected a domain-pack folder with __init__.py, or a registered domain name") from None
    folder = folder.resolve()
    import sopgym.sop_tasks

    repo_tasks = Path(sopgym.sop_tasks.__file__).resolve().parent
    if folder.parent == repo_tasks:
        module = importlib.import_module(f"sopgym.sop_tasks.{folder.name}")
    else:
        # A pack outside the package: import it as the package ``sopgym_user_domains.<folder>`` so its
        # relative imports and its StatefulProgram module name (``__name__ + ".state"``) resolve.
        root = "sopgym_user_domains"
        if root not in sys.modules:
            spec = importlib.machinery.ModuleSpec(root, None, is_package=True)
            pkg = importlib.util.module_from_spec(spec)
            pkg.__path__ = []
            sys.modules[root] = pkg
        if str(folder.parent) not in sys.modules[root].__path__:
            sys.modules[root].__path__.append(str(folder.parent))
        module = importlib.import_module(f"{root}.{folder.name}")
    pack = getattr(module, "PACK", None)
    if not isinstance(pack, DomainPack):
        raise ValueError(f"{folder}: expected a module attribute PACK of type DomainPack, got {type(pack).__name__}")
    register_pack(pack, replace=True)
    return pack


def label_entropy(answers: Sequence[Mapping[str, Any]]) -> float:
    """Shannon entropy (bits) of the whole-answer distribution."""
    counts = Counter(json.dumps(dict(a), sort_keys=True) for a in answers)
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values())


def balance_limit(num_values: int) -> float:
    """Largest share one value of the primary label may have on val/test: 60% with two values, else 40%."""
    return 0.6 if num_values <= 2 else 0.4


def difficulty_guess_accuracy(tasks: list[Any], field_name: str) -> float:
    """Accuracy on ``tasks`` of guessing ``field_name`` from the difficulty alone: the most common
    label of each difficulty level (fitted on ``tasks`` themselves, so an upper bound)."""
    by_level: dict[str, Counter] = {}
    for task in tasks:
        by_level.setdefault(task.difficulty, Counter())[json.dumps(task.answer[field_name], sort_keys=True)] += 1
    right = sum(max(labels.values()) for labels in by_level.values())
    return right / len(tasks) if tasks else 0.0


def check_difficulty_label(pack: DomainPack, num_tasks: dict[str, int]) -> tuple[Check, dict[str, float]]:
    """The ``difficulty_label`` check: the difficulty must not predict the primary label (a guess that
    knows it stays within the label's balance limit) on each split given.

    It needs the tasks alone (no episode is run), so tests run it over every authored domain.

    Args:
        pack: the domain pack.
        num_tasks: split name -> how many of its first tasks to use (``{"val": 200, "test": 200}``);
            a split with 0 is skipped.

    Returns:
        (the check, split -> the guess's accuracy rounded to 4 places).
    """
    primary = pack.output_fields[0]
    guesses, ok, notes = {}, True, []
    for split, count in num_tasks.items():
        tasks = [pack.task(split, i) for i in range(count)]
        if not tasks:
            continue
        labels = Counter(json.dumps(t.answer[primary.name], sort_keys=True) for t in tasks)
        limit = balance_limit(len(labels))
        guesses[split] = round(difficulty_guess_accuracy(tasks, primary.name), 4)
        ok &= guesses[split] <= limit
        notes.append(f"{split} {guesses[split]:.1%} (limit {limit:.0%}; without the difficulty {max(labels.values()) / len(tasks):.1%})")
    return Check("difficulty_label", ok, f"guessing {primary.name} from the difficulty alone: " + ", ".join(notes)), guesses


def _run(pack: DomainPack, policy_name: str, split: str, count: int, **policy_kwargs: Any) -> dict[str, Any]:
    """Run one policy instance (its random state carries over from task to task) on tasks ``0..count-1``
    through the episode runner; success is the evaluator's verdict on each record."""
    from sopgym.envs.env import SOPEnv
    from sopgym.envs.env_kwargs import InProcessCodeRunnerWarning
    from sopgym.envs.policies import make_policy
    from sopgym.episodes.pools import EnvPool
    from sopgym.episodes.runner import PolicyAgent, run_episodes
    from sopgym.episodes.specs import EpisodeSpec

    if not count:
        return {"success": 0.0, "mean_calls": 0.0, "used": Counter()}
    with warnings.catch_warnings():  # the code run here is the pack's own solver and baselines: trusted
        warnings.simplefilter("ignore", InProcessCodeRunnerWarning)
        env = SOPEnv(pack, code_runner="inprocess")
    policy = make_policy(policy_name, **policy_kwargs)
    specs = [EpisodeSpec(pack.env_id, None, {"split": split, "task_index": index}) for index in range(count)]
    try:
        results = run_episodes(specs, PolicyAgent(lambda spec: policy), EnvPool.of(env), concurrency=1)
    finally:
        env.close()
    used = Counter(call["name"] for r in results for turn in r.turns for call in turn.calls if call["status"] == "OK")
    return {
        "success": sum(r.success for r in results) / count,
        "mean_calls": sum(r.record["num_tool_calls"] for r in results) / count,
        "used": used,
    }


def validate_pack(pack: DomainPack, *, train_tasks: int = 200, max_baseline: float = MAX_BASELINE) -> DomainReport:
    """Run every check on ``pack``. Returns a report; ``report.ok`` is the verdict."""
    report = DomainReport(pack.name, pack.env_id)
    n_tools = len(pack.tools)
    distractors = [t.name for t in pack.tools if t.distractor]
    try:
        for tool in [*pack.tools, pack.submit_spec()]:
            check_schema(tool.parameters, tool.name)
        schema_ok, schema_err = True, ""
    except ValueError as exc:
        schema_ok, schema_err = False, str(exc)
    report.add("schema", schema_ok and 5 <= n_tools <= 25 and bool(distractors),
               f"{n_tools} tools (expected 5-25), {len(distractors)} distractor(s) (expected >= 1){'; ' + schema_err if schema_err else ''}")

    steps = len(re.findall(r"^\s*\d+\.\s", pack.sop, flags=re.M))
    report.add("sop", 2500 <= len(pack.sop) <= 12000 and steps >= 4, f"{len(pack.sop)} characters (expected 2,500-12,000), {steps} numbered steps (expected >= 4)")

    same = all(pack.task(s, i).to_json() == pack.task(s, i).to_json() for s in ("val", "test") for i in range(5))
    report.add("determinism", same, "same (split, index) -> identical task" if same else "a task differs between two generations")

    sizes = {s: pack.num_tasks(s) for s in ("train", "val", "test")}
    counts = {"val": sizes["val"] or 0, "test": sizes["test"] or 0, "train": min(train_tasks, sizes["train"] or train_tasks) if sizes["train"] != 0 else 0}
    test_tasks = [pack.task("test", i) for i in range(counts["test"])]
    levels = Counter(t.difficulty for t in test_tasks)
    report.add("difficulty", len(levels) >= 2, f"test difficulty: {dict(sorted(levels.items()))}")

    oracle = {s: _run(pack, "oracle", s, n) for s, n in counts.items() if n}
    worst = min((r["success"] for r in oracle.values()), default=0.0)
    report.add("oracle", bool(oracle) and worst == 1.0, ", ".join(f"{s} {r['success']:.1%} of {counts[s]}" for s, r in oracle.items()))
    mean_calls = sum(r["mean_calls"] * counts[s] for s, r in oracle.items()) / max(1, sum(counts[s] for s in oracle))
    report.add("tool_calls", 4 <= mean_calls <= 15, f"oracle mean tool calls {mean_calls:.2f} (expected 4-15)")
    used: Counter[str] = sum((r["used"] for r in oracle.values()), Counter())
    unused = [t.name for t in pack.tools if not t.distractor and not used[t.name]]
    report.add("coverage", not unused, f"non-distractor tools never used by the oracle: {unused}" if unused else "every non-distractor tool is used")

    # Balance is controlled on the primary label (the first output field: the SOP's decision). Other
    # fields are consequences of it (an escalation tier is NONE whenever nothing is escalated), so
    # their largest share is reported, not limited.
    primary = pack.output_fields[0]
    ok_balance, shares = True, []
    for split in ("val", "test"):
        answers = [pack.task(split, i).answer for i in range(counts[split])]
        for f in pack.output_fields:
            tally = Counter(json.dumps(a[f.name]) for a in answers)
            if not tally:
                continue
            share = max(tally.values()) / sum(tally.values())
            if f is primary:
                limit = balance_limit(len(tally))
                ok_balance &= share <= limit
                shares.append(f"{split}.{f.name} {share:.1%} (limit {limit:.0%})")
            elif split == "test":
                shares.append(f"test.{f.name} {share:.1%} (reported)")
    report.add("balance", ok_balance, "largest label share: " + ", ".join(shares))

    difficulty_label, guesses = check_difficulty_label(pack, {"val": counts["val"], "test": counts["test"]})
    report.checks.append(difficulty_label)
    baselines = {name: _run(pack, name, "test", counts["test"], **({"seed": 0} if name == "random" else {}))["success"]
                 for name in ("majority", "random", "inputs-only")}
    report.add("baselines", all(v <= max_baseline for v in baselines.values()),
               ", ".join(f"{k} {v:.1%}" for k, v in baselines.items()) + f" (each must be <= {max_baseline:.0%}; oracle 100%)")
    report.figures = {
        "tasks": {s: ("unlimited" if v is None else v) for s, v in sizes.items()},
        "tools": n_tools,
        "distractors": len(distractors),
        "tiers": sorted({t.tier.value for t in pack.tools}),
        "label_entropy_bits": round(label_entropy([t.answer for t in test_tasks]), 3),
        "oracle_success": {s: r["success"] for s, r in oracle.items()},
        "oracle_mean_tool_calls": round(mean_calls, 2),
        "baselines_test_success": baselines,
        "difficulty_label_guess": guesses,
        "sop_characters": len(pack.sop),
        "human_steps": pack.human_steps,
        "theme": pack.theme,
    }
    return report


def domains_table(reports: list[DomainReport]) -> str:
    """Markdown table of the suite (docs/domains.md)."""
    lines = [
        "| env id | theme | tasks (train/val/test) | tools (distractors) | tiers | label entropy (bits) | oracle | majority | random | inputs-only | difficulty -> label guess (test) | oracle tool calls | checks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        f = r.figures
        t = f["tasks"]
        b = f["baselines_test_success"]
        lines.append(
            f"| `{r.env_id}` | {f['theme']} | {t['train']}/{t['val']}/{t['test']} | {f['tools']} ({f['distractors']}) | "
            f"{', '.join(f['tiers'])} | {f['label_entropy_bits']:.2f} | {min(f['oracle_success'].values()):.0%} | "
            f"{b['majority']:.1%} | {b['random']:.1%} | {b['inputs-only']:.1%} | {f['difficulty_label_guess'].get('test', 0.0):.1%} | "
            f"{f['oracle_mean_tool_calls']:.1f} | "
            f"{'pass' if r.ok else 'FAIL: ' + ', '.join(c.name for c in r.checks if not c.ok)} |"
        )
    return "\n".join(lines)


_PAGE_HEADER = """# The authored domains

Generated by `sopgym domains-table --out docs/domains.md` (do not edit by hand). Every figure is
measured by `sopgym validate-domain` on the pack as it is: oracle success is the minimum over val,
test and the first {train} train tasks; baselines are success rates on the 200-task test split;
label entropy is over whole answers on test; "difficulty -> label guess" is the accuracy on test of
guessing the primary label from the task's difficulty alone (the `difficulty_label` check fails it
above the label's balance limit, 40%, or 60% for two values). See `sopgym/authoring/quality.py` for
the checks.

"""


def domains_page(reports: list[DomainReport], train_tasks: int) -> str:
    """docs/domains.md: what the figures mean, then :func:`domains_table` of ``reports``."""
    return _PAGE_HEADER.format(train=train_tasks) + domains_table(reports) + "\n"
