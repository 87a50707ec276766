"""pass@k, pass^k and task-level bootstrap intervals.

With ``n`` samples of a task of which ``c`` succeeded, the unbiased estimators (Chen et al. 2021 for
pass@k; the tau-bench definition for pass^k) are

* ``pass@k = 1 - C(n-c, k) / C(n, k)``: the chance that at least one of ``k`` samples drawn
  without replacement from the ``n`` succeeds;
* ``pass^k = C(c, k) / C(n, k)``: the chance that all ``k`` of them succeed.

Both need ``n >= k``. The binomial ratios are evaluated as products of factors in ``[0, 1]``
(never forming ``C(n, k)``, which overflows a float for ``n`` in the thousands):

* ``C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)``
* ``C(c, k) / C(n, k)   = prod_{i=0}^{k-1} (c - i) / (n - i)``

A benchmark's figure is the mean over tasks. Intervals come from a percentile bootstrap that
resamples *tasks* (the samples of one task are correlated, so episodes are not resampled alone).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["pass_at_k", "pass_hat_k", "mean_over_tasks", "bootstrap_ci"]


def _check(n: int, c: int, k: int) -> None:
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if n < k:
        raise ValueError(f"pass@k needs n >= k samples per task; got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"the number of successes must be in [0, n={n}], got c={c}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: probability that some of ``k`` of the ``n`` samples succeed.

    Args:
        n: samples drawn for the task (``n >= k``).
        c: how many of them succeeded (``0 <= c <= n``).
        k: the budget of attempts.

    Returns:
        ``1 - C(n-c, k) / C(n, k)`` as a float in ``[0, 1]``.

    Raises:
        ValueError: on ``n < k``, ``k < 1``, ``c`` outside ``[0, n]`` or non-integer arguments.

    Example:
        >>> pass_at_k(5, 1, 2)  # 1 - C(4,2)/C(5,2) = 1 - 6/10
        0.4
    """
    _check(n, c, k)
    if n - c < k:  # every k-subset contains a success
        return 1.0
    fail = 1.0
    for i in range(n - c + 1, n + 1):
        fail *= 1.0 - k / i
    return 1.0 - fail


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k for one task: probability that all of ``k`` of the ``n`` samples succeed.

    Args and Raises: as :func:`pass_at_k`.

    Returns:
        ``C(c, k) / C(n, k)`` as a float in ``[0, 1]``.

    Example:
        >>> round(pass_hat_k(5, 3, 2), 12)  # C(3,2)/C(5,2) = 3/10
        0.3
    """
    _check(n, c, k)
    if c < k:
        return 0.0
    ratio = 1.0
    for i in range(k):
        ratio *= (c - i) / (n - i)
    return ratio


def mean_over_tasks(counts: Sequence[tuple[int, int]], k: int, estimator=pass_at_k) -> float:
    """Mean of ``estimator(n, c, k)`` over tasks given as ``(n, c)`` pairs.

    Raises:
        ValueError: when ``counts`` is empty, or as the estimator does.
    """
    if not counts:
        raise ValueError("expected at least one task, got none")
    return float(np.mean([estimator(n, c, k) for n, c in counts]))


def bootstrap_ci(
    numerators: Sequence[float] | np.ndarray,
    denominators: Sequence[float] | np.ndarray | None = None,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of a ratio of sums over resampled tasks.

    Each task contributes ``numerators[t]`` (for example its successes) and ``denominators[t]``
    (its episodes); a resample draws tasks with replacement and takes ``sum(num) / sum(den)``.
    With ``denominators`` omitted (all ones) this is the bootstrap of the mean of per-task values,
    which is what pass@k uses.

    Args:
        numerators: one value per task.
        denominators: one positive weight per task, or None for all ones.
        n_bootstrap: resamples (>= 1).
        seed: seeds ``numpy.random.default_rng``; the same inputs and seed give the same interval.
        confidence: central coverage, in (0, 1).

    Returns:
        ``(low, high)``. Resamples whose denominator sums to 0 are skipped; if all are, ``(nan, nan)``.

    Raises:
        ValueError: on empty input, mismatched lengths, negative denominators or bad settings.
    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.ones_like(num) if denominators is None else np.asarray(denominators, dtype=np.float64)
    if num.ndim != 1 or num.size == 0:
        raise ValueError(f"expected a non-empty 1-D sequence of per-task values, got shape {num.shape}")
    if den.shape != num.shape:
        raise ValueError(f"numerators and denominators must have the same length, got {num.size} and {den.size}")
    if np.any(den < 0):
        raise ValueError("denominators must be >= 0")
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be >= 1, got {n_bootstrap}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    num_tasks = num.size
    stats = np.empty(n_bootstrap, dtype=np.float64)
    chunk = max(1, 2_000_000 // num_tasks)  # bound memory at ~16 MB of indices per chunk
    for start in range(0, n_bootstrap, chunk):
        stop = min(n_bootstrap, start + chunk)
        idx = rng.integers(0, num_tasks, size=(stop - start, num_tasks))
        top = num[idx].sum(axis=1)
        bottom = den[idx].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats[start:stop] = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)
    stats = stats[~np.isnan(stats)]
    if stats.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)
