"""The run's plot (``curves.png``) shows the held-out figures with their intervals (issue 22: "in MLflow
and on the demo's plot"): greedy success with its 95% interval at every evaluation, pass@1 and pass@k
with theirs where the evaluation sampled."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer

from sopgym.trainers.loop import plot_figure, plot_point

HISTORY = [{"step": s, "rollout/reward/mean": 0.1 * s, "rollout/success_rate": 0.1 * s} for s in range(3)]


def evaluation(success, low, high, sampled=None):
    val = {"val/task_success_rate": success, "val/task_success_rate/ci_low": low, "val/task_success_rate/ci_high": high,
           "val/reward/mean": success}
    if sampled:
        val["val/sampled/samples_per_task"] = 4.0
        for name, (y, lo, hi) in sampled.items():
            val.update({f"val/sampled/{name}": y, f"val/sampled/{name}/ci_low": lo, f"val/sampled/{name}/ci_high": hi})
    return val


@pytest.fixture
def figure():
    evals = {0: evaluation(0.2, 0.1, 0.3, {"pass_at_1": (0.25, 0.2, 0.3), "pass_at_4": (0.4, 0.3, 0.5)}),
             1: evaluation(0.3, 0.2, 0.45),
             2: evaluation(0.5, 0.4, 0.6, {"pass_at_1": (0.45, 0.4, 0.5), "pass_at_4": (0.55, 0.5, 0.6)})}
    points = [plot_point(step, val) for step, val in evals.items()]
    val_curve = [(step, val["val/task_success_rate"], val["val/reward/mean"]) for step, val in evals.items()]
    fig = plot_figure(HISTORY, val_curve, points)
    yield {c.get_label(): c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)}
    import matplotlib.pyplot as plt

    plt.close(fig)


def bars(container) -> list[tuple[float, float]]:
    """The (low, high) ends of each error bar of a container."""
    (segments,) = container.lines[2]
    return [(float(min(seg[:, 1])), float(max(seg[:, 1]))) for seg in segments.get_segments()]


def test_greedy_success_has_its_interval_at_every_evaluation(figure):
    assert np.allclose(bars(figure["val task success (greedy, 95% CI)"]), [(0.1, 0.3), (0.2, 0.45), (0.4, 0.6)])


def test_pass_at_1_and_pass_at_k_are_drawn_only_where_the_evaluation_sampled(figure):
    assert np.allclose(bars(figure["val pass@1 (sampled, 95% CI)"]), [(0.2, 0.3), (0.4, 0.5)])
    assert np.allclose(bars(figure["val pass@4 (sampled, 95% CI)"]), [(0.3, 0.5), (0.5, 0.6)])


def test_a_point_keeps_only_the_plotted_figures():
    val = {**evaluation(0.2, 0.1, 0.3, {"pass_at_1": (0.25, 0.2, 0.3), "pass_at_4": (0.4, 0.3, 0.5)}),
           "val/field_accuracy": 0.5, "val/class/ACCEPT/NONE/task_success_rate": 1.0}
    assert sorted(plot_point(8, val)) == sorted(
        ["step", "val/task_success_rate", "val/task_success_rate/ci_low", "val/task_success_rate/ci_high",
         "val/sampled/samples_per_task", "val/sampled/pass_at_1", "val/sampled/pass_at_1/ci_low",
         "val/sampled/pass_at_1/ci_high", "val/sampled/pass_at_4", "val/sampled/pass_at_4/ci_low",
         "val/sampled/pass_at_4/ci_high"])
