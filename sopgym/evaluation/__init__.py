"""The independent evaluator: metrics recomputed from finished episodes, pass@k, bootstrap intervals,
reports and the episode viewer. Episodes are run by :mod:`sopgym.episodes` and benchmark suites by
:mod:`sopgym.bench`; this package scores them and imports neither.

Apart from the reward code by design: it shares only :mod:`sopgym.scoring` (answer validation and
normalisation) and :mod:`sopgym.status` (the status classes) with it, and never imports
``sopgym.envs.reward``. :mod:`.metrics`, :mod:`.passk` and :mod:`.records` import nothing from
``sopgym.envs`` or :mod:`sopgym.episodes`.
"""

from .metrics import HEADLINE_METRICS, EpisodeScore, evaluate_records, score_record
from .passk import bootstrap_ci, pass_at_k, pass_hat_k
from .records import iter_jsonl, load_records

__all__ = [
    "evaluate_records", "score_record", "EpisodeScore", "HEADLINE_METRICS", "pass_at_k", "pass_hat_k",
    "bootstrap_ci", "load_records", "iter_jsonl",
]
