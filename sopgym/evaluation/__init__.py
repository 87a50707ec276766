"""The independent evaluator: metrics recomputed from finished episodes, pass@k, bootstrap intervals.

Apart from the reward code by design: it shares only :mod:`sopgym.scoring` (answer validation and
normalisation) with it, and never imports ``sopgym.envs.reward``. :mod:`.metrics` and :mod:`.passk`
import nothing from ``sopgym.envs``; :mod:`.runner` (which has to run envs) is imported lazily, on
first use of ``run_episodes`` or ``load_records``.
"""

from .metrics import HEADLINE_METRICS, EpisodeScore, evaluate_records, score_record
from .passk import bootstrap_ci, pass_at_k, pass_hat_k

__all__ = [
    "evaluate_records", "score_record", "EpisodeScore", "HEADLINE_METRICS", "pass_at_k", "pass_hat_k",
    "bootstrap_ci", "run_episodes", "load_records",
]


def __getattr__(name: str):
    if name in ("run_episodes", "load_records"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
