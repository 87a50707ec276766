"""Built-in policies that act through the env's public interface (observation, info).

* ``oracle``: the domain's reference solver. It calls the tools, reads their results from the tool
  messages, and submits. Its success is 100% on every split by construction of the labels, which
  tests check; it is also the source of SFT warm-start trajectories.
* ``noisy-oracle``: the oracle with a seeded misconception: on outcome classes (the answer's
  categorical fields) holding a share of the domain's tasks it answers another class's decision in a share of those
  cases. Imperfect demonstrations for SFT, as a real demonstrator's are (docs/trainer.md).
* ``random``: a random tool (submit included) with arguments sampled from the tool's JSON Schema,
  or free text. A floor.
* ``inputs-only``: the best single-feature rule from the task inputs, fitted on the train split.
* ``majority``: submits the most common answer of the train split (of the only split, for benchmarks
  that have one) without calling any tool. It measures how far labels can be guessed without the
  procedure.

A policy has ``reset(info)`` and ``act(observation, info) -> str`` (the assistant's reply).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from sopgym.sop_tasks.pack import SUBMIT_TOOL, DomainPack, ToolCall, ToolError
from sopgym.sop_tasks.registry import get_pack

__all__ = ["Policy", "OraclePolicy", "NoisyOraclePolicy", "RandomPolicy", "MajorityPolicy", "InputsOnlyPolicy", "POLICIES", "make_policy", "register_policy", "format_call"]


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A Hermes-style tool call block."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False) + "</tool_call>"


def _pack_of(info: Mapping[str, Any]) -> DomainPack:
    env_id = info["env_id"]
    namespace = env_id.split("/", 1)[0]
    return get_pack(f"{namespace}/{info['domain']}")


class Policy:
    name = "policy"

    def reset(self, info: Mapping[str, Any]) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def act(self, observation: str, info: Mapping[str, Any]) -> str:  # pragma: no cover - interface
        raise NotImplementedError


def _last_result(info: Mapping[str, Any]) -> Any:
    """The decoded result of the previous call, or a ToolError carrying its message."""
    msg = info["messages"][-1]
    text = msg.get("content") or ""
    if msg.get("role") != "tool" or text.startswith("Error: "):
        return ToolError(text.removeprefix("Error: "))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class OraclePolicy(Policy):
    """The reference solver acting through the env, one call per turn."""

    name = "oracle"

    def reset(self, info: Mapping[str, Any]) -> None:
        pack = _pack_of(info)
        task = pack.task_from_id(info["task_id"])
        self._gen = pack.solver(dict(task.inputs))
        self._started = False

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        try:
            if not self._started:
                self._started = True
                call = next(self._gen)
            else:
                call = self._gen.send(_last_result(info))
        except StopIteration as stop:
            return format_call(SUBMIT_TOOL, self.final_answer(stop.value))
        assert isinstance(call, ToolCall), f"solver must yield ToolCall, got {type(call).__name__}"
        return format_call(call.name, call.arguments)

    def final_answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        """The solver's answer, as submitted."""
        return answer


def _answer_class(pack: DomainPack, answer: Mapping[str, Any]) -> tuple:
    """The answer's values of its categorical fields (those with an ``enum``), in the fields' order."""
    return tuple(answer.get(f.name) for f in pack.output_fields if f.enum is not None)


@lru_cache(maxsize=64)
def _train_classes(pack_key: str, sample: int) -> tuple[tuple[tuple, int], ...]:
    """The outcome classes of the train split's first ``sample`` tasks with their task counts, sorted
    (deterministic)."""
    pack = get_pack(pack_key)
    size = pack.num_tasks("train")
    counts = Counter(_answer_class(pack, pack.task("train", i).answer) for i in range(min(sample, size) if size is not None else sample))
    return tuple(sorted(counts.items(), key=repr))


def confusion_map(pack_key: str, seed: int, task_share: float, sample: int = 500) -> dict[tuple, tuple]:
    """The noisy oracle's misconception: outcome classes of the train split, taken in an order drawn by
    ``seed`` until they hold at least ``task_share`` of its first ``sample`` tasks (none for 0; at least
    two classes otherwise), mapped onto each other in that order as one cycle (the first class to the
    second, ..., the last to the first).

    A cycle, not a free draw per class: every confused class's wrong answers are those of one other
    confused class, and no class's answer stands in for several others. With free draws several
    classes could map to one (seed 1 of the CPU demo: three to ``QUARANTINE/TEMP_REVIEW``), whose
    answer then dominated the demonstrations, and the model fitted to them gave it on nearly every task
    (docs/measurements.md, "A cycle of confused classes")."""
    counted = _train_classes(pack_key, sample)
    if len(counted) < 2:
        raise ValueError(f"a noisy oracle confuses outcome classes: expected at least 2 in {pack_key}'s train split, got {len(counted)}")
    if task_share <= 0:
        return {}
    rng = np.random.default_rng([seed, 0x5EED])
    total, held = sum(n for _, n in counted), 0
    chosen: list[tuple] = []
    for i in rng.permutation(len(counted)):
        if held >= task_share * total and len(chosen) >= 2:
            break
        cls, count = counted[i]
        chosen.append(cls)
        held += count
    return {cls: chosen[(j + 1) % len(chosen)] for j, cls in enumerate(chosen)}


class NoisyOraclePolicy(OraclePolicy):
    """The reference solver with a misconception, for imperfect SFT demonstrations.

    On the outcome classes of :func:`confusion_map` (classes drawn by ``seed`` that hold a
    ``task_share`` of the train split's tasks) it submits the mapped class's categorical fields
    instead of the right ones in a ``confusion`` share of those tasks; its tool calls and the
    answer's other fields are the oracle's.
    Whether a task is confused is drawn from ``seed`` and the task id: the same seed gives the same
    demonstrations. ``confusion`` above 0.5 makes the wrong decision the demonstrations' majority on
    those classes, so a policy fitted to them answers those classes wrongly when greedy and rightly in
    some of its samples: the gap between greedy success and pass@k that RL on the verifiable reward
    can close.
    """

    name = "noisy-oracle"

    def __init__(self, seed: int = 0, task_share: float = 0.5, confusion: float = 0.6):
        if not 0.0 <= task_share <= 1.0 or not 0.0 <= confusion <= 1.0:
            raise ValueError(f"task_share and confusion must be in [0, 1], got {task_share!r} and {confusion!r}")
        self.seed, self.task_share, self.confusion = seed, task_share, confusion

    def reset(self, info: Mapping[str, Any]) -> None:
        super().reset(info)
        pack = _pack_of(info)
        self._pack = pack
        self._map = confusion_map(pack.key, self.seed, self.task_share)
        draw = np.random.default_rng([self.seed, *str(info["task_id"]).encode()]).random()
        self._draw_below = draw < self.confusion

    def final_answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        target = self._map.get(_answer_class(self._pack, answer))
        if target is None or not self._draw_below:
            return answer
        categorical = [f.name for f in self._pack.output_fields if f.enum is not None]
        return {**answer, **dict(zip(categorical, target))}


def _sample(schema: Mapping[str, Any], rng: np.random.Generator, strings: list[str]) -> Any:
    if "enum" in schema:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    typ = schema.get("type", "string")
    if isinstance(typ, list):
        typ = typ[int(rng.integers(len(typ)))]
    if typ == "object":
        props = schema.get("properties", {})
        return {k: _sample(v, rng, strings) for k, v in props.items() if k in schema.get("required", ()) or rng.random() < 0.5}
    if typ == "array":
        return [_sample(schema.get("items", {}), rng, strings) for _ in range(int(rng.integers(0, 3)))]
    if typ == "integer":
        return int(rng.integers(-5, 100))
    if typ == "number":
        return float(np.round(rng.normal(0, 50), 2))
    if typ == "boolean":
        return bool(rng.integers(2))
    if typ == "null":
        return None
    return strings[int(rng.integers(len(strings)))] if strings and rng.random() < 0.7 else "x" * int(rng.integers(1, 8))


class RandomPolicy(Policy):
    """Random calls from the tool schemas (with strings from the task inputs), or free text."""

    name = "random"

    def __init__(self, seed: int | None = None, submit_prob: float = 0.2, text_prob: float = 0.1):
        self.rng = np.random.default_rng(seed)
        self.submit_prob = submit_prob
        self.text_prob = text_prob

    def reset(self, info: Mapping[str, Any]) -> None:
        self._tools = {t["function"]["name"]: t["function"]["parameters"] for t in info["tools"]}
        user = next(m["content"] for m in info["messages"] if m["role"] == "user")
        self._strings = [line.split(": ", 1)[1] for line in user.splitlines() if ": " in line]

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        if self.rng.random() < self.text_prob:
            return "I am not sure what to do next."
        names = [n for n in self._tools if n != SUBMIT_TOOL]
        name = SUBMIT_TOOL if self.rng.random() < self.submit_prob or not names else names[int(self.rng.integers(len(names)))]
        return format_call(name, _sample(self._tools[name], self.rng, self._strings))


@lru_cache(maxsize=64)
def _majority_answer(pack_key: str, sample: int) -> str:
    pack = get_pack(pack_key)
    # The train split; a benchmark with a single evaluation split (SOP-Bench) uses that split's labels.
    split = next(s for s in ("train", "val", "test") if pack.num_tasks(s) != 0)
    size = pack.num_tasks(split) or sample
    counts = Counter(json.dumps(pack.task(split, i).answer, sort_keys=True) for i in range(min(sample, size)))
    return counts.most_common(1)[0][0]


class MajorityPolicy(Policy):
    """Submits the train split's most common answer; never calls a tool."""

    name = "majority"

    def __init__(self, sample: int = 500):
        self.sample = sample

    def reset(self, info: Mapping[str, Any]) -> None:
        self._answer = json.loads(_majority_answer(_pack_of(info).key, self.sample))

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        return format_call(SUBMIT_TOOL, self._answer)


@lru_cache(maxsize=64)
def _fit_inputs_only(pack_key: str, sample: int) -> tuple[str | None, tuple, dict, str]:
    """The best single-feature rule on the train split: (feature, bin edges, value -> answer, fallback).

    Features are chosen by accuracy on a held-out half of the sample (so an id that memorises each
    task's answer does not win), then the chosen rule is refitted on the whole sample.
    """
    pack = get_pack(pack_key)
    split = next(s for s in ("train", "val", "test") if pack.num_tasks(s) != 0)
    size = pack.num_tasks(split) or sample
    tasks = [pack.task(split, i) for i in range(min(sample, size))]
    answers = [json.dumps(t.answer, sort_keys=True) for t in tasks]
    fallback = Counter(answers).most_common(1)[0][0]
    half = len(tasks) // 2

    def fit(values, labels, edges):
        table: dict[str, Counter] = {}
        for value, answer in zip(values, labels):
            table.setdefault(_feature(value, edges), Counter())[answer] += 1
        return {v: c.most_common(1)[0][0] for v, c in table.items()}

    held_out_fallback = Counter(answers[:half]).most_common(1)[0][0] if half else fallback
    best_acc = sum(a == held_out_fallback for a in answers[half:]) / max(1, len(answers) - half)
    best: tuple[str | None, tuple, dict] = (None, (), {})
    for key in sorted({k for t in tasks for k in t.inputs}):
        values = [t.inputs.get(key) for t in tasks]
        edges = _bin_edges(values)
        rule = fit(values[:half], answers[:half], edges)
        accuracy = sum(rule.get(_feature(v, edges), held_out_fallback) == a for v, a in zip(values[half:], answers[half:])) / max(1, len(answers) - half)
        if accuracy > best_acc:
            best_acc, best = accuracy, (key, edges, fit(values, answers, edges))
    return best[0], best[1], best[2], fallback


def _bin_edges(values: list) -> tuple:
    """Octile edges for a numeric feature (no bins for anything else)."""
    nums = sorted(v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool))
    if len(nums) < len(values) // 2 or len(set(nums)) <= 8:
        return ()
    return tuple(nums[len(nums) * q // 8] for q in range(1, 8))


def _feature(value: Any, edges: tuple) -> str:
    if edges and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"bin{sum(value >= e for e in edges)}"
    return json.dumps(value, sort_keys=True, default=str)


class InputsOnlyPolicy(Policy):
    """Answers from one input feature, never calling a tool: the best single-feature rule fitted on
    the train split (category -> most common answer; numbers binned by octiles). A domain whose
    answers this policy can guess is a domain whose tools are not needed."""

    name = "inputs-only"

    def __init__(self, sample: int = 1000):
        self.sample = sample

    def reset(self, info: Mapping[str, Any]) -> None:
        pack = _pack_of(info)
        feature, edges, rule, fallback = _fit_inputs_only(pack.key, self.sample)
        inputs = pack.task_from_id(info["task_id"]).inputs
        answer = rule.get(_feature(inputs.get(feature), edges), fallback) if feature is not None else fallback
        self._answer = json.loads(answer)

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        return format_call(SUBMIT_TOOL, self._answer)


POLICIES: dict[str, Callable[..., Policy]] = {
    "oracle": OraclePolicy, "noisy-oracle": NoisyOraclePolicy, "random": RandomPolicy, "majority": MajorityPolicy, "inputs-only": InputsOnlyPolicy,
}


def register_policy(name: str, factory: Callable[..., Policy]) -> None:
    """Make ``make_policy(name)`` build ``factory(**kwargs)``; task sources add their own baselines this way
    (the SOP-Bench adapter registers ``groundtruth-replay`` when it is imported)."""
    existing = POLICIES.get(name)
    if existing is not None and existing is not factory:
        raise ValueError(f"a policy named {name!r} is already registered ({existing!r})")
    POLICIES[name] = factory


def make_policy(name: str, **kwargs: Any) -> Policy:
    try:
        return POLICIES[name](**kwargs)
    except KeyError:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {name!r}") from None
