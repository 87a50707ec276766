"""The domain-pack format: what a task source provides to an env.

An authored domain pack is a folder ``sopgym/sop_tasks/<domain>/`` with one layout
(docs/adding_a_domain.md):

* ``__init__.py``: imports only, and ``PACK``, the :class:`DomainPack` that wires the pieces below;
* ``sop.md``: the SOP text (numbered steps, thresholds, exceptions, the answer format);
* ``tools.py``: what the agent sees: the domain's vocabulary, ``TOOLS`` (written with
  :mod:`sopgym.sop_tasks.toolkit`) and the answer's ``FIELDS``;
* ``generator.py``: ``generate(rng, split, index)``: draw facts around a target label, label them,
  build the records (helpers in :mod:`sopgym.sop_tasks.generation`);
* ``solver.py``: ``solve(inputs)``, the reference solver, written from the SOP; it never imports
  ``generator.py``;
* ``state.py`` (stateful or SQL tools only): a standard-library-only stateful program (see
  :class:`sopgym.sandboxes.StatefulProgram`).

Tasks are generated, not stored: ``pack.task(split, index)`` is a pure function of
``(pack.name, pack.version, split, index)``. The ``train`` split is unlimited; ``val`` and ``test``
have fixed sizes and their content hashes are pinned by tests.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sopgym.sandboxes import SandboxEpisode, StatefulProgram, Tier, ToolSpec
from sopgym.sandboxes.schema import check_schema

__all__ = [
    "SPLITS",
    "OutputField",
    "Task",
    "ToolCall",
    "DomainPack",
    "Solver",
    "task_rng",
    "content_hash",
    "SUBMIT_TOOL",
    "ToolError",
    "expect",
    "read_text",
]

SPLITS = ("train", "val", "test")
SUBMIT_TOOL = "submit_answer"
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class OutputField:
    """One field of the final answer.

    Args:
        name: key in the ``submit_answer`` arguments.
        type: JSON type: ``string``, ``integer``, ``number`` or ``boolean``.
        enum: allowed values (the submit tool's schema lists them).
        nullable: whether ``null`` is a legal answer (compared explicitly, never as a string).
        description: shown to the agent in the submit tool's schema.
    """

    name: str
    type: str = "string"
    enum: tuple | None = None
    nullable: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if self.type not in ("string", "integer", "number", "boolean"):
            raise ValueError(f"output field {self.name!r}: type must be string/integer/number/boolean, got {self.type!r}")
        if self.enum is not None:
            object.__setattr__(self, "enum", tuple(self.enum))

    def json_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": [self.type, "null"] if self.nullable else self.type}
        if self.enum is not None:
            schema["enum"] = list(self.enum) + ([None] if self.nullable else [])
        if self.description:
            schema["description"] = self.description
        return schema


@dataclass(frozen=True)
class Task:
    """One task instance. ``answer`` and ``expected_state`` are never shown to the agent."""

    domain: str
    split: str
    index: int
    inputs: Mapping[str, Any]
    answer: Mapping[str, Any]
    replay: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    initial_state: Mapping[str, list] | None = None
    #: State the episode must end in (compared with the program's snapshot), e.g. a case filed.
    expected_state: Mapping[str, Any] | None = None
    difficulty: str = "medium"
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def task_id(self) -> str:
        return f"{self.domain}/{self.split}/{self.index}"

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "inputs": self.inputs,
            "answer": self.answer,
            "replay": self.replay,
            "initial_state": self.initial_state,
            "expected_state": self.expected_state,
            "difficulty": self.difficulty,
            "meta": self.meta,
        }


@dataclass(frozen=True)
class ToolCall:
    """A call a solver (or policy) makes: tool name and arguments."""

    name: str
    arguments: Mapping[str, Any]


#: A reference solver is a generator: it yields ToolCalls, receives each call's result (the decoded
#: JSON content on success, or a ``ToolError`` instance on failure), and returns the answer dict.
Solver = Callable[[dict[str, Any]], Generator[ToolCall, Any, dict]]


class ToolError(Exception):
    """What a solver receives in place of a result when a tool reported an error."""


def expect(result: Any) -> Any:
    """The result a solver received, or raise the :class:`ToolError` it received instead.

    For the calls the SOP needs to succeed: an error there means the generator, the tools and the
    SOP disagree, and raising it makes the oracle fail loudly.

    >>> expect({"status": "open"})
    {'status': 'open'}
    """
    if isinstance(result, ToolError):
        raise result
    return result


def task_rng(domain: str, version: int, split: str, index: int) -> random.Random:
    """The generator's RNG for one task: a stable function of its identity (not of Python's hash)."""
    digest = hashlib.sha256(f"sopgym|{domain}|v{version}|{split}|{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def content_hash(obj: Any) -> str:
    """sha256 of canonical JSON: pins split contents."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class DomainPack:
    """An authored (or adapted) domain: everything an env needs to pose and score its tasks.

    Args:
        name: CamelCase domain name; the env id is ``sopgym/<name>-v<version>``.
        version: bump on any change of behaviour or reward.
        title: a human-readable title.
        sop: the SOP text.
        tools: the domain's tool specs (the env adds ``submit_answer``).
        output_fields: the answer's fields.
        human_steps: how many tool-using steps a careful human takes; ``max_turns`` defaults to
            ``ceil(1.5 * human_steps)``.
        generate: ``(rng, split, index) -> dict`` with keys inputs, answer, replay, and optionally
            initial_state, expected_state, difficulty, meta. Must be deterministic given rng.
        solver: the reference solver (a :data:`Solver`), written independently of ``generate``.
        program: the stateful program when any tool is stateful.
        split_sizes: number of tasks per split; ``None`` means unlimited (train).
        license: licence of the domain's data.
        training_allowed: False forbids training on the domain (the trainer refuses it).
        training_note: why training is or is not allowed, when the licence had to be read to decide
            (``sopgym list`` shows it; SOP-Bench domains set it from their ``LICENSE.md``).
        theme: the SOP-Bench industrial theme this domain covers.
        format_inputs: renders the user message from the inputs.
    """

    name: str
    version: int
    title: str
    sop: str
    tools: Sequence[ToolSpec]
    output_fields: Sequence[OutputField]
    human_steps: int
    generate: Callable[[random.Random, str, int], Mapping[str, Any]]
    solver: Solver
    program: StatefulProgram | None = None
    split_sizes: Mapping[str, int | None] = field(default_factory=lambda: {"train": None, "val": 200, "test": 200})
    license: str = "Apache-2.0"
    training_allowed: bool = True
    training_note: str = ""
    theme: str = ""
    format_inputs: Callable[[Mapping[str, Any]], str] | None = None
    #: Env ids are ``<namespace>/<name>-v<version>``: ``sopgym`` for ours, ``sopbench`` for adapted ones.
    namespace: str = "sopgym"
    #: Verifiable tier: ``(code_runner, name, args, episode: SandboxEpisode, deadline: float | None) -> ToolResult``
    #: (:class:`sopgym.sop_tasks.toolkit.CodeTools`).
    verifiable: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"domain name must be an identifier, got {self.name!r}")
        if self.human_steps < 1:
            raise ValueError(f"human_steps must be >= 1, got {self.human_steps}")
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names) or SUBMIT_TOOL in names:
            raise ValueError(f"tool names must be unique and not {SUBMIT_TOOL!r}, got {names}")
        for tool in self.tools:
            check_schema(tool.parameters, f"{self.name}.{tool.name}")
        if any(t.tier is Tier.STATEFUL for t in self.tools) and self.program is None:
            raise ValueError(f"domain {self.name}: stateful tools need a program")
        if any(t.tier is Tier.VERIFIABLE for t in self.tools) and self.verifiable is None:
            raise ValueError(f"domain {self.name}: verifiable tools need a verifiable handler")
        if set(self.split_sizes) != set(SPLITS):
            raise ValueError(f"split_sizes must have keys {SPLITS}, got {sorted(self.split_sizes)}")

    # -- tasks ---------------------------------------------------------------------------------
    def num_tasks(self, split: str) -> int | None:
        self._check_split(split)
        return self.split_sizes[split]

    def task(self, split: str, index: int) -> Task:
        """The task at ``index`` of ``split`` (deterministic)."""
        self._check_split(split)
        size = self.split_sizes[split]
        if not isinstance(index, int) or index < 0 or (size is not None and index >= size):
            raise ValueError(f"task index for {self.name}/{split} must be in [0, {size}), got {index!r}")
        raw = dict(self.generate(task_rng(self.name, self.version, split, index), split, index))
        difficulty = raw.pop("difficulty", "medium")
        if difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
        unknown = set(raw) - {"inputs", "answer", "replay", "initial_state", "expected_state", "meta"}
        if unknown:
            raise ValueError(f"generator returned unknown keys {sorted(unknown)}")
        return Task(domain=self.name, split=split, index=index, difficulty=difficulty, **raw)

    def task_from_id(self, task_id: str) -> Task:
        domain, split, index = task_id.rsplit("/", 2)
        if domain != self.name:
            raise ValueError(f"task id {task_id!r} is not of domain {self.name!r}")
        return self.task(split, int(index))

    def split_hash(self, split: str, n: int | None = None) -> str:
        size = self.split_sizes[split]
        count = n if n is not None else size
        if count is None:
            raise ValueError(f"split {split!r} is unlimited: pass n")
        return content_hash([self.task(split, i).to_json() for i in range(count)])

    def sandbox_episode(self, task: Task) -> SandboxEpisode:
        return SandboxEpisode(key=task.task_id, replay=task.replay, program=self.program, initial_state=task.initial_state)

    def _check_split(self, split: str) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")

    # -- presentation --------------------------------------------------------------------------
    @property
    def env_id(self) -> str:
        return f"{self.namespace}/{self.name}-v{self.version}"

    @property
    def key(self) -> str:
        """Registry key: ``<namespace>/<name>``."""
        return f"{self.namespace}/{self.name}"

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.output_fields]

    def submit_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {f.name: f.json_schema() for f in self.output_fields},
            "required": self.field_names,
            "additionalProperties": False,
        }

    def submit_spec(self) -> ToolSpec:
        return ToolSpec(
            name=SUBMIT_TOOL,
            description="Submit the final answer required by the SOP. Ends the episode.",
            parameters=self.submit_schema(),
        )

    def user_message(self, inputs: Mapping[str, Any]) -> str:
        if self.format_inputs is not None:
            return self.format_inputs(inputs)
        lines = [f"- {k}: {json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v}" for k, v in inputs.items()]
        return "Process this case according to the SOP.\n\nCase inputs:\n" + "\n".join(lines)


def read_text(module_file: str, name: str = "sop.md") -> str:
    """Read a text file that sits beside a domain module (packaged as package data)."""
    return (Path(module_file).parent / name).read_text(encoding="utf-8")
