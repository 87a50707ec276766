"""The RL steps' rollout batches, sampled when a step asks (``rollout.mode: sync``) or ahead of it (``async``).

Weight versions count RL steps: the weights after ``s`` RL steps are version ``s`` (after SFT or a
resume at step ``s``: version ``s``). Batch ``b`` is the one step ``b`` trains on; every turn the
engine samples is tagged with the version that sampled it (``Sample.weights_version``, kept in
``Episode.turn_versions``), and a sample's staleness is the learner's version when it trains on it
minus its oldest turn's version.

* ``sync``: step ``b`` draws its batch in this thread with version ``b``, the weights it trains
  (staleness 0). The engine takes each step's new weights when the step publishes them.
* ``async``: a producer thread (rank 0) draws batch ``b`` with version ``max(start, b - K)`` exactly
  (``K = rollout.max_staleness``), while the learner trains earlier batches. It waits until that
  version is published, loads it into the engine and samples the whole batch with it: a running
  episode finishes on the weights it started with, and the members of a group all come from one
  version. Which weights sample a batch never depends on timing, so an async run is as reproducible
  as a sync one (the same seed gives the same run, whatever the engine's or the envs' latency), and
  with ``K = 0`` it is the sync run bit for bit. The learner still checks every sample against the
  bound before it reaches a gradient (:func:`within_staleness`): a group with a sample older than
  ``K`` is dropped and counted, never trained on.

The producer owns the engine and the envs while it runs; an evaluation takes them with
:meth:`RolloutStream.exclusive` (it waits for the batch in progress and loads the newest weights).
It owns the rollout state too (the sampling generator, the task cursor, the task success estimates
and the curriculum); a checkpoint keeps that state as it was before the first batch the learner has
not trained on (:meth:`RolloutStream.resume_state`): batches sampled ahead are discarded on a resume,
counted, and drawn again (with the newest weights: the first ``K`` batches after a resume are less
stale than ``K``). An error in the producer ends the run: the learner raises it when it asks for the
next batch.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from sopgym.policy.engine import RolloutEngine, Sample

from .episodes import Episode

__all__ = ["Batch", "RolloutState", "RolloutStream", "RolloutStreamError", "TaggedEngine", "staleness",
           "within_staleness"]


@dataclass
class RolloutState:
    """What the rollouts carry from one batch to the next (saved in a checkpoint, restored on a resume)."""

    generator_state: torch.Tensor
    cursor: int
    task_success: dict[str, Any]
    curriculum: dict[str, Any] | None


@dataclass
class Batch:
    """One step's rollouts, as the producer (or the step itself, in sync mode) drew them."""

    index: int
    """The RL step that trains on it."""
    episodes: list[Episode]
    extra_groups: int
    """Groups drawn beyond ``rollout.batch_size`` (dynamic sampling)."""
    metrics: dict[str, float]
    """The rollout bookkeeping after it (``tasks/*``, ``curriculum/*``)."""
    cursor: int
    """The task cursor after it."""
    version: int
    """The weight version that sampled it."""
    seconds: float = 0.0
    """Drawing it (engine and envs)."""
    engine_idle_s: float = 0.0
    """How long the engine waited before it: for its weights, or (sync) for the learner's update."""
    learner_idle_s: float = 0.0
    """How long the learner waited for it (filled by :meth:`RolloutStream.batch`)."""


class RolloutStreamError(RuntimeError):
    """The rollout producer failed (its exception is the cause), or stopped without the batch asked for."""


class TaggedEngine:
    """An engine whose samples name the weight version that sampled them (``Sample.weights_version``)."""

    def __init__(self, engine: RolloutEngine, version: int):
        self.engine, self.version = engine, version

    def generate(self, prompts: list[list[int]], max_new_tokens: list[int] | int, temperature: float = 1.0,
                 top_p: float = 1.0, generator: torch.Generator | None = None) -> list[Sample]:
        samples = self.engine.generate(prompts, max_new_tokens, temperature=temperature, top_p=top_p, generator=generator)
        for sample in samples:
            sample.weights_version = self.version
        return samples


def staleness(ep: Episode, version: int) -> int:
    """``version`` minus the episode's oldest turn's version (0 for an episode without sampled turns)."""
    return version - min(ep.turn_versions) if ep.turn_versions else 0


def within_staleness(episodes: list[Episode], version: int, max_staleness: int
                     ) -> tuple[list[Episode], list[Episode], dict[str, float]]:
    """The episodes the learner at ``version`` may train on, and those it must not.

    A group is kept whole or dropped whole: dropped when any of its members is more than
    ``max_staleness`` versions old (its advantages compare the members with each other).

    Returns:
        ``(kept, dropped, metrics)``: ``async/staleness/<k>`` counts the kept episodes of staleness
        ``k``; ``async/used_episodes`` + ``async/dropped_episodes`` is every episode given;
        ``async/dropped_share``; ``async/staleness_mean`` and ``async/staleness_max`` of the kept.
    """
    too_old = {ep.group_id for ep in episodes if staleness(ep, version) > max_staleness}
    kept = [ep for ep in episodes if ep.group_id not in too_old]
    dropped = [ep for ep in episodes if ep.group_id in too_old]
    ages = [staleness(ep, version) for ep in kept]
    metrics: dict[str, float] = {f"async/staleness/{k}": float(ages.count(k)) for k in range(max_staleness + 1)}
    metrics.update({
        "async/used_episodes": float(len(kept)), "async/dropped_episodes": float(len(dropped)),
        "async/dropped_share": len(dropped) / max(1, len(episodes)),
        "async/staleness_mean": sum(ages) / max(1, len(ages)), "async/staleness_max": float(max(ages, default=0)),
    })
    return kept, dropped, metrics


Draw = Callable[[TaggedEngine], tuple[list[Episode], int, dict[str, float], int]]
"""``engine -> (episodes, extra groups, bookkeeping metrics, task cursor after)``: one step's groups."""


@dataclass
class _Published:
    """The weights of each version the producer may still need (async: copies; sync: the newest only)."""

    states: dict[int, Mapping[str, torch.Tensor] | None] = field(default_factory=dict)
    newest: int = 0


class RolloutStream:
    """The batches of steps ``first..last`` (see the module docstring).

    Args:
        draw: draws one step's groups with the given engine (the loop's ``draw_batch``), advancing the
            rollout state.
        engine: the rollout engine (it holds weights of its own in async mode).
        capture: the rollout state now (the producer's state between batches).
        mode: ``sync`` or ``async``.
        max_staleness: K (async).
        first: the first batch (the run's step); the engine holds version ``first``'s weights,
            ``initial_state`` (async: a copy is kept to load again after an evaluation).
        last: the last batch (``steps - 1``).
        num_threads: torch's CPU threads in the producer thread (the learner's: a kernel's rounding
            can depend on how its work is split).
    """

    def __init__(self, draw: Draw, engine: RolloutEngine, capture: Callable[[], RolloutState], *, mode: str,
                 max_staleness: int, first: int, last: int, initial_state: Mapping[str, torch.Tensor] | None,
                 num_threads: int | None = None):
        if mode not in ("sync", "async"):
            raise ValueError(f"rollout.mode: expected 'sync' or 'async', got {mode!r}")
        self.draw, self.engine, self.capture, self.mode = draw, engine, capture, mode
        self.max_staleness = max_staleness if mode == "async" else 0
        self.first, self.last = first, last
        self._published = _Published({first: _copy(initial_state) if mode == "async" else None}, first)
        self._loaded = first
        self._cond = threading.Condition()
        self._engine_lock = threading.Lock()
        self._ready: dict[int, Batch] = {}
        self._snapshots: dict[int, RolloutState] = {}
        self._started: set[int] = set()
        self._error: BaseException | None = None
        self._stop = False
        self._last_draw_end = time.perf_counter()
        self._thread: threading.Thread | None = None
        if mode == "async" and first <= last:
            self._thread = threading.Thread(target=self._produce, args=(num_threads or torch.get_num_threads(),),
                                            name="sopgym-rollouts", daemon=True)
            self._thread.start()

    # ---- the learner's side ----
    def batch(self, index: int) -> Batch:
        """Step ``index``'s batch: drawn now (sync), or waited for (async; the producer's error is raised here).

        Raises:
            RolloutStreamError: the producer failed (from its exception) or stopped without this batch.
        """
        t0 = time.perf_counter()
        if self.mode == "sync":
            batch = self._draw(index, self._published.newest)
        else:
            with self._cond:
                while index not in self._ready and self._error is None and not self._stop:
                    if self._thread is None or not self._thread.is_alive():
                        break
                    self._cond.wait(timeout=1.0)
                if self._error is not None:
                    raise RolloutStreamError(f"the rollout producer failed while drawing batch {index}") from self._error
                if index not in self._ready:
                    raise RolloutStreamError(f"the rollout producer stopped before batch {index} (expected batches "
                                             f"{self.first}..{self.last})")
                batch = self._ready.pop(index)
        with self._cond:  # what a checkpoint after this step can still need
            self._snapshots = {b: s for b, s in self._snapshots.items() if b > index}
            self._started = {b for b in self._started if b > index}
        batch.learner_idle_s = time.perf_counter() - t0  # sync: the whole draw
        return batch

    def publish(self, version: int, state: Mapping[str, torch.Tensor] | None) -> None:
        """The weights after ``version`` RL steps (None: the same as the previous version's).

        Sync: the engine takes them now. Async: a copy is queued for the batches that need it."""
        if self.mode == "sync":
            if state is not None:
                self.engine.load_weights(state)
            self._published.newest = self._loaded = version
            return
        with self._cond:
            pub = self._published
            pub.states[version] = _copy(state) if state is not None else pub.states[pub.newest]
            pub.newest = version
            self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The engine and the envs to the caller (an evaluation), with the newest published weights
        loaded; async: after the batch being drawn, the producer waiting meanwhile."""
        with self._engine_lock:
            if self.mode == "async":
                self._load(self._published.newest)
            yield

    def resume_state(self, next_index: int) -> tuple[RolloutState, int]:
        """The rollout state before batch ``next_index`` (what a checkpoint at that step keeps), and
        how many batches from ``next_index`` on were started already (a resume discards them)."""
        with self._cond:
            started = sum(b >= next_index for b in self._started)
            if next_index in self._snapshots:
                return self._snapshots[next_index], started
            return self.capture(), started

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the producer (after the draw in progress, waiting at most ``timeout_s``). Safe to call twice."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self._thread = None

    # ---- the producer's side ----
    def _target(self, index: int) -> int:
        return max(self.first, index - self.max_staleness)

    def _produce(self, num_threads: int) -> None:
        torch.set_num_threads(num_threads)
        try:
            for index in range(self.first, self.last + 1):
                target = self._target(index)
                with self._cond:
                    while target > self._published.newest and not self._stop:
                        self._cond.wait(timeout=1.0)
                    if self._stop:
                        return
                    # Older versions are no batch's any more (targets only grow); the newest stays for evaluations.
                    pub = self._published
                    pub.states = {v: s for v, s in pub.states.items() if v >= target or v == pub.newest}
                batch = self._draw(index, target)
                with self._cond:
                    self._ready[index] = batch
                    self._cond.notify_all()
        except BaseException as exc:  # the learner raises it (RolloutStreamError) when it asks for a batch
            with self._cond:
                if not self._stop:
                    self._error = exc
                self._cond.notify_all()

    def _draw(self, index: int, version: int) -> Batch:
        with self._engine_lock:
            start = time.perf_counter()
            idle = start - self._last_draw_end
            if self.mode == "async":
                self._load(version)
            with self._cond:
                self._snapshots[index] = self.capture()
                self._started.add(index)
            episodes, extra, metrics, cursor = self.draw(TaggedEngine(self.engine, version))
            self._last_draw_end = time.perf_counter()
        return Batch(index, episodes, extra, metrics, cursor, version, self._last_draw_end - start, idle)

    def _load(self, version: int) -> None:
        """Load version ``version``'s weights into the engine (async; the caller holds the engine lock)."""
        if version == self._loaded:
            return
        with self._cond:
            state = self._published.states[version]
        assert state is not None, f"the weights of version {version} were not kept"
        self.engine.load_weights(state)
        self._loaded = version


def _copy(state: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
    """A copy the learner's later steps cannot change (the producer loads it later, in its own thread)."""
    return None if state is None else {k: v.detach().clone() for k, v in state.items()}

