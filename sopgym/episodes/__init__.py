"""Running episodes: what to run, the one loop that runs it, and the env pools it steps.

Everything in sopgym that plays episodes (``sopgym eval`` and its suites, the trainer's rollouts and
SFT demonstrations, domain validation, benchmark runs of real models, the RL-library integrations)
plays them here; agents differ, the loop does not.

* :mod:`.specs`: what to run (:class:`EpisodeSpec`, :func:`task_specs`, :func:`episode_seed`) and
  an agent's answer that ends an episode (:class:`EndEpisode`).
* :mod:`.runner`: the agent interface (:class:`BatchAgent`, :class:`PolicyAgent`), the one loop
  (:func:`run_episodes`, :func:`run_episode`), its results (:class:`EpisodeResult`, :class:`Turn`), the
  choice of pool (:func:`make_env_pool`) and the trajectory lines of a result.
* :mod:`.pools`: the in-process env pool (:class:`EnvPool`).
* :mod:`.factory`: the one env factory (:class:`EnvFactory`: ``env_id -> gymnasium.make(env_id,
  **kwargs)``, picklable, so it travels to Ray env workers), which every run's pool makes its envs with.
* :mod:`.ray_pool`: the same pool interface with the envs in Ray actors (:class:`RayEnvPool`,
  :func:`init_ray`; needs the ``ray`` extra, imported only when a pool is used; docs/scaling.md).
* :mod:`.progress`: the loop's progress bar on stderr (standard library only).

Imports inside the package run one way: ``runner`` -> ``ray_pool`` (lazily) -> ``pools`` -> ``specs``;
no module imports ``runner`` (tests/test_boundaries.py checks there is no cycle).

Scoring stays in :mod:`sopgym.evaluation`: a result's success is the evaluator's
``score_record(record)`` (:mod:`sopgym.evaluation.metrics`, the one module of it imported here), and
the evaluator's suites, resume and reports run their episodes through this package.
"""

from .factory import EnvFactory
from .pools import EnvPool
from .runner import (
    POOL_BACKENDS,
    BatchAgent,
    EpisodeResult,
    PolicyAgent,
    Turn,
    builtin_policy_agent,
    make_env_pool,
    run_episode,
    run_episodes,
    trajectory_lines,
)
from .specs import EndEpisode, EpisodeSpec, episode_seed, task_specs

__all__ = [
    "EpisodeSpec", "EndEpisode", "Turn", "EpisodeResult", "BatchAgent", "PolicyAgent", "EnvPool",
    "POOL_BACKENDS", "make_env_pool", "builtin_policy_agent", "run_episodes", "run_episode",
    "task_specs", "episode_seed", "trajectory_lines", "EnvFactory",
]
