"""Discover and load the domains of a SOP-Bench checkout, following upstream's rules.

A folder is a benchmark when it has ``sop.txt``, ``toolspecs.json`` and ``test_set_with_outputs.csv``
(or ``test_set.csv``) plus ``tools.py``. A folder with the data files but no ``tools.py`` (the data-only
copy under ../shared/sop-bench is one) is still loaded, so its tasks can be posed, but its tools can
only be answered from a recording: :attr:`SopBenchDomain.has_tools` is False and ``problems`` says so.

The task CSV is read with pandas' default semantics (as upstream does): empty cells and the strings
None/NA/null/nan become NaN, dtypes are inferred. A task is one row; its id is the row position.

Inputs shown to the agent:

* ``metadata.json`` lists ``input_columns``: those, in that order (rule ``metadata``);
* no ``input_columns`` but a ``test_set_without_outputs.csv``: the columns it shares with the task
  CSV, minus the ground truth (rule ``without_outputs_columns``): upstream's own unlabelled copy drops
  the columns that only tools reveal;
* neither: every column except the ground truth (rule ``all_but_ground_truth``).

Upstream shows the whole row, ground truth included, in the last two cases; we never show a
ground-truth column, and :attr:`SopBenchDomain.inputs_rule` / ``hidden_columns`` say what we did.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SopBenchDomain",
    "LoadReport",
    "discover",
    "load",
    "load_domain",
    "to_json_value",
    "is_missing",
    "NO_TRAINING_CONDITION",
    "LICENSE",
]

LICENSE = "CC-BY-NC-4.0"
#: The condition in a domain's LICENSE.md that forbids training on it.
NO_TRAINING_CONDITION = "No one should take steps to facilitate training AI models on this data"

_TASK_FILES = ("test_set_with_outputs.csv", "test_set.csv")
_REQUIRED = ("sop.txt", "toolspecs.json")
#: Files whose content defines a domain's behaviour (hashed for drift detection).
_HASHED = ("sop.txt", "toolspecs.json", "tools.py", "metadata.json", "LICENSE.md")


def is_missing(value: Any) -> bool:
    """True for pandas' missing values (NaN, None, NaT)."""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and NaT are not equal to themselves
    except (TypeError, ValueError):
        return False


def to_json_value(value: Any) -> Any:
    """A pandas cell as a JSON value: NaN -> None, numpy scalars -> Python scalars."""
    if is_missing(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True)
class SopBenchDomain:
    """One loaded SOP-Bench domain (never copied: everything points into the user's checkout).

    Attributes:
        name: folder name (``sopbench/<name>-v0`` is its env id).
        path: the folder.
        sop: ``sop.txt``.
        toolspecs: the raw ``toolspecs.json`` list (Bedrock Converse entries).
        frame: the task CSV as pandas read it (row position = task id).
        output_columns: ground-truth columns.
        input_columns: columns shown to the agent.
        inputs_rule: ``metadata``, ``without_outputs_columns`` or ``all_but_ground_truth``.
        hidden_columns: columns neither shown nor ground truth (only tools reveal them).
        has_tools: ``tools.py`` is present.
        license_text: ``LICENSE.md`` content ('' if absent).
        training_allowed: False when the licence forbids training AI models on the data.
        content_hash: sha256 over the SOP, toolspecs, task CSV, tools.py, metadata and licence.
        problems: non-fatal findings (missing tools.py, schema keywords dropped...).
    """

    name: str
    path: Path
    sop: str
    toolspecs: list
    frame: Any
    output_columns: tuple[str, ...]
    input_columns: tuple[str, ...]
    inputs_rule: str
    hidden_columns: tuple[str, ...]
    has_tools: bool
    task_file: str
    license_text: str
    training_allowed: bool
    content_hash: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def num_tasks(self) -> int:
        return len(self.frame)

    @property
    def tool_names(self) -> list[str]:
        return [spec_of(entry)["name"] for entry in self.toolspecs]

    def raw_row(self, index: int) -> dict[str, Any]:
        """Row ``index`` exactly as pandas gives it (NaN stays NaN, numpy scalars stay)."""
        self._check_index(index)
        return self.frame.iloc[index].to_dict()

    def row(self, index: int) -> dict[str, Any]:
        """Row ``index`` as JSON values (NaN -> None)."""
        return {k: to_json_value(v) for k, v in self.raw_row(index).items()}

    def inputs(self, index: int) -> dict[str, Any]:
        row = self.row(index)
        return {c: row[c] for c in self.input_columns}

    def labels(self, index: int) -> dict[str, Any]:
        row = self.row(index)
        return {c: row[c] for c in self.output_columns}

    def _check_index(self, index: int) -> None:
        if not isinstance(index, int) or not 0 <= index < len(self.frame):
            raise ValueError(f"task index for sopbench/{self.name} must be in [0, {len(self.frame)}), got {index!r}")


@dataclass
class LoadReport:
    """Result of loading a checkout: loaded domains and, for each folder that failed, why."""

    root: Path
    domains: dict[str, SopBenchDomain] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def spec_of(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``toolSpec`` of a Bedrock entry (upstream also accepts the bare form)."""
    return entry["toolSpec"] if "toolSpec" in entry else entry


def _benchmark_root(path: Path) -> Path:
    """Accept the checkout root, the package data folder, or a single domain folder."""
    for sub in ("src/amazon_sop_bench/benchmarks/data", "benchmarks/data", "data"):
        if (path / sub).is_dir():
            return path / sub
    return path


def discover(path: str | Path) -> list[Path]:
    """Candidate domain folders under ``path`` (sorted): those with any task CSV or ``sop.txt``."""
    root = _benchmark_root(Path(path).expanduser())
    if not root.is_dir():
        raise FileNotFoundError(f"SOP-Bench path {root} is not a folder; expected a checkout or its data folder")
    if _is_candidate(root):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and _is_candidate(p))


def _is_candidate(folder: Path) -> bool:
    return (folder / "sop.txt").is_file() or any((folder / f).is_file() for f in _TASK_FILES)


def load(path: str | Path) -> LoadReport:
    """Load every domain under ``path``; a folder that cannot be loaded is in ``skipped`` with the reason."""
    root = _benchmark_root(Path(path).expanduser())
    report = LoadReport(root=root)
    for folder in discover(path):
        try:
            domain = load_domain(folder)
        except (ValueError, OSError, ImportError) as exc:
            report.skipped[folder.name] = str(exc)
            continue
        report.domains[domain.name] = domain
    return report


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # upstream falls back to latin-1 for the SOP
        return path.read_text(encoding="latin-1")


def load_domain(folder: str | Path) -> SopBenchDomain:
    """Load one domain folder.

    Raises:
        ValueError: a required file is missing or malformed (the message names it).
        ImportError: pandas is not installed (it is needed to read the CSV as upstream does).
    """
    folder = Path(folder)
    missing = [f for f in _REQUIRED if not (folder / f).is_file()]
    task_file = next((f for f in _TASK_FILES if (folder / f).is_file()), None)
    if task_file is None:
        missing.append(" or ".join(_TASK_FILES))
    if missing:
        raise ValueError(f"{folder.name}: missing {', '.join(missing)}")
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError(f"loading SOP-Bench needs pandas (pip install pandas): {exc}") from exc

    name = re.sub(r"\W", "_", folder.name)
    problems: list[str] = []
    if name != folder.name:
        problems.append(f"folder name {folder.name!r} is not an identifier; domain name {name!r}")
    sop = _read_text(folder / "sop.txt")
    if not sop.strip():
        raise ValueError(f"{folder.name}: sop.txt is empty")
    try:
        toolspecs = json.loads((folder / "toolspecs.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{folder.name}: toolspecs.json is not valid JSON: {exc}") from exc
    if not isinstance(toolspecs, list) or not all(isinstance(e, dict) and "name" in spec_of(e) for e in toolspecs):
        raise ValueError(f"{folder.name}: toolspecs.json must be a list of {{'toolSpec': {{'name', ...}}}} entries")
    metadata: dict[str, Any] = {}
    if (folder / "metadata.json").is_file():
        try:
            metadata = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{folder.name}: metadata.json is not valid JSON: {exc}") from exc

    frame = pd.read_csv(folder / task_file)
    if len(frame) == 0:
        raise ValueError(f"{folder.name}: {task_file} has no rows")
    columns = list(frame.columns)
    outputs = list(metadata.get("output_columns") or [])
    if not outputs:  # upstream's legacy rule
        outputs = [c for c in ("expected_output", "final_decision") if c in columns][:1]
        if not outputs:
            raise ValueError(f"{folder.name}: no output_columns in metadata.json and no expected_output/final_decision column")
        problems.append(f"no output_columns in metadata.json: ground truth taken from column {outputs[0]!r}")
    absent = [c for c in outputs if c not in columns]
    if absent:
        raise ValueError(f"{folder.name}: output columns {absent} not in {task_file}; columns are {columns}")

    declared = metadata.get("input_columns")
    if declared:
        absent = [c for c in declared if c not in columns]
        if absent:
            raise ValueError(f"{folder.name}: input columns {absent} not in {task_file}; columns are {columns}")
        leaked = [c for c in declared if c in outputs]
        if leaked:
            problems.append(f"input_columns include ground-truth columns {leaked}: they are not shown")
        inputs = [c for c in declared if c not in outputs]
        rule = "metadata"
    elif (folder / "test_set_without_outputs.csv").is_file():
        unlabelled = list(pd.read_csv(folder / "test_set_without_outputs.csv", nrows=0).columns)
        inputs = [c for c in columns if c in unlabelled and c not in outputs]
        rule = "without_outputs_columns"
    else:
        inputs = [c for c in columns if c not in outputs]
        rule = "all_but_ground_truth"
    if rule != "metadata":
        problems.append(
            f"no input_columns in metadata.json: upstream shows the whole row, ground truth included; "
            f"sopgym shows {len(inputs)} columns (rule {rule})"
        )
    hidden = [c for c in columns if c not in inputs and c not in outputs]

    has_tools = (folder / "tools.py").is_file()
    if not has_tools:
        problems.append("tools.py missing: tools can only be answered from a recording")
    license_text = _read_text(folder / "LICENSE.md") if (folder / "LICENSE.md").is_file() else ""
    training_allowed = " ".join(NO_TRAINING_CONDITION.lower().split()) not in " ".join(license_text.lower().split())
    return SopBenchDomain(
        name=name,
        path=folder.resolve(),
        sop=sop,
        toolspecs=toolspecs,
        frame=frame,
        output_columns=tuple(outputs),
        input_columns=tuple(inputs),
        inputs_rule=rule,
        hidden_columns=tuple(hidden),
        has_tools=has_tools,
        task_file=task_file,
        license_text=license_text,
        training_allowed=training_allowed,
        content_hash=domain_hash(folder, task_file),
        metadata=metadata,
        problems=tuple(problems),
    )


def domain_hash(folder: Path, task_file: str) -> str:
    """sha256 of the files that define the domain's behaviour (name and bytes of each, in order)."""
    digest = hashlib.sha256()
    for name in (*_HASHED, task_file):
        path = folder / name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<absent>")
        digest.update(b"\0")
    return digest.hexdigest()
