"""Env workers on Ray: an env pool whose envs (and their sandboxes) live in Ray actors.

:class:`RayEnvPool` is a drop-in for the in-process :class:`~sopgym.episodes.pools.EnvPool`: the
runner calls the same ``reset``/``step``/``end``/``close`` over lists of slots. Each slot belongs to
one worker (``slot % num_workers``); a worker is a Ray actor holding an in-process ``EnvPool`` of its
slots' envs, so an env is built, reset and stepped there exactly as in-process, and a Docker-sandboxed
env's containers belong to the worker's process (on the worker's host). Every call sends one batched
request per worker and waits for all of them (``ray.get``), so the workers step their envs in parallel
while the driver (the trainer's sampler, a model client) waits on one batch.

Same records, same seeds, same results: a worker resets with the spec's seed and options and steps
with the caller's replies, and only the outputs travel back (pickled: observations, rewards, flags,
``info``), so a seeded batch gives identical episodes whatever the number of workers (tested against
the in-process pool). ``info["messages"]`` (the whole chat, growing every turn) travels as the
messages new since the worker's last answer for the slot (:class:`MessagesDelta`); the driver
rebuilds the list, and an env that rewrote an earlier message gets its whole list shipped.

A worker that dies (its process killed, its host lost, Ray's OOM killer) takes its envs' state with
it. The pool replaces it with a fresh worker, and every episode that was running there ends as an
**infrastructure failure**: the new worker resets the episode's spec and ends it with
``end_episode("env_lost")`` (status ``ERROR_ENV_LOST``, in ``sopgym.status.INFRASTRUCTURE``), so
the runner gets the env's own record, which the evaluator excludes from success rates and the trainer
from advantages. That record holds the task and the cause, not the turns played before the loss (the
runner's result keeps those). A reset whose worker died is retried on the replacement (nothing of its
episode had happened yet). An exception raised by env code in a worker is re-raised here with its type,
as the in-process pool would raise it.

Ray is started on first use when it is not running: locally (``address=None``: a new instance on this
machine, loopback only, no dashboard, usage statistics off) or attached to a cluster (``"auto"``, or
``"ray://host:10001"``); the pool shuts down a Ray it started when it closes. ``ray`` is imported only
here, and only when a pool is used.

What it does not do: restore a lost episode's state (its env lived in the dead process), retry a step
(a step may have changed sandbox state before the worker died), or time out a worker that hangs
without dying (Ray's health checks detect dead processes and lost nodes, not a stuck env).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .pools import EnvPool, StepOutput
from .specs import EndEpisode, EpisodeSpec

__all__ = ["RayEnvPool", "EnvWorker", "MessagesDelta", "WorkerLost", "init_ray", "WORKER_LOST"]

log = logging.getLogger(__name__)

#: The ``end_episode`` cause of an episode whose worker died (``sopgym.status.END_CAUSES``).
WORKER_LOST = "env_lost"
_LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class WorkerLost(RuntimeError):
    """Workers kept dying: a call could not be answered after ``max_replacements`` replacements in a row,
    or a worker could not be started at all."""


def init_ray(address: str | None = None, *, num_cpus: int | None = None, **kwargs: Any) -> bool:
    """Start or attach to Ray unless this process is already connected.

    Args:
        address: None: a new Ray instance on this machine only (never one another user started),
            bound to loopback, without the dashboard. ``"auto"``: the cluster this machine belongs to
            (``ray start``). ``"host:6379"`` or ``"ray://host:10001"``: that cluster.
        num_cpus: logical CPUs of a local instance (a scheduling budget: env workers are mostly waiting
            on sandboxes, so more workers than cores can pay off). Ignored when attaching.
        kwargs: passed to ``ray.init`` (e.g. ``runtime_env``, ``object_store_memory``).

    Returns:
        True when this call started or attached Ray (the caller then owns ``ray.shutdown``).
    """
    # Never report usage statistics: set before Ray starts, so its processes inherit it.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"Ray env workers need ray: pip install 'sopgym[ray]' ({exc})") from exc

    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
    if address is not None:
        options.pop("include_dashboard")
        ray.init(**{**options, "address": address, **kwargs})
        return True
    # A local instance on loopback only: Ray's switch for "no cluster" makes every process of the
    # instance (inheriting the variable) bind and connect to 127.0.0.1 instead of the host's address.
    constants: Any = sys.modules.get("ray._private.ray_constants")  # a module or None; its names are ray's
    saved = os.environ.get(_LOOPBACK_ONLY), getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[_LOOPBACK_ONLY] = "0"
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False  # read at import: ray was imported before the variable was set
    try:
        ray.init(**{**options, "address": "local", "num_cpus": num_cpus, "object_store_memory": 256 * 1024**2, **kwargs})
    finally:
        if saved[0] is None:
            os.environ.pop(_LOOPBACK_ONLY, None)
        else:
            os.environ[_LOOPBACK_ONLY] = saved[0]
        if constants is not None:
            constants.ENABLE_RAY_CLUSTER = saved[1]
    return True


@dataclass(frozen=True)
class MessagesDelta:
    """``info["messages"]`` as sent by a worker: the first ``num_kept`` messages of the list it sent
    last for this slot's episode, then ``new``. Chats only grow, so each step ships its new messages
    instead of the whole chat again (whose size grows with every turn)."""

    num_kept: int
    new: list[Any]


class EnvWorker:
    """One Ray actor's envs: an in-process :class:`EnvPool` of the slots the driver routes here.

    Args:
        make_env: ``env_id -> env``, as for :class:`EnvPool` (shipped to the worker with cloudpickle).
    """

    def __init__(self, make_env: Callable[[str], Any]):
        self._pool = EnvPool(make_env)
        self._sent: dict[int, list[Any]] = {}
        """Per slot, a copy of the messages last sent for its episode (what the driver holds)."""

    def _pack(self, slot: int, info: Any, new_episode: bool) -> Any:
        """``info`` with its messages as a :class:`MessagesDelta` against what was sent last. The kept
        prefix is checked equal to a copy of what was sent (so an env that rewrites an earlier message,
        even in place, ships the whole list: ``num_kept=0``)."""
        messages = info.get("messages") if isinstance(info, dict) else None
        if not isinstance(messages, list):
            self._sent.pop(slot, None)
            return info
        sent = None if new_episode else self._sent.get(slot)
        kept = len(sent) if sent is not None and len(messages) >= len(sent) and messages[: len(sent)] == sent else 0
        self._sent[slot] = (sent[:kept] if sent is not None and kept else []) + copy.deepcopy(messages[kept:])
        return {**info, "messages": MessagesDelta(kept, messages[kept:])}

    def describe(self) -> dict[str, Any]:
        """Where the worker runs: ``{"pid", "node"}``."""
        import ray

        return {"pid": os.getpid(), "node": ray.util.get_node_ip_address()}

    def run(self, ops: list[tuple[str, int, Any]]) -> list[Any]:
        """Run ``(kind, slot, payload)`` operations in order and return one output each.

        ``reset`` (payload: the spec) -> ``(observation, info)``; ``step`` (the reply) and ``end``
        (an :class:`EndEpisode`) -> a step output; ``lost`` (``(spec, message)``): the episode's worker
        died, so reset its spec here and end it with ``end_episode("env_lost", message)``.
        """
        out: list[Any] = []
        try:
            for kind, slot, payload in ops:
                if kind == "reset":
                    observation, info = self._pool.reset([(slot, payload)])[0]
                    out.append((observation, self._pack(slot, info, True)))
                    continue
                if kind == "step":
                    result = self._pool.step([(slot, payload)])[0]
                elif kind == "end":
                    result = self._pool.end([(slot, payload)])[0]
                elif kind == "lost":
                    spec, message = payload
                    self._pool.reset([(slot, spec)])
                    result = self._pool.end([(slot, EndEpisode(WORKER_LOST, message))])[0]
                else:
                    raise AssertionError(f"unknown operation {kind!r}")
                out.append((*result[:4], self._pack(slot, result[4], kind == "lost")))
        except BaseException:
            for _, slot, _ in ops:  # the driver gets none of these answers: next time, whole lists
                self._sent.pop(slot, None)
            raise
        return out

    def close(self) -> None:
        self._pool.close()


class RayEnvPool:
    """Envs in Ray actors, stepped in parallel; the runner's env-pool interface.

    Args:
        make_env: ``env_id -> env`` (e.g. ``gymnasium.make`` with the run's kwargs), run in the workers;
            it must pickle with cloudpickle (closures do; an open env or a lock does not).
        num_workers: actors; slot ``s`` lives on worker ``s % num_workers``.
        address: None: Ray on this machine (started on first use when not running); ``"auto"`` or a
            cluster address (see :func:`init_ray`). Ignored when Ray is already initialised.
        cpus_per_worker: logical CPUs each actor reserves (Ray's scheduling). Fractions pack several
            workers per core, which suits envs that mostly wait on sandboxes.
        resources: custom Ray resources each actor needs, e.g. ``{"env_host": 1}`` to place workers only
            on the nodes started with that resource (the hosts with Docker, not the GPU nodes). A local
            Ray instance the pool starts offers them, so such a config also runs on one machine.
        max_replacements: workers replaced in a row within one call before it gives up with
            :class:`WorkerLost` (a worker that dies on every start must not loop forever).
        start_timeout_s: how long a worker may take to be placed and started (Ray waits forever for
            resources no node has) before :class:`WorkerLost` says what it asked for.
        init_kwargs: more ``ray.init`` options when the pool starts Ray.

    Raises:
        ValueError: a bad ``num_workers``, ``cpus_per_worker``, ``max_replacements`` or ``start_timeout_s``.

    Example:
        >>> pool = RayEnvPool(lambda env_id: gymnasium.make(env_id, sandbox="docker"), num_workers=4)  # doctest: +SKIP
        >>> results = run_episodes(specs, builtin_policy_agent("oracle"), pool, concurrency=64)  # doctest: +SKIP
        >>> pool.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        make_env: Callable[[str], Any],
        num_workers: int = 2,
        *,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
        resources: Mapping[str, float] | None = None,
        max_replacements: int = 3,
        start_timeout_s: float = 600.0,
        init_kwargs: Mapping[str, Any] | None = None,
    ):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an integer >= 1, got {num_workers!r}")
        if isinstance(cpus_per_worker, bool) or not isinstance(cpus_per_worker, (int, float)) or cpus_per_worker < 0:
            raise ValueError(f"cpus_per_worker must be a number >= 0, got {cpus_per_worker!r}")
        if isinstance(max_replacements, bool) or not isinstance(max_replacements, int) or max_replacements < 0:
            raise ValueError(f"max_replacements must be an integer >= 0, got {max_replacements!r}")
        if isinstance(start_timeout_s, bool) or not isinstance(start_timeout_s, (int, float)) or start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be a number > 0, got {start_timeout_s!r}")
        self.make_env = make_env
        self.num_workers = num_workers
        self.address = address
        self.cpus_per_worker = float(cpus_per_worker)
        self.resources = dict(resources or {})
        self.max_replacements = max_replacements
        self.start_timeout_s = float(start_timeout_s)
        self.init_kwargs = dict(init_kwargs or {})
        self.workers_lost = 0
        """Workers that died and were replaced, over the pool's life."""
        self.episodes_lost = 0
        """Episodes ended as ``env_lost`` infrastructure failures, over the pool's life."""
        self._owns_ray = False
        self._actor_cls: Any = None
        self._options: dict[str, Any] = {}
        self._make_env_ref: Any = None
        self._workers: list[Any] = []
        self._where: list[dict[str, Any]] = []
        self._running: dict[int, EpisodeSpec] = {}
        self._lost: dict[int, str] = {}
        self._messages: dict[int, list[Any]] = {}

    # ------------------------------------------------------------------ workers
    @property
    def started(self) -> bool:
        """Whether the workers are running (they start on the first call, or with :meth:`start`)."""
        return bool(self._workers)

    def start(self) -> None:
        """Start Ray (if needed) and the workers; the first ``reset`` does it when not called before.

        Raises:
            ImportError: ray is not installed.
            WorkerLost: a worker could not be started (e.g. ``make_env`` does not unpickle there).
        """
        if self._workers:
            return
        init_kwargs = dict(self.init_kwargs)
        if self.address is None and self.resources:  # a local instance offers what the workers ask for
            init_kwargs.setdefault("resources", {k: v * self.num_workers for k, v in self.resources.items()})
        started = init_ray(self.address, num_cpus=max(1, math.ceil(self.num_workers * self.cpus_per_worker)), **init_kwargs)
        self._owns_ray = self._owns_ray or started
        options: dict[str, Any] = {"num_cpus": self.cpus_per_worker, "max_restarts": 0, "max_task_retries": 0,
                                   "scheduling_strategy": "SPREAD"}
        if self.resources:
            options["resources"] = self.resources
        import ray

        self._options = options
        self._actor_cls = ray.remote(**options)(EnvWorker)
        self._make_env_ref = ray.put(self.make_env)
        self._workers = [self._actor_cls.remote(self._make_env_ref) for _ in range(self.num_workers)]
        self._where = [{} for _ in range(self.num_workers)]
        try:
            for w in range(self.num_workers):
                self._describe(w)
        except WorkerLost:
            self._kill_workers()
            raise

    def _kill_workers(self) -> None:
        """End every worker now (no clean-up in them) and forget the running episodes."""
        import ray

        for handle in self._workers:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - already gone: nothing to kill
                pass
        self._workers, self._where = [], []
        self._running.clear()
        self._lost.clear()
        self._messages.clear()

    def _describe(self, w: int) -> None:
        import ray

        try:
            self._where[w] = ray.get(self._workers[w].describe.remote(), timeout=self.start_timeout_s)
        except ray.exceptions.RayActorError as exc:
            raise WorkerLost(f"env worker {w} could not start: {exc}") from exc
        except ray.exceptions.GetTimeoutError as exc:
            need = {"CPU": self._options["num_cpus"], **self.resources}
            raise WorkerLost(
                f"env worker {w} did not start within {self.start_timeout_s:.0f} s; it needs {need} and the "
                f"cluster has {ray.available_resources()} available (of {ray.cluster_resources()})"
            ) from exc

    def worker_info(self) -> list[dict[str, Any]]:
        """``{"pid", "node"}`` of each worker (starting them if needed)."""
        self.start()
        return [dict(w) for w in self._where]

    @property
    def worker_handles(self) -> list[Any]:
        """The workers' Ray actor handles (e.g. to kill one in a test)."""
        self.start()
        return list(self._workers)

    def _replace(self, w: int, exc: BaseException) -> str:
        """Kill and replace worker ``w``; its running episodes become lost. Returns the loss message."""
        import ray

        where = self._where[w]
        message = (
            f"env worker {w} (pid {where.get('pid', '?')} on {where.get('node', '?')}) was lost "
            f"({type(exc).__name__}); its envs' state died with it, so the episode is ended as an infrastructure failure"
        )
        lost_slots = sorted(s for s in self._running if s % self.num_workers == w)
        log.warning("%s: %d running episode(s) end as %s; starting a replacement", message, len(lost_slots), WORKER_LOST)
        for slot in lost_slots:
            self._lost[slot] = message
        try:
            ray.kill(self._workers[w], no_restart=True)
        except Exception:  # noqa: BLE001 - it is already gone; nothing to kill
            pass
        self.workers_lost += 1
        self._workers[w] = self._actor_cls.remote(self._make_env_ref)
        self._where[w] = {}
        try:
            self._describe(w)
        except WorkerLost:  # no replacement: the pool cannot go on (a later call starts afresh)
            self._kill_workers()
            raise
        return message

    # ------------------------------------------------------------------ the pool interface
    def reset(self, jobs: Sequence[tuple[int, EpisodeSpec]]) -> list[tuple[str, dict[str, Any]]]:
        return self._run([("reset", slot, spec) for slot, spec in jobs])

    def step(self, jobs: Sequence[tuple[int, Any]]) -> list[StepOutput]:
        return self._run([("step", slot, action) for slot, action in jobs])

    def end(self, jobs: Sequence[tuple[int, EndEpisode]]) -> list[StepOutput]:
        return self._run([("end", slot, end) for slot, end in jobs])

    def _lost_op(self, slot: int) -> tuple[str, int, Any]:
        return ("lost", slot, (self._running[slot], self._lost[slot]))

    def _run(self, ops: list[tuple[str, int, Any]]) -> list[Any]:
        """One batched call per worker, all in flight at once; dead workers are replaced and their
        operations answered by the replacement (resets retried, episodes ended as lost)."""
        if not ops:
            return []
        self.start()
        ops = [op if op[0] == "reset" or op[1] not in self._lost else self._lost_op(op[1]) for op in ops]
        out: list[Any] = [None] * len(ops)
        todo = list(range(len(ops)))
        failed_rounds = 0
        while todo:
            todo = self._round(ops, todo, out)
            if todo:
                failed_rounds += 1
                if failed_rounds > self.max_replacements:
                    raise WorkerLost(f"env workers died {failed_rounds} times in a row within one call "
                                     f"(max_replacements={self.max_replacements}); giving up")
        self._track_slots(ops, out)
        return out

    def _round(self, ops: list[tuple[str, int, Any]], todo: list[int], out: list[Any]) -> list[int]:
        """Send operations ``todo`` (indices into ``ops``), one batched call per worker, and put their
        answers into ``out``. A lost worker is replaced, its operations other than resets become lost
        ones (in ``ops``), and they are returned to be sent again.

        Raises:
            Exception: the first error env code raised, once every worker has answered.
        """
        import ray

        by_worker: dict[int, list[int]] = {}
        for i in todo:
            by_worker.setdefault(ops[i][1] % self.num_workers, []).append(i)
        refs = {w: self._workers[w].run.remote([ops[i] for i in idx]) for w, idx in by_worker.items()}
        again: list[int] = []
        error: Exception | None = None
        for w, ref in refs.items():
            try:
                answers = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                self._replace(w, exc)
                for i in by_worker[w]:
                    if ops[i][0] != "reset":
                        ops[i] = self._lost_op(ops[i][1])
                    again.append(i)
                continue
            except Exception as exc:  # noqa: BLE001 - env code raised: re-raised below, as in-process
                error = error or exc
                continue
            for i, answer in zip(by_worker[w], answers):
                out[i] = self._unpack(ops[i][1], answer)
        if error is not None:
            raise error
        return again

    def _track_slots(self, ops: list[tuple[str, int, Any]], out: list[Any]) -> None:
        """Note which slots run an episode after the answered operations: a reset starts one, an
        episode that terminated or was truncated frees its slot; a lost episode is counted."""
        for (kind, slot, payload), answer in zip(ops, out):
            if kind == "reset":
                self._running[slot] = payload
                self._lost.pop(slot, None)
            else:
                if kind == "lost":
                    self.episodes_lost += 1
                if answer[2] or answer[3]:  # terminated or truncated: the slot is free
                    self._running.pop(slot, None)
                    self._lost.pop(slot, None)

    def _unpack(self, slot: int, answer: tuple) -> tuple:
        """A worker's answer with ``info["messages"]`` whole again (see :class:`MessagesDelta`)."""
        info = answer[-1]
        delta = info.get("messages") if isinstance(info, dict) else None
        if not isinstance(delta, MessagesDelta):
            self._messages.pop(slot, None)
            return answer
        messages = self._messages.get(slot, [])[: delta.num_kept] + delta.new
        assert len(messages) == delta.num_kept + len(delta.new), f"slot {slot}: the driver lost its message history"
        self._messages[slot] = messages
        return (*answer[:-1], {**info, "messages": list(messages)})

    def close(self) -> None:
        """Close every worker's envs (their sandboxes with them), end the workers, and shut Ray down
        when this pool started it. Safe to call twice."""
        if self._workers:
            import ray

            try:
                ray.get([w.close.remote() for w in self._workers], timeout=120)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
                log.warning("closing env workers: %s", exc)
            # A graceful exit runs the workers' atexit handlers (the Docker pools' clean-up).
            ends = [w.__ray_terminate__.remote() for w in self._workers]
            ray.wait(ends, num_returns=len(ends), timeout=30)
            self._kill_workers()
        if self._owns_ray:
            import ray

            ray.shutdown()
            self._owns_ray = False
