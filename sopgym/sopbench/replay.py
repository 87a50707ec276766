"""Record and replay SOP-Bench tool responses (the read-only tier).

A recording belongs to one domain. It maps ``tool name -> canonical arguments -> response`` (the
response is the runner's ``{"kind", "text", "exc_type"}``; ``text`` is exactly what the agent
sees), the domain's :attr:`~.loader.SopBenchDomain.content_hash` and the pandas version the tools
ran with. Loading it against a checkout whose hash differs is *drift*: the SOP, toolspecs, CSV or
tools.py changed since it was recorded, so its answers may no longer be upstream's. So is a tools
runner that now uses another pandas (the same ``tools.py`` reads the same CSV differently across
pandas versions: a cell ``None`` is the string "None" before pandas 2, a missing value since). A
recording of format 1 (before sopgym stored the pandas version) drifts against every runner.

Recording runs every argument set twice, in two separate tool processes; when the two texts differ
the entry is flagged ``nondeterministic`` (both texts kept) and replay serves the first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sopgym.sandboxes.base import canonical_args

from .loader import SopBenchDomain

__all__ = ["Recording", "RecordingDrift", "record_calls", "default_recordings_dir", "recording_path"]

FORMAT = 2
#: Formats this code reads (1: no pandas version stored).
_READABLE = (1, 2)


class RecordingDrift(ValueError):
    """The recording was made against different domain content than the checkout now has."""


def default_recordings_dir() -> Path:
    """``$SOPGYM_CACHE/sopbench`` or ``~/.cache/sopgym/sopbench``."""
    base = os.environ.get("SOPGYM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sopgym")
    return Path(base) / "sopbench"


def recording_path(domain: SopBenchDomain, directory: str | Path | None = None) -> Path:
    return Path(directory or default_recordings_dir()) / f"{domain.name}.json"


@dataclass
class Recording:
    """Recorded responses of one domain.

    Attributes:
        domain: domain name.
        content_hash: the domain's content hash when recorded.
        tools: ``{tool: {canonical args: response}}``; a response may carry
            ``"nondeterministic": True`` and ``"alternatives": [text, ...]``.
        pandas_version: the pandas the tools ran with (None: unknown, a format-1 recording).
    """

    domain: str
    content_hash: str
    tools: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    pandas_version: str | None = None

    def get(self, name: str, args: Any) -> dict[str, Any] | None:
        return self.tools.get(name, {}).get(canonical_args(args))

    def put(self, name: str, args: Any, response: dict[str, Any]) -> None:
        self.tools.setdefault(name, {})[canonical_args(args)] = dict(response)

    def __len__(self) -> int:
        return sum(len(v) for v in self.tools.values())

    def nondeterministic(self) -> dict[str, int]:
        """``{tool: number of argument sets whose two runs differed}``."""
        out: dict[str, int] = {}
        for tool, entries in self.tools.items():
            n = sum(1 for r in entries.values() if r.get("nondeterministic"))
            if n:
                out[tool] = n
        return out

    def check_drift(self, domain: SopBenchDomain, pandas_version: str | None = None) -> str | None:
        """Why this recording does not match ``domain`` and a tools runner using ``pandas_version``
        (None when it does; ``pandas_version=None`` checks the domain's content only)."""
        if self.domain != domain.name:
            return f"recording is of domain {self.domain!r}, not {domain.name!r}"
        if self.content_hash != domain.content_hash:
            return (
                f"sopbench/{domain.name} changed since it was recorded (content hash {self.content_hash[:12]} recorded, "
                f"{domain.content_hash[:12]} now): re-run `sopgym sopbench record`"
            )
        if pandas_version is not None and self.pandas_version != pandas_version:
            recorded = self.pandas_version or "of unknown version (recorded before sopgym stored it)"
            return (
                f"sopbench/{domain.name} was recorded with pandas {recorded}; its tools runner now uses pandas "
                f"{pandas_version}: re-run `sopgym sopbench record`"
            )
        return None

    # -- files -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "domain": self.domain, "content_hash": self.content_hash,
                "pandas_version": self.pandas_version, "tools": self.tools}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), sort_keys=True, indent=1, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("format") not in _READABLE:
            raise ValueError(f"{path}: recording format {data.get('format')!r}, expected one of {_READABLE}")
        return cls(domain=data["domain"], content_hash=data["content_hash"], tools=data["tools"],
                   pandas_version=data.get("pandas_version"))

    @classmethod
    def load_for(cls, domain: SopBenchDomain, path: str | Path, *, allow_drift: bool = False,
                 pandas_version: str | None = None) -> Recording:
        """Load and check against ``domain`` (and ``pandas_version``, when given). Raises
        RecordingDrift unless ``allow_drift``."""
        rec = cls.load(path)
        why = rec.check_drift(domain, pandas_version)
        if why and not allow_drift:
            raise RecordingDrift(why)
        return rec


def _unique(calls: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    seen, out = set(), []
    for name, args in calls:
        key = (name, canonical_args(args))
        if key not in seen:
            seen.add(key)
            out.append((name, args))
    return out


def record_calls(domain: SopBenchDomain, runner_factory, calls: Sequence[tuple[str, Any]],
                 recording: Recording | None = None, repeats: int = 2,
                 primary: Sequence[dict[str, Any]] | None = None, pandas_version: str | None = None) -> Recording:
    """Run each distinct call ``repeats`` times, each time in a fresh tools instance, and record it.

    Args:
        runner_factory: ``() -> ToolRunner``; one runner per repeat, so per-process state (a seeded
            RNG, a counter, hash randomisation) shows up as non-determinism too.
        primary: responses already obtained for ``calls`` (aligned with them): they count as the
            first run and are the ones replayed, so a plan that chained a token from them replays.
            Two different texts for one argument set inside ``primary`` also flag non-determinism.
        pandas_version: the pandas ``primary`` was obtained with (required with ``primary``).

    Raises:
        ValueError: runs (or ``recording``) disagree on the pandas version.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if primary and pandas_version is None:
        raise ValueError("primary responses need the pandas_version they were obtained with")
    rec = recording or Recording(domain.name, domain.content_hash, pandas_version=pandas_version)
    versions = {v for v in (rec.pandas_version, pandas_version) if v is not None}
    todo = _unique(calls)
    runs = []
    seen_texts: dict[tuple[str, str], list[str]] = {}
    if primary is not None:
        if len(primary) != len(calls):
            raise ValueError(f"primary must align with calls: {len(primary)} responses for {len(calls)} calls")
        first_seen: dict[tuple[str, str], dict[str, Any]] = {}
        for (name, args), response in zip(calls, primary):
            key = (name, canonical_args(args))
            first_seen.setdefault(key, response)
            seen_texts.setdefault(key, []).append(response["text"])
        runs.append([first_seen[(n, canonical_args(a))] for n, a in todo])
    for _ in range(repeats - len(runs)):
        runner = runner_factory()
        try:
            runs.append(runner.call_many(todo))
            versions.add(runner.pandas_version)
        finally:
            runner.close()
    if len(versions) > 1:
        raise ValueError(f"sopbench/{domain.name}: the recorded runs used different pandas versions {sorted(map(str, versions))}; "
                         "record with one tools runner")
    rec.pandas_version = versions.pop() if versions else None
    for i, (name, args) in enumerate(todo):
        first = dict(runs[0][i])
        texts = [run[i]["text"] for run in runs]
        texts += [t for t in seen_texts.get((name, canonical_args(args)), [])[1:] if t not in texts]
        if len(set(texts)) > 1:
            first["nondeterministic"] = True
            first["alternatives"] = texts[1:]
        rec.put(name, args, first)
    return rec
