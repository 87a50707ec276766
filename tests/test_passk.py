"""pass@k / pass^k estimators and the task bootstrap."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from sopgym.evaluation.passk import bootstrap_ci, mean_over_tasks, pass_at_k, pass_hat_k


@pytest.mark.parametrize("n,c,k,want", [
    (5, 1, 2, 1 - 6 / 10),      # 1 - C(4,2)/C(5,2)
    (10, 3, 1, 0.3),            # k=1: c/n
    (4, 0, 2, 0.0),
    (4, 4, 2, 1.0),
    (5, 4, 2, 1.0),             # n-c < k: every pair holds a success
    (10, 2, 5, 1 - 56 / 252),   # 1 - C(8,5)/C(10,5)
])
def test_pass_at_k_matches_hand_computed_values(n, c, k, want):
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("n,c,k,want", [
    (5, 3, 2, 3 / 10),          # C(3,2)/C(5,2)
    (10, 5, 3, 10 / 120),       # C(5,3)/C(10,3)
    (10, 7, 1, 0.7),
    (4, 1, 2, 0.0),
    (4, 4, 4, 1.0),
])
def test_pass_hat_k_matches_hand_computed_values(n, c, k, want):
    assert pass_hat_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_estimators_equal_brute_force_enumeration_of_k_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                any_ok = sum(any(s) for s in subsets) / len(subsets)
                all_ok = sum(all(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(any_ok, abs=1e-12), (n, c, k)
                assert pass_hat_k(n, c, k) == pytest.approx(all_ok, abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n,c,k", [(3000, 40, 1500), (5000, 4990, 2000), (2000, 1, 1)])
def test_estimators_are_accurate_where_binomials_overflow_floats(n, c, k):
    assert k == 1 or math.comb(n, k) > 10**308  # float(C(n, k)) would overflow
    exact_at = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    exact_hat = Fraction(math.comb(c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact_at), rel=1e-9, abs=1e-300)
    assert pass_hat_k(n, c, k) == pytest.approx(float(exact_hat), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("n,c,k", [(2, 1, 3), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3.0, 1, 1), (True, 1, 1)])
def test_estimators_reject_invalid_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        pass_hat_k(n, c, k)


def test_n_smaller_than_k_error_names_both():
    with pytest.raises(ValueError, match=r"n >= k.*n=2, k=3"):
        pass_at_k(2, 1, 3)


def test_mean_over_tasks_averages_per_task_estimates():
    assert mean_over_tasks([(3, 1), (3, 3)], 2) == pytest.approx((2 / 3 + 1) / 2)
    assert mean_over_tasks([(3, 1), (3, 3)], 2, estimator=pass_hat_k) == pytest.approx(0.5)


@pytest.mark.parametrize("seed", range(5))
def test_bootstrap_interval_contains_the_point_estimate(seed):
    values = np.random.default_rng(seed).random(40) < 0.35
    low, high = bootstrap_ci(values.astype(float), n_bootstrap=500, seed=seed)
    assert low <= values.mean() <= high
    assert low < high


def test_bootstrap_interval_narrows_with_more_tasks():
    rng = np.random.default_rng(1)
    small = (rng.random(20) < 0.3).astype(float)
    large = (rng.random(2000) < 0.3).astype(float)
    w_small = np.subtract(*bootstrap_ci(small, n_bootstrap=500, seed=0)[::-1])
    w_large = np.subtract(*bootstrap_ci(large, n_bootstrap=500, seed=0)[::-1])
    assert w_large < w_small / 4  # width shrinks like 1/sqrt(tasks): 100x the tasks, about 10x narrower


def test_bootstrap_is_reproducible_under_a_seed_and_varies_across_seeds():
    values = np.random.default_rng(0).random(30)
    assert bootstrap_ci(values, n_bootstrap=200, seed=7) == bootstrap_ci(values, n_bootstrap=200, seed=7)
    assert bootstrap_ci(values, n_bootstrap=200, seed=7) != bootstrap_ci(values, n_bootstrap=200, seed=8)


def test_bootstrap_of_ratio_of_sums_weights_tasks_by_episodes():
    # Task 0: 1/1 success, task 1: 0/9. Episode-level rate is 0.1; a mean of task means would be 0.5.
    low, high = bootstrap_ci([1.0, 0.0], [1.0, 9.0], n_bootstrap=2000, seed=0)
    assert low == pytest.approx(0.0) and high == pytest.approx(1.0)
    samples_mid = bootstrap_ci([1.0, 0.0], [1.0, 9.0], n_bootstrap=2000, seed=0, confidence=0.2)
    assert samples_mid == (pytest.approx(0.1), pytest.approx(0.1))  # the middle resamples are the mixed ones


def test_bootstrap_of_constant_values_is_a_point():
    assert bootstrap_ci([0.25] * 10, n_bootstrap=100, seed=0) == (pytest.approx(0.25), pytest.approx(0.25))


@pytest.mark.parametrize("kwargs", [
    {"numerators": []},
    {"numerators": [1.0, 2.0], "denominators": [1.0]},
    {"numerators": [1.0], "denominators": [-1.0]},
    {"numerators": [1.0], "n_bootstrap": 0},
    {"numerators": [1.0], "confidence": 1.0},
])
def test_bootstrap_rejects_bad_input(kwargs):
    with pytest.raises(ValueError):
        bootstrap_ci(**kwargs)
