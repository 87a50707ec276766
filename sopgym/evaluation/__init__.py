"""The independent evaluator: metrics recomputed from finished episodes, pass@k, bootstrap intervals,
and the one episode runner every part of sopgym runs episodes with.

Apart from the reward code by design: it shares only :mod:`sopgym.scoring` (answer validation and
normalisation) and :mod:`sopgym.status` (the status classes) with it, and never imports
``sopgym.envs.reward``. :mod:`.metrics`, :mod:`.passk` and :mod:`.records` import nothing from
``sopgym.envs``; :mod:`.runner` (which has to run envs) is imported lazily, on first use of one of
its names.
"""

from .metrics import HEADLINE_METRICS, EpisodeScore, evaluate_records, score_record
from .passk import bootstrap_ci, pass_at_k, pass_hat_k
from .records import iter_jsonl, load_records

_RUNNER = (
    "EpisodeSpec", "EndEpisode", "EpisodeResult", "Turn", "PolicyAgent", "EnvPool", "run_episodes", "run_episode",
    "run_policy", "task_specs", "episode_seed",
)

__all__ = [
    "evaluate_records", "score_record", "EpisodeScore", "HEADLINE_METRICS", "pass_at_k", "pass_hat_k",
    "bootstrap_ci", "load_records", "iter_jsonl", *_RUNNER,
]


def __getattr__(name: str):
    if name in _RUNNER:
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
