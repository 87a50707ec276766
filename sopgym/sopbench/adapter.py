"""SOP-Bench domains as sopgym domain packs, and their registration as gymnasium envs.

``register(path)`` loads every domain of a checkout and makes ``gymnasium.make("sopbench/<domain>-v0")``
work, with the same env contract as our own domains (see :class:`.env.SopBenchEnv`).
Splits: SOP-Bench has one set of tasks: the ``test`` split (one task per CSV row); ``train`` and
``val`` are empty. ``training_allowed`` is False when the domain's LICENSE.md forbids training AI
models on the data; the licence is CC-BY-NC-4.0 for all of SOP-Bench.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sopgym.sandboxes.base import ToolSpec
from sopgym.sandboxes.schema import check_schema
from sopgym.sop_tasks.pack import DomainPack, OutputField, ToolCall

from .groundtruth import decode, implied_args
from .loader import LICENSE, LoadReport, SopBenchDomain, load, spec_of
from .prompts import chat_user_message
from .replay import recording_path

__all__ = ["NAMESPACE", "VERSION", "Registered", "build_pack", "register", "registered", "get_registered"]

NAMESPACE = "sopbench"
VERSION = 0
ENTRY_POINT = "sopgym.sopbench.sopbench_env:SopBenchEnv"

_KNOWN_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "minimum", "maximum",
    "minLength", "maxLength", "pattern", "items", "minItems", "maxItems", "default", "description",
    "title", "examples",
}


@dataclass(frozen=True)
class Registered:
    """A registered SOP-Bench domain: its pack, the loaded data, where its recording lives, and notes."""

    pack: DomainPack
    domain: SopBenchDomain
    recording_file: Path
    notes: tuple[str, ...]


_REGISTERED: dict[str, Registered] = {}


def _clean_schema(schema: Any, path: str, notes: list[str]) -> dict[str, Any]:
    """A copy of an upstream JSON Schema that our schema checker accepts (dropped keywords noted)."""
    if not isinstance(schema, Mapping):
        notes.append(f"{path}: schema is not an object; replaced by {{}}")
        return {}
    out = {}
    for key, value in schema.items():
        if key not in _KNOWN_KEYWORDS:
            notes.append(f"{path}: unsupported JSON Schema keyword {key!r} not shown")
            continue
        if key == "properties" and isinstance(value, Mapping):
            value = {k: _clean_schema(v, f"{path}.{k}", notes) for k, v in value.items()}
        elif key == "items" and isinstance(value, Mapping):
            value = _clean_schema(value, f"{path}[]", notes)
        out[key] = value
    if "required" in out:
        props = out.get("properties", {})
        kept = [r for r in out["required"] if r in props]
        if kept != list(out["required"]):
            notes.append(f"{path}: required names not in properties dropped: {sorted(set(out['required']) - set(kept))}")
        out["required"] = kept
    return out


def _tool_specs(domain: SopBenchDomain, notes: list[str]) -> tuple[ToolSpec, ...]:
    specs = []
    for entry in domain.toolspecs:
        spec = spec_of(entry)
        name = spec["name"]
        params = _clean_schema(spec.get("inputSchema", {}).get("json", {"type": "object"}), name, notes)
        params.setdefault("type", "object")
        if params.get("type") != "object":
            raise ValueError(f"{domain.name}: tool {name!r} input schema has type {params.get('type')!r}, expected 'object'")
        check_schema(params, f"{domain.name}.{name}")
        specs.append(ToolSpec(name=name, description=str(spec.get("description", "")), parameters=params))
    return tuple(specs)


def _field_type(series) -> str:
    kind = series.dtype.kind
    return {"b": "boolean", "i": "integer", "u": "integer", "f": "number"}.get(kind, "string")


def _output_fields(domain: SopBenchDomain) -> tuple[OutputField, ...]:
    fields = []
    for col in domain.output_columns:
        series = domain.frame[col]
        fields.append(OutputField(
            name=col,
            type=_field_type(series),
            nullable=bool(series.isna().any()),
            description=f"the SOP's final value for {col}",
        ))
    return tuple(fields)


def _find_row(domain: SopBenchDomain, inputs: Mapping[str, Any]) -> int:
    for i in range(domain.num_tasks):
        if domain.inputs(i) == dict(inputs):
            return i
    raise ValueError(f"sopbench/{domain.name}: no task row has inputs {dict(inputs)}")


def build_pack(domain: SopBenchDomain) -> tuple[DomainPack, list[str]]:
    """The :class:`DomainPack` of a loaded domain, and notes about what had to be adapted.

    Raises:
        ValueError: the toolspecs cannot be shown as tools (not an identifier, not an object schema).
    """
    notes: list[str] = []
    tools = _tool_specs(domain, notes)

    def generate(rng: random.Random, split: str, index: int) -> dict[str, Any]:
        return {"inputs": domain.inputs(index), "answer": domain.labels(index), "replay": {}, "meta": {"row": index}}

    def solver(inputs: Mapping[str, Any]):
        """Ground-truth replay: every tool once with the row's implied arguments, then the labels.
        The row is the first whose inputs equal ``inputs``."""
        index = _find_row(domain, inputs)
        row, earlier = domain.row(index), list[Any]()
        for entry in domain.toolspecs:
            spec = spec_of(entry)
            result = yield ToolCall(spec["name"], implied_args(spec, row, earlier))
            earlier.append(result if not isinstance(result, str) else decode(result))
        return domain.labels(index)

    pack = DomainPack(
        name=domain.name,
        version=VERSION,
        title=f"SOP-Bench: {domain.name.replace('_', ' ')}",
        sop=domain.sop,
        tools=tools,
        output_fields=_output_fields(domain),
        human_steps=len(tools) + 1,
        generate=generate,
        solver=solver,
        split_sizes={"train": 0, "val": 0, "test": domain.num_tasks},
        license=LICENSE,
        training_allowed=domain.training_allowed,
        training_note=domain.training_note,
        theme=str(domain.metadata.get("domain") or domain.name),
        format_inputs=chat_user_message,
        namespace=NAMESPACE,
    )
    return pack, notes


def register(path: str | Path, *, recordings_dir: str | Path | None = None, replace: bool = True,
             allow_training: Collection[str] = ()) -> LoadReport:
    """Load a SOP-Bench checkout and register every loadable domain as ``sopbench/<domain>-v0``.

    Args:
        path: the checkout (or its ``benchmarks/data`` folder, or one domain folder).
        recordings_dir: where recordings are read from (default ``~/.cache/sopgym/sopbench``).
        replace: re-registering a domain replaces it (a re-loaded checkout wins).
        allow_training: domains whose licence the matcher cannot settle and a person found to allow
            training (:func:`.loader.load`).

    Returns:
        The :class:`LoadReport`; each folder that cannot be loaded, and each domain whose toolspecs
        cannot be adapted, is in ``skipped`` with the reason; the others are registered.
    """
    import gymnasium as gym

    from sopgym.sop_tasks.registry import register_pack as register_source

    report = load(path, allow_training=allow_training)
    for name, domain in list(report.domains.items()):
        try:
            pack, notes = build_pack(domain)
        except Exception as exc:  # noqa: BLE001 - one domain's tools must not unregister the others
            report.skipped[name] = str(exc) if isinstance(exc, ValueError) else f"{name}: {type(exc).__name__}: {exc}"
            del report.domains[name]
            continue
        register_source(pack, replace=replace)
        _REGISTERED[pack.key] = Registered(pack, domain, recording_path(domain, recordings_dir), tuple(notes))
        if pack.env_id in gym.registry and replace:
            del gym.registry[pack.env_id]
        if pack.env_id not in gym.registry:
            gym.register(id=pack.env_id, entry_point=ENTRY_POINT, kwargs={"domain": pack.key}, order_enforce=True)
    return report


def registered() -> dict[str, Registered]:
    """``{"sopbench/<name>": Registered}`` of this process."""
    return dict(_REGISTERED)


def get_registered(key: str) -> Registered:
    if "/" not in key:
        key = f"{NAMESPACE}/{key}"
    try:
        return _REGISTERED[key]
    except KeyError:
        raise KeyError(f"SOP-Bench domain {key!r} is not registered; registered: {sorted(_REGISTERED)}. "
                       "Call sopgym.sopbench.register(path) or set SOPBENCH_DIR") from None
