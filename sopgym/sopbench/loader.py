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

Each folder is loaded on its own (:func:`load`): a folder whose files are missing or malformed (a
``metadata.json`` that is not an object, ``input_columns`` that are not a list of names, a
``toolspecs.json`` entry that is not a tool spec...) is reported by name with what is wrong, and the
other folders load. Two folders whose names give the same env id (``collide-a`` and ``collide_a``
both give ``sopbench/collide_a-v0``) are both reported and neither is loaded. Whether training is
allowed is decided by :mod:`.licence`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .licence import NO_TRAINING_CONDITION, judge_licence

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
        training_allowed: False when the licence forbids training AI models on the data, or mentions
            training in a way the matcher cannot settle (:func:`.licence.judge_licence`).
        training_note: why training is or is not allowed.
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
    training_note: str = ""
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


def domain_name(folder_name: str) -> str:
    """The domain name (``sopbench/<name>-v0``) of a folder: every non-word character becomes ``_``."""
    return re.sub(r"\W", "_", folder_name)


def load(path: str | Path, *, allow_training: Collection[str] = ()) -> LoadReport:
    """Load every domain under ``path``, each folder on its own.

    Args:
        path: the checkout, its data folder, or one domain folder.
        allow_training: names of domains whose licence the matcher cannot settle and a person has
            read and found to allow training (never overrides the no-training condition).

    Returns:
        The loaded domains; ``skipped`` holds, per folder name, why it was not loaded: a missing or
        malformed file (its name and what is wrong), or an env id another folder gives too.
    """
    root = _benchmark_root(Path(path).expanduser())
    report = LoadReport(root=root)
    folders = discover(path)
    by_name: dict[str, list[str]] = {}
    for folder in folders:
        by_name.setdefault(domain_name(folder.name), []).append(folder.name)
    for folder in folders:
        name = domain_name(folder.name)
        if len(by_name[name]) > 1:
            others = [f for f in by_name[name] if f != folder.name]
            report.skipped[folder.name] = (f"env id sopbench/{name}-v0 is also the id of folder(s) {others}: "
                                           "neither is loaded; rename all but one")
            continue
        try:
            domain = load_domain(folder, allow_training=name in allow_training)
        except (ValueError, OSError, ImportError) as exc:
            report.skipped[folder.name] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - one folder's unforeseen content must not unload the others
            report.skipped[folder.name] = f"{folder.name}: could not be loaded: {type(exc).__name__}: {exc}"
            continue
        report.domains[domain.name] = domain
    return report


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # upstream falls back to latin-1 for the SOP
        return path.read_text(encoding="latin-1")


def _json_file(folder: Path, file: str, expected: type, what: str) -> Any:
    try:
        value = json.loads((folder / file).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{folder.name}: {file} is not valid JSON: {exc}") from exc
    except ValueError as exc:  # an integer past Python's digit limit
        raise ValueError(f"{folder.name}: {file} cannot be read: {exc}") from exc
    if not isinstance(value, expected):
        raise ValueError(f"{folder.name}: {file} must be {what}, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    text = json.dumps(value, default=str)[:60] if not isinstance(value, int) or abs(value) < 10**30 else "a huge integer"
    return f"{type(value).__name__} {text}"


def _check_toolspecs(folder: Path, toolspecs: list) -> None:
    """Every entry is a Bedrock tool spec (``{"toolSpec": {...}}`` or the bare form) with a string name,
    a string description if any, and an ``inputSchema`` object whose ``json`` is an object."""
    where = f"{folder.name}: toolspecs.json"
    for i, entry in enumerate(toolspecs):
        if not isinstance(entry, dict):
            raise ValueError(f"{where} entry {i} must be an object {{'toolSpec': {{'name', ...}}}}, got {_kind(entry)}")
        spec = spec_of(entry)
        if not isinstance(spec, dict):
            raise ValueError(f"{where} entry {i}: 'toolSpec' must be an object with a 'name', got {_kind(spec)}")
        if not isinstance(spec.get("name"), str) or not spec["name"]:
            raise ValueError(f"{where} entry {i}: 'name' must be a non-empty string, got {_kind(spec.get('name'))}")
        if not isinstance(spec.get("description", ""), str):
            raise ValueError(f"{where} entry {i} ({spec['name']}): 'description' must be a string, got {_kind(spec['description'])}")
        schema = spec.get("inputSchema", {})
        if not isinstance(schema, dict) or not isinstance(schema.get("json", {}), dict):
            raise ValueError(f"{where} entry {i} ({spec['name']}): 'inputSchema' must be an object whose 'json' is a "
                             f"JSON Schema object, got {_kind(schema)}")


def _check_columns(folder: Path, metadata: Mapping[str, Any]) -> None:
    for key in ("input_columns", "output_columns"):
        value = metadata.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(c, str) for c in value)):
            raise ValueError(f"{folder.name}: metadata.json: {key!r} must be a list of column names (strings), got {_kind(value)}")


def load_domain(folder: str | Path, *, allow_training: bool = False) -> SopBenchDomain:
    """Load one domain folder.

    Args:
        folder: the domain's folder.
        allow_training: override a licence the matcher cannot settle (see :mod:`.licence`).

    Raises:
        ValueError: a required file is missing or malformed (the message names it).
        ImportError: pandas is not installed (it is needed to read the CSV as upstream does).
    """
    folder = Path(folder)
    task_file = _task_file(folder)
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError(f"loading SOP-Bench needs pandas (pip install pandas): {exc}") from exc

    name = domain_name(folder.name)
    problems: list[str] = []
    if name != folder.name:
        problems.append(f"folder name {folder.name!r} is not an identifier; domain name {name!r}")
    sop = _read_text(folder / "sop.txt")
    if not sop.strip():
        raise ValueError(f"{folder.name}: sop.txt is empty")
    toolspecs = _json_file(folder, "toolspecs.json", list, "a list of {'toolSpec': {'name', ...}} entries")
    _check_toolspecs(folder, toolspecs)
    metadata: dict[str, Any] = {}
    if (folder / "metadata.json").is_file():
        metadata = _json_file(folder, "metadata.json", dict, "an object")
        _check_columns(folder, metadata)

    frame = pd.read_csv(folder / task_file)
    if len(frame) == 0:
        raise ValueError(f"{folder.name}: {task_file} has no rows")
    columns = list(frame.columns)
    outputs = _output_columns(folder, task_file, metadata, columns, problems)
    inputs, rule = _input_columns(folder, task_file, metadata, columns, outputs, problems)
    hidden = [c for c in columns if c not in inputs and c not in outputs]

    has_tools = (folder / "tools.py").is_file()
    if not has_tools:
        problems.append("tools.py missing: tools can only be answered from a recording")
    license_text = _read_text(folder / "LICENSE.md") if (folder / "LICENSE.md").is_file() else ""
    verdict = judge_licence(license_text, allow_training=allow_training)
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
        training_allowed=verdict.training_allowed,
        training_note=verdict.reason,
        content_hash=domain_hash(folder, task_file),
        metadata=metadata,
        problems=tuple(problems),
    )


def _task_file(folder: Path) -> str:
    """The domain's task file (the first of :data:`_TASK_FILES` present).

    Raises:
        ValueError: a required file is missing, or every task file (naming them all).
    """
    missing = [f for f in _REQUIRED if not (folder / f).is_file()]
    task_file = next((f for f in _TASK_FILES if (folder / f).is_file()), None)
    if task_file is None:
        missing.append(" or ".join(_TASK_FILES))
    if missing:
        raise ValueError(f"{folder.name}: missing {', '.join(missing)}")
    assert task_file is not None  # missing names the task files otherwise
    return task_file


def _output_columns(folder: Path, task_file: str, metadata: Mapping[str, Any], columns: list[str],
                    problems: list[str]) -> list[str]:
    """The ground-truth columns: metadata.json's ``output_columns``, or upstream's legacy rule (the
    ``expected_output`` or ``final_decision`` column, noted in ``problems``).

    Raises:
        ValueError: no output columns, or ones the task file does not have.
    """
    outputs: list[str] = list(metadata.get("output_columns") or [])
    if not outputs:  # upstream's legacy rule
        legacy: tuple[str, ...] = ("expected_output", "final_decision")
        outputs = [c for c in legacy if c in columns][:1]
        if not outputs:
            raise ValueError(f"{folder.name}: no output_columns in metadata.json and no expected_output/final_decision column")
        problems.append(f"no output_columns in metadata.json: ground truth taken from column {outputs[0]!r}")
    absent = [c for c in outputs if c not in columns]
    if absent:
        raise ValueError(f"{folder.name}: output columns {absent} not in {task_file}; columns are {columns}")
    return outputs


def _input_columns(folder: Path, task_file: str, metadata: Mapping[str, Any], columns: list[str], outputs: list[str],
                   problems: list[str]) -> tuple[list[str], str]:
    """The columns shown to the agent, never ground truth, and the rule that chose them: metadata.json's
    ``input_columns``, else the columns of ``test_set_without_outputs.csv``, else all but the ground
    truth (either of the last two noted in ``problems``, as are declared ground-truth columns).

    Raises:
        ValueError: declared input columns the task file does not have.
    """
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
        import pandas as pd

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
    return inputs, rule


def domain_hash(folder: Path, task_file: str) -> str:
    """sha256 of the files that define the domain's behaviour (name and bytes of each, in order)."""
    digest = hashlib.sha256()
    for name in (*_HASHED, task_file):
        path = folder / name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<absent>")
        digest.update(b"\0")
    return digest.hexdigest()
