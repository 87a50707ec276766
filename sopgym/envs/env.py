"""SOPEnv: one SOP task as a multi-turn, tool-calling chat. A thin orchestrator.

Each ``step`` parses the reply (``parsing``), hands the calls to the episode's tool box
(``sopgym.sandboxes``), renders the results as tool messages (``rendering``), tracks turns and the
context budget, sets a :class:`Status`, and on submission (or truncation) scores the stored answer
and the final state with the reward (``reward``).

Observations: at ``reset`` the user message (the task inputs); after a step the tool results
rendered as text. The whole chat, system message with the SOP included, is ``info["messages"]``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded

from sopgym.record import EpisodeRecord, episode_record
from sopgym.sandboxes import Outcome, ToolBox
from sopgym.sandboxes.availability import BackendNeed, Fix, docker_problem
from sopgym.sandboxes.base import Tier
from sopgym.sandboxes.factory import make_code_runner, make_stateful_backend
from sopgym.sandboxes.schema import SchemaError, validate
from sopgym.sop_tasks.pack import SPLITS, SUBMIT_TOOL, DomainPack, Task
from sopgym.sop_tasks.registry import get_pack
from sopgym.status import (
    END_CAUSES,
    INFRASTRUCTURE,
    INVALID_ACTION,
    TRUNCATION_CAUSES,
    Status,
    worst,
)

from . import rendering
from .budgets import EPISODE_TIME, TURN_TIME, WallTimeBudget
from .env_kwargs import check_env_kwargs, warn_inprocess_code_runner
from .parsing import parse_reply
from .reward import RewardConfig, outcome_components, outcome_reward
from .spaces import AssistantAction, UnicodeText

__all__ = ["SOPEnv", "default_max_turns"]

_OUTCOME_STATUS = {
    Outcome.OK: Status.OK,
    Outcome.TOOL_ERROR: Status.ERROR_TOOL,
    Outcome.BAD_ARGUMENTS: Status.ERROR_BAD_ARGUMENTS,
    Outcome.UNKNOWN_TOOL: Status.ERROR_UNKNOWN_TOOL,
    Outcome.TIMEOUT: Status.ERROR_TIMEOUT,
    Outcome.SANDBOX_ERROR: Status.ERROR_SANDBOX,
}


def default_max_turns(human_steps: int) -> int:
    return math.ceil(1.5 * human_steps)


class SOPEnv(gym.Env):
    """A multi-turn SOP environment over one domain pack.

    Args:
        domain: a :class:`DomainPack` or its registry key (``"Name"`` or ``"namespace/Name"``).
        split: default split for ``reset`` (``train``, ``val``, ``test``); ``options["split"]`` overrides.
        reward: ``dense`` (fraction of checks right) or ``binary``.
        turn_cost: optional shaping per turn (off by default); reported as its own component.
        invalid_action_penalty: optional shaping per invalid reply (off by default).
        max_turns: assistant turns before truncation; default ``ceil(1.5 * human_steps)``.
        max_context: optional per-episode context budget, measured by ``length_fn`` over every
            message's text; exceeding it truncates with cause ``context_budget``.
        length_fn: measures text for the budget (characters by default; pass a token counter).
        max_tool_output_chars: each tool result is cut to this many characters (marked).
        sandbox: stateful backend: ``inprocess`` (default) or ``docker``.
        sandbox_options: passed to the backend.
        code_runner: runner of the verifiable tier: ``docker`` (default) or ``inprocess``. ``inprocess``
            is for trusted code only: the agent's code runs on this host as your user and can import
            sopgym and regenerate the task's answer; constructing such an env warns
            (:class:`~sopgym.envs.env_kwargs.InProcessCodeRunnerWarning`).
        max_observation_length: the longest observation, and the longest reply the env reads (a
            longer reply is an ``ERROR_PARSE`` turn; nothing in it runs).
        max_turn_seconds: wall-time budget of one reply's tool calls (None: none). The agent's code is
            stopped when it runs out; the rest of the reply is not run and the episode is truncated
            with cause ``turn_time`` (:mod:`sopgym.envs.budgets`).
        max_episode_seconds: the same over every tool call of the episode; cause ``episode_time``.
        render_mode: ``None`` or ``ansi``.

    Raises:
        ValueError: an argument of the wrong type or out of range (:func:`~sopgym.envs.env_kwargs.check_env_kwargs`).
    """

    # render_fps only silences gymnasium's checker: "ansi" renders a transcript, not frames.
    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        domain: str | DomainPack,
        *,
        split: str = "train",
        reward: str = "dense",
        turn_cost: float = 0.0,
        invalid_action_penalty: float = 0.0,
        max_turns: int | None = None,
        max_context: int | None = None,
        length_fn: Callable[[str], int] | None = None,
        max_tool_output_chars: int = 8000,
        sandbox: str = "inprocess",
        sandbox_options: Mapping[str, Any] | None = None,
        code_runner: str = "docker",
        max_observation_length: int = 1_000_000,
        max_turn_seconds: float | None = 60.0,
        max_episode_seconds: float | None = 300.0,
        render_mode: str | None = None,
    ) -> None:
        check_env_kwargs(
            domain=domain, split=split, reward=reward, turn_cost=turn_cost, invalid_action_penalty=invalid_action_penalty,
            max_turns=max_turns, max_context=max_context, length_fn=length_fn, max_tool_output_chars=max_tool_output_chars,
            sandbox=sandbox, sandbox_options=sandbox_options, code_runner=code_runner,
            max_observation_length=max_observation_length, max_turn_seconds=max_turn_seconds,
            max_episode_seconds=max_episode_seconds, render_mode=render_mode,
        )
        self.pack = domain if isinstance(domain, DomainPack) else get_pack(domain)
        if code_runner == "inprocess" and self.pack.verifiable is not None:
            warn_inprocess_code_runner(self.pack.env_id)
        self.split = split
        self.reward_config = RewardConfig(reward, turn_cost, invalid_action_penalty)
        self.max_turns = max_turns or default_max_turns(self.pack.human_steps)
        self.max_context = max_context
        self.length_fn = length_fn or len
        self.max_tool_output_chars = max_tool_output_chars
        self.sandbox = sandbox
        self.sandbox_options = dict(sandbox_options or {})
        self.code_runner = code_runner
        self.wall_time = WallTimeBudget(max_turn_seconds, max_episode_seconds)
        self.render_mode = render_mode

        self.observation_space: UnicodeText = UnicodeText(max_observation_length)
        self.action_space: AssistantAction = AssistantAction(max_observation_length)

        self._submit_schema = self.pack.submit_schema()
        self._tools = [t.openai_schema() for t in self.pack.tools] + [self.pack.submit_spec().openai_schema()]
        self._system = rendering.system_message(self.pack)
        self._toolbox: ToolBox | None = None
        self._task: Task | None = None
        self._done = True

    # -- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"split", "task_id", "task_index"}
        if unknown:
            raise ValueError(f"reset options may contain split, task_id, task_index; got {sorted(unknown)}")
        task = self._pick_task(options)
        first = self._first_messages(task)
        bound = self.observation_space.max_length
        if len(first[-1]["content"]) > bound:
            raise ValueError(
                f"task {task.task_id} cannot be posed: its first observation (the user message with the task's "
                f"inputs) has {len(first[-1]['content']):,} characters, more than this env's observation bound of "
                f"{bound:,} (max_observation_length); pass a larger max_observation_length to pose it")
        if self._toolbox is None:
            self._toolbox = self._make_toolbox()
        self._toolbox.start_episode(self.pack.sandbox_episode(task))

        self._task = task
        self._done = False
        self._turn = 0
        self._answer: dict[str, Any] | None = None
        self._turn_statuses: list[str] = []
        self._num_calls = 0
        self._num_calls_ok = 0
        self._infra_failure = False
        self.wall_time.start_episode()
        self._messages: list[dict[str, Any]] = first
        self._context_used = sum(self.length_fn(m["content"]) for m in first)
        info = {
            "task_id": task.task_id,
            "domain": self.pack.name,
            "env_id": self.pack.env_id,
            "split": task.split,
            "difficulty": task.difficulty,
            "messages": list(self._messages),
            "tools": self._tools,
            "max_turns": self.max_turns,
            "license": self.pack.license,
            "training_allowed": self.pack.training_allowed,
            "status": Status.OK.value,
            "turn": 0,
        }
        return first[-1]["content"], info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise ResetNeeded("step() called before reset(): call reset() first")
        if self._done:
            raise ResetNeeded("step() called after the episode ended: call reset() first")
        self._turn += 1
        self.wall_time.start_turn()
        reply = parse_reply(action, self.action_space.max_length)
        assistant, results, calls, statuses, submitted = self._run_calls(reply)
        new_messages = [assistant, *results]
        self._messages.extend(new_messages)
        self._context_used += sum(self.length_fn(m["content"] or "") for m in new_messages)
        self._context_used += self.length_fn(rendering.tool_calls_text(assistant))

        status = Status.SUBMITTED if submitted else worst(statuses)
        self._turn_statuses.append(status.value)
        terminated = submitted
        truncation_cause = None
        if not terminated:
            if status is Status.ERROR_SANDBOX:
                truncation_cause = "sandbox"
            elif self.wall_time.spent is not None:
                truncation_cause = self.wall_time.spent
            elif self._turn >= self.max_turns:
                truncation_cause = "max_turns"
            elif self.max_context is not None and self._context_used > self.max_context:
                truncation_cause = "context_budget"
        truncated = truncation_cause is not None
        step_status = status if truncation_cause is None else TRUNCATION_CAUSES.get(truncation_cause, status)

        components = self._shaping(status)
        reward = sum(components.values())
        final_state = None
        if terminated or truncated:
            self._done = True
            final_state = self._final_state()
            outcome = outcome_components(self._answer, self._task.answer, self.pack.output_fields, final_state, self._task.expected_state)
            components.update(outcome)
            reward += outcome_reward(self.reward_config.kind, outcome)

        observation = rendering.observation(results)
        info = {
            "task_id": self._task.task_id,
            "status": step_status.value,
            "turn_status": status.value,
            "status_message": rendering.status_message(status, calls, reply.error, self._budget_note(truncation_cause)),
            "messages": list(self._messages),
            "calls": calls,
            "turn": self._turn,
            "context_used": self._context_used,
            "reward_components": components,
            "truncation_cause": truncation_cause,
            "infrastructure_failure": self._infra_failure,
        }
        if self._done:
            info["episode"] = self._episode_record(terminated, truncated, truncation_cause, reward, components, final_state)
        return observation, float(reward), terminated, truncated, info

    def end_episode(self, cause: str = "stopped", message: str = "") -> tuple[str, float, bool, bool, dict[str, Any]]:
        """End the running episode now, without another turn, and score it like an unanswered one.

        For harnesses and RL libraries, never for the model's reply (a reply cannot reach this method):
        a trainer whose token budget leaves no room for another turn, a library that stops calling
        tools, or a model server that failed. The answer is whatever was submitted, so nothing (an
        episode that had submitted has already ended): every field and state check scores 0 and no
        shaping is added. The episode is truncated with ``truncation_cause=cause`` and the status of
        :data:`sopgym.status.END_CAUSES`; ``inference`` and ``env_lost`` mark an infrastructure
        failure (excluded from success rates and advantages), the other causes are the policy's.

        Args:
            cause: ``context_budget``, ``stopped``, ``inference`` or ``env_lost`` (the env worker
                running the episode died; a remote pool ends the episode on a fresh env of its spec).
            message: why, for ``info["status_message"]`` (e.g. the server's error).

        Returns:
            ``(observation, reward, terminated, truncated, info)`` as :meth:`step` returns at an
            episode's end: ``""``, the outcome reward, ``False``, ``True``, and ``info`` with the
            ``episode`` record.

        Raises:
            ValueError: an unknown cause.
            gymnasium.error.ResetNeeded: no episode is running.
        """
        if cause not in END_CAUSES:
            raise ValueError(f"end_episode cause must be one of {sorted(END_CAUSES)}, got {cause!r}")
        if self._task is None or self._done:
            raise ResetNeeded("end_episode() called with no episode running: call reset() first")
        status = END_CAUSES[cause]
        if status in INFRASTRUCTURE:
            self._infra_failure = True
        self._done = True
        final_state = self._final_state()
        components = outcome_components(self._answer, self._task.answer, self.pack.output_fields, final_state, self._task.expected_state)
        reward = outcome_reward(self.reward_config.kind, components)
        info: dict[str, Any] = {
            "task_id": self._task.task_id,
            "status": status.value,
            "turn_status": None,
            "status_message": message or f"episode ended by the harness ({cause})",
            "messages": list(self._messages),
            "calls": [],
            "turn": self._turn,
            "context_used": self._context_used,
            "reward_components": components,
            "truncation_cause": cause,
            "infrastructure_failure": self._infra_failure,
        }
        info["episode"] = self._episode_record(False, True, cause, reward, components, final_state)
        return "", float(reward), False, True, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._task is None:
            return None
        return rendering.transcript(self._messages)

    def backend_needs(self) -> list[BackendNeed]:
        """The backends this env's episodes will need, checked before a run starts
        (:mod:`sopgym.bench.preflight`): Docker for the code runner (``code_runner="docker"``, when the
        pack has code tools) and for ``sandbox="docker"`` (when it has stateful tools)."""
        needs = []
        if self.pack.verifiable is not None and self.code_runner == "docker":
            code_tools = ", ".join(t.name for t in self.pack.tools if t.tier is Tier.VERIFIABLE)
            needs.append(BackendNeed("Docker", f"its code runner for {code_tools}", docker_problem, (Fix(
                {"code_runner": "inprocess"}, "runs the agent's code on this host as your user: trusted code only"),)))
        if self.pack.program is not None and self.sandbox == "docker":
            needs.append(BackendNeed("Docker", "its stateful tools, sandbox='docker'", docker_problem, (Fix(
                {"sandbox": "inprocess"}, "the stateful tools' database in this process"),)))
        return needs

    def close(self) -> None:
        if self._toolbox is not None:
            self._toolbox.close()
            self._toolbox = None
        self._task = None
        self._done = True
        super().close()

    # -- internals -----------------------------------------------------------------------------
    def _pick_task(self, options: Mapping[str, Any]) -> Task:
        """The task ``reset`` poses: ``task_id`` (``<domain>/<split>/<index>``), else ``task_index``
        of ``split``, else a seeded draw from ``split``. Every malformed option is a ``ValueError``
        naming the expected form (never a bare unpacking or ``int()`` error)."""
        name = self.pack.name
        sizes = {s: self.pack.split_sizes[s] for s in SPLITS}
        posable = [s for s in SPLITS if sizes[s] != 0]

        def index_range(split: str) -> str:
            return "an int >= 0" if sizes[split] is None else f"an int in [0, {sizes[split]})"

        if "task_id" in options:
            task_id = options["task_id"]
            form = f"'{name}/<split>/<index>' with <split> one of {posable} (e.g. '{name}/{posable[0]}/0')"
            if "task_index" in options:
                raise ValueError(f"pass either task_id or task_index, not both; got task_id={task_id!r} and "
                                 f"task_index={options['task_index']!r}")
            parts = task_id.rsplit("/", 2) if isinstance(task_id, str) else []
            if len(parts) != 3 or not parts[2].isdigit():
                raise ValueError(f"task_id must be {form}, got {task_id!r}")
            domain, split, index = parts[0], parts[1], int(parts[2])
            if domain != name:
                raise ValueError(f"task_id {task_id!r} names domain {domain!r}; this env poses {name!r} tasks: {form}")
            if split not in SPLITS or sizes[split] == 0:
                raise ValueError(f"task_id {task_id!r} names split {split!r}; expected {form}")
            if "split" in options and options["split"] != split:
                raise ValueError(f"task_id {task_id!r} is in split {split!r} but options['split'] is "
                                 f"{options['split']!r}; pass a matching split or none")
            if (size := sizes[split]) is not None and index >= size:
                raise ValueError(f"task_id {task_id!r}: index of split {split!r} must be {index_range(split)}, got {index}")
            return self.pack.task(split, index)
        split = options.get("split", self.split)
        if split not in SPLITS:
            raise ValueError(f"options['split'] must be one of {list(SPLITS)}, got {split!r}")
        if sizes[split] == 0:
            raise ValueError(f"split {split!r} of {self.pack.key} has no tasks; splits with tasks: {posable}")
        if "task_index" in options:
            index = options["task_index"]
            # Integers and numpy integers have __index__; bool is an int subclass but never an index.
            if isinstance(index, bool) or not hasattr(type(index), "__index__"):
                raise ValueError(f"options['task_index'] must be {index_range(split)} (split {split!r}), "
                                 f"got {index!r} of type {type(index).__name__}")
            index = index.__index__()
            if index < 0 or (sizes[split] is not None and index >= sizes[split]):
                raise ValueError(f"options['task_index'] must be {index_range(split)} (split {split!r}), got {index}")
            return self.pack.task(split, index)
        high = sizes[split] if sizes[split] is not None else 2**31 - 1
        return self.pack.task(split, int(self.np_random.integers(0, high)))

    def _first_messages(self, task: Task) -> list[dict[str, Any]]:
        """The chat an episode starts with; its last message, the user's, is the first observation."""
        return [self._system, {"role": "user", "content": self.pack.user_message(task.inputs)}]

    def _make_toolbox(self) -> ToolBox:
        stateful = None
        if self.pack.program is not None:
            stateful = make_stateful_backend(self.sandbox, **self.sandbox_options)
        code_runner = None
        if self.pack.verifiable is not None:
            code_runner = functools.partial(make_code_runner, self.code_runner)
        return ToolBox(self.pack.tools, stateful=stateful, verifiable=self.pack.verifiable, code_runner=code_runner)

    def _run_calls(self, reply):
        """Run the reply's calls in order. Returns (assistant msg, result msgs, call records, statuses, submitted)."""
        tool_calls, results, calls, statuses = [], [], [], []
        submitted = False
        if reply.error is not None:
            statuses.append(Status.ERROR_PARSE)
            results.append(rendering.feedback(f"Error: {reply.error}"))
        for i, call in enumerate(reply.calls):
            call_id = f"call_{self._turn}_{i}"
            if call.error is not None:
                statuses.append(Status.ERROR_PARSE)
                calls.append({"id": call_id, "name": call.name, "arguments": None, "status": Status.ERROR_PARSE.value})
                results.append(rendering.feedback(f"Error: {call.error}"))
                continue
            tool_calls.append(rendering.tool_call_entry(call_id, call.name, call.arguments))
            if submitted or self._infra_failure:
                text = "Not run: the episode already ended in this reply."
                status = Status.ERROR_TOOL
            elif self.wall_time.spent is not None:
                text = f"Not run: {self.wall_time.describe()}; the episode ends."
                status = Status.ERROR_TIMEOUT
            elif call.name == SUBMIT_TOOL:
                status, text = self._submit(call.arguments)
                submitted = status is Status.SUBMITTED
            else:
                self._num_calls += 1
                assert self._toolbox is not None  # reset() made it
                result = self.wall_time.run(functools.partial(self._toolbox.call, call.name, call.arguments))
                status = _OUTCOME_STATUS[result.outcome]
                if result.ok:
                    self._num_calls_ok += 1
                if status is Status.ERROR_SANDBOX:
                    self._infra_failure = True
                text = rendering.cap(result.render(), self.max_tool_output_chars)
            statuses.append(status)
            calls.append({"id": call_id, "name": call.name, "arguments": call.arguments, "status": status.value})
            results.append({"role": "tool", "tool_call_id": call_id, "name": call.name, "content": text})
        if not reply.calls and reply.error is None:
            statuses.append(Status.NO_TOOL_CALL)
            results.append(rendering.feedback(rendering.NO_TOOL_CALL_TEXT))
        assistant = {"role": "assistant", "content": reply.content}
        if tool_calls:
            assistant["tool_calls"] = tool_calls
        return assistant, results, calls, statuses, submitted

    def _budget_note(self, truncation_cause: str | None) -> str | None:
        return self.wall_time.describe() if truncation_cause in (TURN_TIME, EPISODE_TIME) else None

    def _submit(self, arguments: Any) -> tuple[Status, str]:
        try:
            answer = validate(arguments, self._submit_schema)
        except SchemaError as exc:
            return Status.ERROR_BAD_ARGUMENTS, f"Error: invalid arguments for {SUBMIT_TOOL}: {exc}"
        self._answer = answer
        return Status.SUBMITTED, "Answer submitted."

    def _shaping(self, status: Status) -> dict[str, float]:
        comps: dict[str, float] = {}
        if not (self.reward_config.turn_cost or self.reward_config.invalid_action_penalty):
            return comps
        if self.reward_config.turn_cost:
            comps["shaping/turn_cost"] = -self.reward_config.turn_cost
        if self.reward_config.invalid_action_penalty:
            comps["shaping/invalid_action"] = -self.reward_config.invalid_action_penalty if status in INVALID_ACTION else 0.0
        return comps

    def _final_state(self) -> dict[str, Any] | None:
        if self.pack.program is None or self._infra_failure:
            return None
        assert self._toolbox is not None  # reset() made it
        return self._toolbox.snapshot()

    def _episode_record(self, terminated, truncated, cause, reward, components, final_state) -> EpisodeRecord:
        """What the independent evaluator reads (live, or from RecordTrajectory's JSONL)."""
        task = self._task
        assert task is not None, "an episode record before reset()"
        return episode_record(
            env_id=self.pack.env_id, domain=self.pack.name, task_id=task.task_id, split=task.split,
            difficulty=task.difficulty, answer=self._answer, expected=task.answer,
            fields=[{"name": f.name, "type": f.type, "enum": list(f.enum) if f.enum is not None else None,
                     "nullable": f.nullable} for f in self.pack.output_fields],
            final_state=final_state, expected_state=task.expected_state, turns=self._turn, statuses=self._turn_statuses,
            num_tool_calls=self._num_calls, num_tool_calls_ok=self._num_calls_ok, terminated=terminated,
            truncated=truncated, truncation_cause=cause, infrastructure_failure=self._infra_failure, reward=reward,
            reward_components=components)
