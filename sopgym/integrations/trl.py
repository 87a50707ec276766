"""sopgym envs in TRL's ``GRPOTrainer``, through both of its multi-turn paths. Needs ``pip install sopgym[trl]``.

Example (``environment_factory``: TRL generates, parses tool calls and calls the env's methods)::

    from trl import GRPOConfig, GRPOTrainer
    from sopgym.integrations.trl import environment_class, train_dataset

    env_id = "sopgym/WarehouseReceiving-v0"
    trainer = GRPOTrainer(model, args=GRPOConfig(...), processing_class=tokenizer,
                          train_dataset=train_dataset(env_id, "train", 256),
                          environment_factory=environment_class(env_id))  # reward: the env's get_reward

Example (``rollout_func``: sopgym's own step loop in token space, TRL trains on it)::

    from sopgym.integrations.trl import SopgymRollout, sopgym_reward, train_dataset

    dataset = train_dataset(env_id, "train", 256)
    trainer = GRPOTrainer(model, reward_funcs=sopgym_reward, args=GRPOConfig(...), processing_class=tokenizer,
                          train_dataset=dataset, rollout_func=SopgymRollout(dataset))

The two paths differ in who reads the model's reply:

* ``environment_factory`` (:func:`environment_class`): TRL renders the prompt with the class's
  methods as ``tools=``, parses each completion with the tokenizer's response template (only the
  chat templates TRL recognises: see docs/integrations.md), calls the methods, and appends their
  results. Each method call is one sopgym ``step`` with that one structured call, so sopgym still
  validates arguments against the exact schema and scores the episode; ``get_reward`` returns
  sopgym's return. What TRL cannot express: a completion TRL cannot parse (or with no tool call)
  ends the rollout, so the model never sees sopgym's parse-error or no-tool-call feedback, and
  such replies are not counted as invalid actions; the episode is then ended with
  ``end_episode("stopped")`` (scored like an unanswered episode). Tool schemas go through
  ``transformers.utils.get_json_schema`` of the method signatures, which keeps types, enums,
  nullability and required fields but has no place for ``pattern``, length or range bounds, or
  nested properties: each keyword it loses is written into the parameter's description
  (``pattern: ^D[0-9]{2}$``), so the tool block is within 3% of the exact schemas' size
  (benchmarks/trl_tool_schemas.py). Several calls in one completion are several sopgym turns (``max_turns`` counts calls).
* ``rollout_func`` (:class:`SopgymRollout`): the completion text goes to ``env.step`` as it is, so
  sopgym's parsing, statuses, feedback messages, invalid-action penalty and exact schemas (the
  env's ``info["tools"]`` rendered by the chat template) all hold. Generation is TRL's own
  (``GRPOTrainer._generate_single_turn``: vLLM, transformers or continuous batching, with the
  trainer's sampling settings; a private method, pinned and checked: see :data:`TRL_GENERATE`),
  one call per turn for every running episode; env messages are
  tokenised with the chat template (:class:`~sopgym.trainers.episodes.EpisodeBuilder`) and carry
  ``env_mask`` 0, so they are never trained on.

Infrastructure failures: ``get_reward`` and :func:`sopgym_reward` return ``None`` for them, which
TRL treats as unscorable (excluded from the group baseline, advantage 0).

Envs served elsewhere (``sopgym serve`` on another host): :func:`train_dataset`,
:func:`environment_class`, :func:`environment_factories` and :class:`SopgymRollout` take
``servers={env_id: URL}``, and every env they make is a session of that server (see
:mod:`sopgym.integrations._common`); the rows, rewards and records are the local env's.
"""

from __future__ import annotations

import inspect
import json
import keyword
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from sopgym.episodes.pools import EnvPool
from sopgym.episodes.specs import EpisodeSpec
from sopgym.trainers.token_agent import TokenTurn

from ._common import (
    ROW_KEYS,
    episode_metrics,
    make_env,
    reset_from_row,
    servers_of,
    success_of,
    task_rows,
    tool_call_message,
)
from ._tokens import run_token_episodes

__all__ = ["train_dataset", "environment_class", "environment_factories", "SopgymToolEnv", "SopgymRollout", "sopgym_reward"]


# --------------------------------------------------------------------------------------------------
# Task rows
# --------------------------------------------------------------------------------------------------
def train_dataset(env_id: str | Sequence[str], split: str = "train", num_tasks: int = 64, **kwargs: Any):
    """A ``datasets.Dataset`` of task rows for ``GRPOTrainer``.

    Columns: ``prompt`` (sopgym's initial chat: system message with the SOP, user message with the
    inputs), ``env_id``, ``split``, ``task_index``, ``seed``, ``task_id`` and ``environment`` (the env
    id, which selects the class when ``environment_factory`` is a dict, see :func:`environment_factories`).

    Args:
        env_id: one registered id or several.
        split, num_tasks: which tasks (``0 .. num_tasks-1`` of the split, per env id).
        **kwargs: ``seed``, ``first_task``, ``env_kwargs``, ``allow_restricted``, ``servers`` (see ``task_rows``).

    Raises:
        ValueError: see :func:`sopgym.integrations._common.task_rows`.
    """
    from datasets import Dataset

    rows = task_rows(env_id, split, num_tasks, **kwargs)
    return Dataset.from_list([{**row, "environment": row["env_id"]} for row in rows])


# --------------------------------------------------------------------------------------------------
# environment_factory: a class whose public methods are the env's tools
# --------------------------------------------------------------------------------------------------
class SopgymToolEnv:
    """Base of the classes :func:`environment_class` builds: one sopgym env, reset per rollout.

    TRL exposes every public function of the class except ``reset`` and ``get_reward`` as a tool, so
    this class has no other public methods; its state is in attributes.
    """

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}
    servers: dict[str, dict[str, Any]] | None = None
    """Where ``env_id`` is served (``{env_id: RemoteSOPEnv kwargs}``), or None: made in this process."""

    def __init__(self) -> None:
        self.record: dict[str, Any] | None = None
        """The env's episode record once the episode is over (what sopgym's evaluator reads)."""
        self.total_reward = 0.0
        """Sum of the episode's step rewards (sopgym's return)."""
        self._env = make_env(self.env_id, self.env_kwargs, self.servers)
        self._running = False

    def reset(self, **row: Any) -> None:
        """Start the episode a dataset row names (``env_id``, ``split``, ``task_index``, ``seed``,
        ``prompt``). The prompt already holds the task, so nothing is appended to it.

        Raises:
            ValueError: a row without a task, for another env, or whose prompt is not the task's.
        """
        if row.get("prompt") is None:
            raise ValueError("expected the dataset's 'prompt' column (train_dataset writes it): sopgym's chat starts with the SOP")
        reset_from_row(self._env, {k: row.get(k) for k in (*ROW_KEYS, "task_id", "prompt")})
        self.record = None
        self.total_reward = 0.0
        self._running = True
        return None

    def get_reward(self) -> float | None:
        """sopgym's return for the episode; ends it first (``stopped``) when TRL stopped calling tools.
        ``None`` (unscorable for TRL) after an infrastructure failure."""
        if self._running:
            _, reward, _, _, info = self._env.unwrapped.end_episode("stopped", "TRL stopped calling tools")
            self._finish(reward, info)
        if self.record is None:
            raise RuntimeError("get_reward() called before reset(): no episode to score")
        if self.record["infrastructure_failure"]:
            return None
        return self.total_reward

    @property
    def metrics(self) -> dict[str, Any]:
        """The evaluator's success and the record's counts (after :meth:`get_reward`)."""
        return episode_metrics(self.record) if self.record is not None else {}

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if not self._running:
            cause = self.record["truncation_cause"] if self.record else None
            return f"Error: the episode has already ended ({'submitted' if cause is None else cause}); {name} was not run."
        _, reward, terminated, truncated, info = self._env.step(tool_call_message(name, arguments))
        messages = info["messages"]
        start = max(i for i, m in enumerate(messages) if m["role"] == "assistant") + 1
        text = "\n".join(m["content"] for m in messages[start:])
        if terminated or truncated:
            self._finish(reward, info)
        else:
            self.total_reward += float(reward)
        return text

    def _finish(self, reward: float, info: Mapping[str, Any]) -> None:
        self.total_reward += float(reward)
        self._running = False
        self.record = dict(info["episode"])


_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict, "array": list}


def _hint(schema: Mapping[str, Any]) -> Any:
    """The Python type hint that renders (through transformers' ``get_json_schema``) closest to ``schema``."""
    typ = schema.get("type")
    types = list(typ) if isinstance(typ, list) else [typ] if typ is not None else []
    nullable = "null" in types or (schema.get("enum") is not None and None in schema["enum"])
    types = [t for t in types if t != "null"]
    if schema.get("enum") is not None:
        values = tuple(v for v in schema["enum"] if v is not None)
        hint: Any = Literal[values] if values else type(None)
    elif len(types) == 1 and types[0] == "array" and isinstance(schema.get("items"), Mapping):
        hint = list[_hint(schema["items"])]  # type: ignore[misc]  # a type built at run time from the schema
    elif types:
        parts = [_JSON_TYPES.get(t, str) for t in types]
        hint = parts[0] if len(parts) == 1 else typing.Union[tuple(parts)]  # noqa: UP007 - built from a list
    else:
        hint = str
    return typing.Optional[hint] if nullable else hint  # noqa: UP045 - built at run time


def _conveyed(rendered: Mapping[str, Any]) -> dict[str, Any]:
    """What a rendered parameter schema says, in the exact schema's terms: transformers writes a nullable
    type as ``"nullable": true`` where JSON Schema lists ``"null"`` in ``type``."""
    out = {k: v for k, v in rendered.items() if k not in ("description", "nullable")}
    if rendered.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _same(exact: Mapping[str, Any], conveyed: Mapping[str, Any], key: str) -> bool:
    a, b = exact.get(key), conveyed.get(key)
    if key in ("type", "enum") and isinstance(a, list) and isinstance(b, list):
        return sorted(map(json.dumps, a)) == sorted(map(json.dumps, b))
    return key in conveyed and a == b


def _keywords(schema: Mapping[str, Any]) -> str:
    """JSON Schema keywords as compact text for a description: ``pattern: ^D[0-9]{2}$; minLength: 1``
    (strings as they are, other values as JSON)."""
    return "; ".join(f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True)}"
                     for k, v in schema.items())


def _tool_method(tool: Mapping[str, Any]) -> Callable[..., str]:
    """A method named after the tool, with the tool's parameters as its signature and a Google
    docstring, that runs the call as one sopgym step.

    TRL renders a tool from the method with transformers' ``get_json_schema``, which expresses types,
    enums, nullability, array items and required parameters, and insists on a description per
    parameter. The rest of the exact schema (``pattern``, length and range bounds, nested properties,
    ...) goes into the parameter's description as JSON Schema keywords, only the keywords the
    rendering lost; ``additionalProperties: false`` on the arguments becomes "Takes no other
    arguments." The method has no return annotation or ``Returns`` section, which would render a
    ``return`` entry per tool that the model never uses."""
    from transformers.utils import get_json_schema

    fn = tool["function"]
    name = fn["name"]
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    props: Mapping[str, Any] = params.get("properties", {})
    required = set(params.get("required", ()))
    for pname in [name, *props]:
        if not pname.isidentifier() or keyword.iskeyword(pname):
            raise ValueError(
                f"tool {name!r}: {pname!r} is not a Python identifier, so TRL's environment_factory (tools are methods) "
                "cannot express it; use SopgymRollout (rollout_func) for this env"
            )
    if name in ("reset", "get_reward", "metrics", "record", "total_reward"):
        raise ValueError(f"tool name {name!r} clashes with the environment class's own members; expected another name")

    def call(self, **arguments: Any) -> str:
        return self._call(name, arguments)

    ordered = sorted(props, key=lambda p: p not in required)  # required parameters first, as Python needs
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for pname in ordered:
        annotations[pname] = _hint(props[pname])
        default = inspect.Parameter.empty if pname in required else None
        parameters.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[pname]))
    call.__name__ = call.__qualname__ = name
    call.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # read by inspect.signature
    call.__annotations__ = annotations

    description = " ".join((fn.get("description") or name).split())

    def docstring(tool_note: str, notes: dict[str, str]) -> str:
        lines = [description + tool_note]
        if ordered:
            lines += ["", "Args:"]
            for pname in ordered:
                own = " ".join(str(props[pname].get("description") or "").split())
                text = " ".join(t for t in (own, notes.get(pname, "")) if t) or pname  # get_json_schema needs one
                lines.append(f"    {pname}: {text}")
        return "\n".join(lines)

    call.__doc__ = docstring("", {})
    rendered_params = get_json_schema(call)["function"]["parameters"]
    rendered = rendered_params["properties"]
    dropped = {k: v for k, v in params.items() if k not in ("type", "properties", "required") and rendered_params.get(k) != v}
    tool_note = ""
    if dropped.pop("additionalProperties", None) is False:
        tool_note += " Takes no other arguments."  # sopgym refuses any other argument (ERROR_BAD_ARGUMENTS)
    if dropped:
        tool_note += " Arguments: " + _keywords(dropped) + "."
    notes = {}
    for pname in ordered:
        exact = {k: v for k, v in props[pname].items() if k != "description"}
        conveyed = _conveyed(rendered[pname])
        lost = {k: v for k, v in exact.items() if not _same(exact, conveyed, k)}
        if lost:
            notes[pname] = _keywords(lost)
    call.__doc__ = docstring(tool_note, notes)
    return call


def environment_class(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
                      servers: Mapping[str, Any] | None = None) -> type[SopgymToolEnv]:
    """A class for ``GRPOTrainer(environment_factory=...)``: one public method per tool of ``env_id``
    (``submit_answer`` included), ``reset(**row)`` and ``get_reward()``.

    Args:
        env_id: a registered sopgym id (with ``servers``: the id the server serves).
        env_kwargs: passed to ``gymnasium.make`` (e.g. ``{"reward": "binary"}``).
        servers: ``{env_id: URL}`` (or ``{env_id: {"url": ..., "token": ...}}``): each instance is a
            session of that ``sopgym serve`` server instead of an env made here.

    Raises:
        ValueError: a tool or parameter name that cannot be a Python method or argument; ``servers``
            without ``env_id``, or with env kwargs (see :func:`~sopgym.integrations._common.make_env`).
        ConnectionError: the server does not answer or refuses the session.
    """
    probe = make_env(env_id, env_kwargs, servers)
    try:
        _, info = probe.reset(seed=0)
        domain = info["domain"]
    finally:
        probe.close()
    namespace: dict[str, Any] = {
        "env_id": env_id,
        "env_kwargs": dict(env_kwargs or {}),
        "servers": servers_of(servers),
        "__doc__": f"sopgym's {env_id} for TRL's environment_factory: each public method is one of its tools.",
        "__module__": __name__,
    }
    for tool in info["tools"]:
        namespace[tool["function"]["name"]] = _tool_method(tool)
    cls_name = "".join(ch for ch in domain.title() if ch.isalnum()) + "ToolEnv"
    return type(cls_name, (SopgymToolEnv,), namespace)


def environment_factories(env_ids: Sequence[str], env_kwargs: Mapping[str, Any] | None = None, *,
                          servers: Mapping[str, Any] | None = None) -> dict[str, type[SopgymToolEnv]]:
    """``{env_id: class}`` for a multi-environment ``environment_factory`` (rows pick theirs by the
    ``environment`` column that :func:`train_dataset` writes); ``servers`` as in :func:`environment_class`."""
    return {env_id: environment_class(env_id, env_kwargs, servers=servers) for env_id in env_ids}


# --------------------------------------------------------------------------------------------------
# rollout_func: sopgym's own step loop in token space
# --------------------------------------------------------------------------------------------------
#: TRL's generation of one turn for a batch of token prompts (vLLM, transformers or continuous batching, with
#: the trainer's sampling settings). TRL has no public API for it (its ``rollout_func`` docs leave generation
#: to the user), so SopgymRollout calls this private method: the extra pins ``trl>=1.16,<1.17``, the
#: signature is checked on every call, and tests/integrations/trl runs it unmocked; ``tox -e trl-latest``
#: reports when a newer TRL changes it.
TRL_GENERATE = "_generate_single_turn"
TRL_GENERATE_PARAMS = ("prompt_ids", "images", "multimodal_fields", "num_generations")


def trl_generation(trainer: Any) -> Callable[..., Any]:
    """``trainer._generate_single_turn``, after checking it takes the parameters SopgymRollout passes.

    Raises:
        RuntimeError: this TRL has no such method, or another signature (a TRL outside the pinned range).
    """
    fn = getattr(trainer, TRL_GENERATE, None)
    params = tuple(inspect.signature(fn).parameters)[: len(TRL_GENERATE_PARAMS)] if callable(fn) else None
    if not callable(fn) or params != TRL_GENERATE_PARAMS:
        import trl

        raise RuntimeError(
            f"SopgymRollout generates through {type(trainer).__name__}.{TRL_GENERATE}{TRL_GENERATE_PARAMS} (TRL 1.16, "
            f"pinned by sopgym[trl]); this TRL {trl.__version__} has {'no such method' if params is None else params}"
        )
    return fn


def _prompt_key(prompt: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps([[m["role"], m["content"]] for m in prompt], ensure_ascii=False)


class SopgymRollout:
    """A ``rollout_func`` for ``GRPOTrainer``: runs each prompt's sopgym episode to its end.

    Every prompt TRL passes (its sampler repeats each ``num_generations`` times) is looked up in the
    dataset's rows, and its episode runs through sopgym's one runner: TRL's generation for every
    running episode at once, ``env.step`` of the decoded text, the env's messages appended through
    the chat template. Returned per episode: ``prompt_ids`` (the initial chat with the tool schemas
    and the generation prompt), ``completion_ids`` (every later token: sampled turns and env
    messages), ``logprobs`` (sampling log-probs, 0.0 on env tokens), ``env_mask`` (1 on sampled
    tokens only), and ``sopgym_reward`` / ``sopgym_success`` / ``sopgym_record`` for the reward
    function :func:`sopgym_reward` and for logging.

    The completion budget is TRL's ``max_completion_length`` over all turns of an episode: a turn is
    cut where the budget ends, and an episode with no budget left is ended through
    ``end_episode("context_budget")``.

    Args:
        dataset: the training rows (a ``datasets.Dataset`` or a list of row dicts, as
            :func:`train_dataset` makes them); prompts are matched to rows by their messages.
        env_kwargs: passed to ``gymnasium.make``.
        servers: ``{env_id: URL}`` of envs served elsewhere (as in :func:`environment_class`).

    Raises:
        ValueError: two rows with the same prompt but different episodes, or rows without a prompt.
    """

    def __init__(self, dataset: Any, env_kwargs: Mapping[str, Any] | None = None, *, servers: Mapping[str, Any] | None = None):
        self.env_kwargs = dict(env_kwargs or {})
        self.servers = servers_of(servers)
        self._rows: dict[str, dict[str, Any]] = {}
        for row in dataset:
            if row.get("prompt") is None:
                raise ValueError(f"every row needs a 'prompt' (train_dataset writes it); got columns {sorted(row)}")
            key = _prompt_key(row["prompt"])
            episode = {k: row[k] for k in ROW_KEYS}
            if key in self._rows and self._rows[key] != episode:
                raise ValueError(f"two rows share a prompt but name different episodes: {self._rows[key]} and {episode}")
            self._rows[key] = episode
        self._pool = EnvPool(lambda env_id: make_env(env_id, self.env_kwargs, self.servers))

    def __call__(self, prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, list | None]:
        specs = []
        for i, prompt in enumerate(prompts):
            row = self._rows.get(_prompt_key(prompt))
            if row is None:
                raise ValueError(f"prompt {i} is not in the dataset SopgymRollout was built with (expected one of its {len(self._rows)} rows)")
            specs.append(EpisodeSpec(row["env_id"], int(row["seed"]), {"split": row["split"], "task_index": int(row["task_index"])},
                                     group_id=i))

        trl_generate = trl_generation(trainer)

        def generate(prompt_ids: list[list[int]]) -> list[TokenTurn]:
            ids, logps = trl_generate(prompt_ids, None, {}, num_generations=1)
            return [TokenTurn(list(x), list(logps[k]) if logps is not None else None) for k, x in enumerate(ids)]

        episodes = run_token_episodes(specs, self._pool, generate, trainer.processing_class, trainer.max_completion_length)
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                       "sopgym_reward", "sopgym_success", "sopgym_record")}
        for ep in episodes:
            p = ep.prompt_len
            out["prompt_ids"].append(ep.ids[:p])
            out["completion_ids"].append(ep.ids[p:])
            out["logprobs"].append(ep.logps[p:])
            out["env_mask"].append(ep.loss_mask[p:])
            infra = bool(ep.result.record["infrastructure_failure"])
            out["sopgym_reward"].append(None if infra else float(ep.result.total_reward))
            out["sopgym_success"].append(success_of(ep.result.record))  # None: a server withheld the ground truth
            out["sopgym_record"].append(ep.result.record)
        if not all(ep.has_logprobs for ep in episodes):
            return {**out, "logprobs": None}  # the backend gave none (transformers' generate): TRL computes its own
        return dict(out)

    def close(self) -> None:
        self._pool.close()


def sopgym_reward(completions: list, sopgym_reward: list[float | None], **kwargs: Any) -> list[float | None]:
    """The reward function of the ``rollout_func`` path: sopgym's return per episode, ``None`` (unscorable
    for TRL) after an infrastructure failure."""
    return list(sopgym_reward)


# --------------------------------------------------------------------------------------------------
# A launch recipe: python -m sopgym.integrations.trl --config FILE
# --------------------------------------------------------------------------------------------------
def trainer_from_config(config: Mapping[str, Any]):
    """A ``GRPOTrainer`` from a launch recipe (a mapping, e.g. ``configs/integrations/trl-cpu.yaml``).

    Keys: ``env_ids`` (list), ``path`` (``environment_factory`` or ``rollout_func``), ``num_tasks``
    (train tasks per env), ``env_kwargs``, ``servers`` (``{env_id: URL}`` of envs served elsewhere; the
    token from ``$SOPGYM_SERVE_TOKEN``), ``model`` (a folder or a hub id), ``build_tiny_model`` (a
    chat template name: build :mod:`~sopgym.integrations.tiny_model` into ``model`` first when it is
    not there), ``warm_start`` (``output_dir`` and :data:`~sopgym.integrations.tiny_model.WARM_START_KEYS`:
    sopgym's SFT of ``model`` on the oracle's TRAIN-split episodes, saved in ``output_dir``, which GRPO
    then trains; skipped when ``output_dir`` holds a warm start with the same settings), ``grpo``
    (``GRPOConfig`` keyword arguments).

    Raises:
        ValueError: an unknown key, path or warm-start setting.
    """
    from trl import GRPOConfig, GRPOTrainer

    known = {"env_ids", "path", "num_tasks", "env_kwargs", "servers", "model", "build_tiny_model", "warm_start", "grpo"}
    if set(config) - known:
        raise ValueError(f"unknown recipe keys {sorted(set(config) - known)}; expected some of {sorted(known)}")
    env_ids = list(config["env_ids"])
    env_kwargs = dict(config.get("env_kwargs") or {})
    servers = config.get("servers")
    model = str(config["model"])
    if config.get("build_tiny_model") and not (Path(model) / "config.json").exists():
        from .tiny_model import build_tiny_model

        build_tiny_model(model, env_ids, chat_template=config["build_tiny_model"])
    if config.get("warm_start"):
        model = str(_warm_started(model, env_ids, env_kwargs, dict(config["warm_start"])))
    dataset = train_dataset(env_ids, "train", int(config.get("num_tasks", 64)), env_kwargs=env_kwargs, servers=servers)
    args = GRPOConfig(**dict(config.get("grpo") or {}))
    path = config.get("path", "environment_factory")
    if path == "environment_factory":
        factory = (environment_class(env_ids[0], env_kwargs, servers=servers) if len(env_ids) == 1
                   else environment_factories(env_ids, env_kwargs, servers=servers))
        return GRPOTrainer(model=model, args=args, train_dataset=dataset, environment_factory=factory)
    if path == "rollout_func":
        return GRPOTrainer(model=model, args=args, train_dataset=dataset, reward_funcs=sopgym_reward,
                           rollout_func=SopgymRollout(dataset, env_kwargs, servers=servers))
    raise ValueError(f"path must be 'environment_factory' or 'rollout_func', got {path!r}")


def _warm_started(model: str, env_ids: list[str], env_kwargs: dict[str, Any], section: dict[str, Any]) -> Path:
    """The recipe's ``warm_start``: its ``output_dir`` once it holds ``model`` warm-started with these settings."""
    from .tiny_model import WARM_START_KEYS, warm_start

    if "output_dir" not in section:
        raise ValueError("warm_start needs output_dir: the folder the warm-started model is saved in (and GRPO loads)")
    out = Path(section.pop("output_dir"))
    wanted = {"from": model, "env_ids": env_ids, "settings": {**WARM_START_KEYS, **section}}
    done = out / "warm_start.json"
    if not (done.exists() and {k: json.loads(done.read_text()).get(k) for k in wanted} == wanted):
        warm_start(model, out, env_ids, env_kwargs=env_kwargs, **section)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Train with a launch recipe; prints one JSON line: steps, seconds per step, parameter tensors changed,
    final loss and reward, and per step the reward's mean and std and the share of groups whose rewards
    were all equal (GRPO's advantages zero)."""
    import argparse
    import time

    import yaml

    parser = argparse.ArgumentParser(prog="python -m sopgym.integrations.trl", description="GRPO with TRL on sopgym envs")
    parser.add_argument("--config", required=True, help="a launch recipe (YAML), e.g. configs/integrations/trl-cpu.yaml")
    parser.add_argument("--output-dir", default=None, help="overrides grpo.output_dir")
    args = parser.parse_args(argv)
    config = yaml.safe_load(Path(args.config).read_text())
    if args.output_dir:
        config.setdefault("grpo", {})["output_dir"] = args.output_dir
    trainer = trainer_from_config(config)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    changed = sum(not _same_tensor(a, b) for a, b in zip(before, trainer.model.parameters()))
    logs = [e for e in trainer.state.log_history if "loss" in e]
    print(json.dumps({"steps": trainer.state.global_step, "seconds_per_step": seconds / max(1, trainer.state.global_step),
                      "parameters_changed": changed, "parameters": len(before),
                      "loss": logs[-1]["loss"] if logs else None,
                      "reward": logs[-1].get("reward") if logs else None,
                      "per_step": [{k: e.get(k) for k in ("reward", "reward_std", "frac_reward_zero_std", "loss")} for e in logs]}))


def _same_tensor(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b.detach()))


if __name__ == "__main__":
    main()
