"""The one episode runner: reset, ask a policy, step, keep the record. Every caller uses it.

The evaluator's runs (``sopgym eval``), the trainer's rollouts and its SFT demonstrations, domain
validation (``sopgym validate-domain``) and benchmark runs of real models all run episodes through
:func:`run_episodes`; policies differ, the loop does not.

* **Specs** (:class:`~.specs.EpisodeSpec`, in :mod:`.specs`) say which episode: env id, reset seed
  and options, group.
* **Agents** answer for many episodes at once (:class:`BatchAgent`): one ``act`` call per turn
  covers every running episode, so a model can generate for all of them in one batch. A scripted
  per-episode policy (``reset(info)``, ``act(observation, info)``) runs through :class:`PolicyAgent`.
  An agent that cannot or will not answer for an episode returns :class:`~.specs.EndEpisode` for it (its
  token budget is spent, the library stopped, the model server failed); the env then scores it
  like an unanswered episode (``SOPEnv.end_episode``), so every episode ends with a record.
* **Env pools** (:class:`~.pools.EnvPool`, in :mod:`.pools`) own the env instances and step them; the
  runner only talks to the pool's ``reset``/``step``/``end`` over slots, so a pool whose envs live
  elsewhere (other processes or hosts) can stand in for the in-process one:
  :class:`~.ray_pool.RayEnvPool` (env workers as Ray actors); :func:`make_env_pool` builds either.
  Neither pool imports this module, so the pools and the loop have no import cycle.
* **Results** (:class:`EpisodeResult`) keep the env's episode record (what the evaluator reads), the
  turns, and the return; success is only ever the evaluator's :func:`score_record` of the record
  (the one thing this package takes from :mod:`sopgym.evaluation`: :mod:`~sopgym.evaluation.metrics`,
  which imports nothing of the envs or of this package).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from sopgym.evaluation.metrics import EpisodeScore, score_record

from .pools import EnvPool, StepOutput
from .progress import ProgressBar
from .specs import EndEpisode, EpisodeSpec

__all__ = [
    "Turn", "EpisodeResult", "BatchAgent", "PolicyAgent", "POOL_BACKENDS", "make_env_pool", "builtin_policy_agent",
    "run_episodes", "run_episode", "trajectory_lines",
]


# --------------------------------------------------------------------------------------------------
# What comes back
# --------------------------------------------------------------------------------------------------
@dataclass
class Turn:
    """One step of an episode, as the env answered it."""

    action: Any
    """The reply exactly as given to ``env.step`` (text or an assistant-message dict)."""
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    status: str
    """``info["status"]``: the step's status (a truncation status on a truncating last turn)."""
    turn_status: str | None
    """``info["turn_status"]``: what the reply itself did (counted as invalid or not)."""
    calls: list[dict[str, Any]]
    """``info["calls"]``: the parsed calls with their statuses."""
    new_messages: list[dict[str, Any]]
    """The messages the env added after the reply's own assistant message (tool results, feedback)."""


@dataclass
class EpisodeResult:
    """A finished episode."""

    index: int
    """Position of the spec in the list given to :func:`run_episodes`."""
    spec: EpisodeSpec
    reset_observation: str
    reset_info: dict[str, Any]
    """``info`` from ``reset``: the task id, the initial messages and tool schemas, ..."""
    turns: list[Turn]
    record: dict[str, Any]
    """The env's ``info["episode"]`` record: what the evaluator scores (always a valid record)."""
    final_info: dict[str, Any]
    """``info`` of the last step (or of ``end_episode``)."""
    total_reward: float
    """The return: the sum of every step's reward (shaping included)."""
    ended_by: EndEpisode | None = None
    """Set when the agent ended the episode instead of the env."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Per-episode data an agent adds (e.g. token counts and latencies of a model run)."""

    @cached_property
    def score(self) -> EpisodeScore:
        """The evaluator's judgement of :attr:`record` (the only definition of success)."""
        return score_record(self.record, where=f"episode {self.index} ({self.spec.env_id})")

    @property
    def success(self) -> bool:
        return self.score.success

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The whole chat at the end, as the env rendered it."""
        return self.final_info.get("messages") or self.reset_info.get("messages") or []


# --------------------------------------------------------------------------------------------------
# Agents
# --------------------------------------------------------------------------------------------------
class BatchAgent(Protocol):
    """Answers every running episode of a batch at once. Slots identify running episodes.

    ``start`` is called when an episode begins in a slot; ``act`` once per round with every running
    slot, returning one reply (or :class:`EndEpisode`) per slot in the same order; ``observe`` after
    each step or end with what the env answered (``turn`` is None when the episode was ended by
    :class:`EndEpisode`) and, when the episode is over, its :class:`EpisodeResult` (the slot is then
    free; ``result`` is None while the episode runs).
    """

    def start(self, slot: int, spec: EpisodeSpec, observation: str, info: dict[str, Any]) -> None: ...

    def act(self, slots: list[int], observations: list[str], infos: list[dict[str, Any]]) -> list[Any]: ...

    def observe(self, slot: int, turn: Turn | None, info: dict[str, Any], result: EpisodeResult | None) -> None: ...


class PolicyAgent:
    """A per-episode policy (``reset(info)``, ``act(observation, info)``) as a :class:`BatchAgent`.

    Args:
        make_policy: ``spec -> policy``, called at the start of each episode (a policy holds the state
            of one episode, e.g. the oracle's solver).
    """

    def __init__(self, make_policy: Callable[[EpisodeSpec], Any]):
        self.make_policy = make_policy
        self._policies: dict[int, Any] = {}

    def start(self, slot: int, spec: EpisodeSpec, observation: str, info: dict[str, Any]) -> None:
        policy = self.make_policy(spec)
        policy.reset(info)
        self._policies[slot] = policy

    def act(self, slots: list[int], observations: list[str], infos: list[dict[str, Any]]) -> list[Any]:
        return [self._policies[s].act(o, i) for s, o, i in zip(slots, observations, infos)]

    def observe(self, slot: int, turn: Turn | None, info: dict[str, Any], result: EpisodeResult | None) -> None:
        if result is not None:
            self._policies.pop(slot, None)


def builtin_policy_agent(name: str, **kwargs: Any) -> PolicyAgent:
    """A :class:`PolicyAgent` of a built-in policy (:mod:`sopgym.envs.policies`); stochastic policies
    (those taking a ``seed``) are seeded with each episode's spec seed, so samples of a task differ
    and a run is reproducible.

    Raises:
        ValueError: an unknown policy name.
    """
    from sopgym.envs.policies import POLICIES, make_policy

    if name not in POLICIES:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {name!r}")
    seeded = "seed" in inspect.signature(POLICIES[name]).parameters

    def make(spec: EpisodeSpec):
        return make_policy(name, seed=spec.seed, **kwargs) if seeded else make_policy(name, **kwargs)

    return PolicyAgent(make)


# --------------------------------------------------------------------------------------------------
# Which env pool
# --------------------------------------------------------------------------------------------------
POOL_BACKENDS = ("inprocess", "ray")


def make_env_pool(
    make_env: Callable[[str], Any],
    backend: str = "inprocess",
    num_workers: int = 2,
    address: str | None = None,
    cpus_per_worker: float = 1.0,
    resources: Mapping[str, float] | None = None,
) -> Any:
    """The env pool a run asked for: in-process, or env workers on Ray.

    Args:
        make_env: ``env_id -> env``.
        backend: ``inprocess`` (:class:`EnvPool`; the other arguments are unused) or ``ray``
            (:class:`~.ray_pool.RayEnvPool` with ``num_workers`` actors; needs the ``ray`` extra).
        num_workers, address, cpus_per_worker, resources: see :class:`~.ray_pool.RayEnvPool`.

    Returns:
        A pool with ``reset``/``step``/``end``/``close``.

    Raises:
        ValueError: an unknown backend or bad worker settings.
    """
    if backend == "inprocess":
        return EnvPool(make_env)
    if backend == "ray":
        from .ray_pool import RayEnvPool

        return RayEnvPool(make_env, num_workers, address=address, cpus_per_worker=cpus_per_worker, resources=resources)
    raise ValueError(f"env pool backend must be one of {POOL_BACKENDS}, got {backend!r}")


# --------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------
@dataclass
class _Running:
    index: int
    spec: EpisodeSpec
    reset_observation: str
    reset_info: dict[str, Any]
    observation: str
    info: dict[str, Any]
    num_messages: int
    turns: list[Turn] = field(default_factory=list)
    total_reward: float = 0.0


def run_episodes(
    specs: Sequence[EpisodeSpec],
    agent: BatchAgent,
    pool: EnvPool,
    *,
    concurrency: int | None = None,
    on_result: Callable[[EpisodeResult], None] | None = None,
    progress: bool | ProgressBar = False,
) -> list[EpisodeResult]:
    """Run every spec to the end of its episode; at most ``concurrency`` at once.

    Each round asks the agent once for every running episode, steps the envs (or ends the episodes
    the agent ended), tells the agent what happened, and starts the next specs in freed slots.

    Args:
        specs: the episodes, run in order (results come back in the same order).
        agent: answers for running episodes (:class:`PolicyAgent` for a scripted policy).
        pool: steps the envs.
        concurrency: running episodes at most (None: all specs at once, one batch).
        on_result: called with each result as soon as its episode ends (e.g. to write it to disk).
        progress: draw a progress bar with an ETA on stderr (or update and close the given one).

    Returns:
        One :class:`EpisodeResult` per spec, in spec order.

    Raises:
        ValueError: a bad ``concurrency``, or an agent that answered the wrong number of slots.
    """
    if concurrency is None:
        concurrency = max(1, len(specs))
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
    pending = deque(enumerate(specs))
    free = list(range(min(concurrency, len(specs))))
    running: dict[int, _Running] = {}
    results: list[EpisodeResult | None] = [None] * len(specs)
    bar = _progress_bar(progress, specs)
    try:
        while pending or running:
            _start_episodes(pool, agent, pending, free, running)
            slots = sorted(running)
            replies = agent.act(slots, [running[s].observation for s in slots], [running[s].info for s in slots])
            if len(replies) != len(slots):
                raise ValueError(f"agent.act answered {len(replies)} episodes, expected {len(slots)} (one per slot)")
            for (slot, reply), output in _play(pool, slots, replies):
                run = running[slot]
                turn = _advance(run, reply, output)
                _, _, terminated, truncated, info = output
                if not (terminated or truncated):
                    agent.observe(slot, turn, info, None)
                    continue
                result = _result(run, info, reply if isinstance(reply, EndEpisode) else None)
                results[run.index] = result
                agent.observe(slot, turn, info, result)
                del running[slot]
                free.append(slot)
                if on_result is not None:
                    on_result(result)
                if bar is not None:
                    bar.update()
            free.sort()
    finally:
        if bar is not None:
            bar.close()
    return [r for r in results if r is not None]  # every slot is filled once the loop ends


def _progress_bar(progress: bool | ProgressBar, specs: Sequence[EpisodeSpec]) -> ProgressBar | None:
    """The bar :func:`run_episodes` was given, a new one if it was asked for one (and has specs), or none."""
    if isinstance(progress, ProgressBar):
        return progress
    return ProgressBar(len(specs)) if progress and specs else None


def _start_episodes(pool: EnvPool, agent: BatchAgent, pending: deque[tuple[int, EpisodeSpec]], free: list[int],
                    running: dict[int, _Running]) -> None:
    """Reset the next pending specs into the free slots (lowest first), in one call to the pool, and
    tell the agent of each new episode."""
    starts = []
    while free and pending:
        starts.append((free.pop(0), *pending.popleft()))
    if starts:
        outs = pool.reset([(slot, spec) for slot, _, spec in starts])
        for (slot, index, spec), (observation, info) in zip(starts, outs):
            running[slot] = _Running(index, spec, observation, info, observation, info, len(info.get("messages") or ()))
            agent.start(slot, spec, observation, info)


def _play(pool: EnvPool, slots: list[int], replies: Sequence[Any]) -> list[tuple[tuple[int, Any], StepOutput]]:
    """Step the envs with the agent's replies, then end the episodes it ended (:class:`EndEpisode`):
    ``((slot, reply), output)`` for each, the steps first."""
    ends = [(s, r) for s, r in zip(slots, replies) if isinstance(r, EndEpisode)]
    steps = [(s, r) for s, r in zip(slots, replies) if not isinstance(r, EndEpisode)]
    outcomes = list(zip(steps, pool.step(steps))) if steps else []
    outcomes += list(zip(ends, pool.end(ends))) if ends else []
    return outcomes


def _advance(run: _Running, reply: Any, output: StepOutput) -> Turn | None:
    """Note one step's output in its running episode. Returns the turn played (None when the agent
    ended the episode instead of replying)."""
    observation, reward, terminated, truncated, info = output
    turn = None
    messages = info.get("messages") or []
    if not isinstance(reply, EndEpisode):
        # messages[num_messages] is the env's rendering of this reply; what follows is new.
        turn = Turn(reply, observation, float(reward), bool(terminated), bool(truncated),
                    str(info.get("status")), info.get("turn_status"), list(info.get("calls") or ()),
                    [dict(m) for m in messages[run.num_messages + 1:]])
        run.turns.append(turn)
    run.num_messages = len(messages)
    run.total_reward += float(reward)
    run.observation, run.info = observation, info
    return turn


def _result(run: _Running, info: dict[str, Any], ended_by: EndEpisode | None) -> EpisodeResult:
    """The result of an episode that ended with ``info`` (its last step's).

    Raises:
        ValueError: the env emitted no ``info["episode"]`` record.
    """
    if "episode" not in info:
        raise ValueError(
            f"{run.spec.env_id}: the episode ended without info['episode'] (the record the evaluator "
            f"reads); expected every env to emit one at its last step"
        )
    return EpisodeResult(run.index, run.spec, run.reset_observation, run.reset_info, run.turns, dict(info["episode"]), info,
                         run.total_reward, ended_by)


def run_episode(env: Any, policy: Any, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> EpisodeResult:
    """Run one episode of ``env`` (left open) with a per-episode policy: the synchronous runner.

    Example:
        >>> env = gymnasium.make("sopgym/WarehouseReceiving-v0")  # doctest: +SKIP
        >>> result = run_episode(env, make_policy("oracle"), seed=0, options={"split": "test"})  # doctest: +SKIP
        >>> result.success  # doctest: +SKIP
        True
    """
    env_id = env.spec.id if getattr(env, "spec", None) is not None else type(env.unwrapped).__name__
    spec = EpisodeSpec(env_id, seed, options)
    return run_episodes([spec], PolicyAgent(lambda _: policy), EnvPool.of(env))[0]


# --------------------------------------------------------------------------------------------------
# Trajectory files
# --------------------------------------------------------------------------------------------------
def trajectory_lines(result: EpisodeResult, episode_index: int | None = None) -> Iterator[dict[str, Any]]:
    """The JSONL lines of one finished episode, in :class:`~sopgym.envs.wrappers.RecordTrajectory`'s
    format (``reset``, one ``step`` per turn, ``episode``), so ``sopgym show`` and
    :func:`load_records` read runner output and wrapper output alike.

    The reset line also holds the system message (``system``: the SOP as the agent read it). What an
    agent added to :attr:`EpisodeResult.extra` is kept: ``extra["turns"]`` (one entry per
    turn, e.g. a model's tokens, latency and ``finish_reason``) as each step line's ``agent``, and
    the other keys as the episode line's ``extra`` (the evaluator ignores both).
    """
    from sopgym.trajectory import episode_line, reset_line, step_line

    index = result.index if episode_index is None else episode_index
    spec = result.spec
    per_turn = result.extra.get("turns")
    if per_turn is not None and len(per_turn) != len(result.turns):
        raise ValueError(f"extra['turns'] has {len(per_turn)} entries for {len(result.turns)} turns; expected one per turn")
    line = reset_line(index, result.reset_info.get("task_id"), spec.seed,
                      dict(spec.options) if spec.options is not None else None, result.reset_observation)
    first = (result.reset_info.get("messages") or [{}])[0]
    if first.get("role") == "system":
        line["system"] = first.get("content")  # the SOP the agent was given, for `sopgym show`
    yield line
    for number, turn in enumerate(result.turns, start=1):
        tool_results = [m for m in turn.new_messages if m.get("role") == "tool"]
        line = step_line(index, number, turn.observation, turn.action, turn.calls, tool_results, turn.reward,
                         turn.status, turn.terminated, turn.truncated)
        if per_turn is not None:
            line["agent"] = per_turn[number - 1]
        yield line
    line = episode_line(index, result.record)
    extra = {key: value for key, value in result.extra.items() if key != "turns"}
    if extra:
        line["extra"] = extra
    yield line
