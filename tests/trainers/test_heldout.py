"""sopgym.trainers.heldout: the held-out metrics of RL runs (issue 22), on evaluator records."""

from __future__ import annotations

import re

import pytest

from sopgym.evaluation import evaluate_records
from sopgym.trainers.heldout import greedy_metrics, outcome_class, paired_difference, sampled_metrics

FIELDS = [{"name": "disposition", "type": "string", "enum": ["ACCEPT", "REJECT", "QUARANTINE"]},
          {"name": "reason_code", "type": "string", "enum": ["NONE", "DAMAGE", "TEMP"]},
          {"name": "accepted_pallets", "type": "integer", "enum": None}]
CLASSES = [("ACCEPT", "NONE"), ("REJECT", "DAMAGE"), ("QUARANTINE", "TEMP")]


def _record(task: int, right: bool) -> dict:
    disposition, reason = CLASSES[task % 3]
    expected = {"disposition": disposition, "reason_code": reason, "accepted_pallets": task}
    answer = dict(expected) if right else {**expected, "accepted_pallets": task + 1}
    return {"task_id": f"t{task}", "answer": answer, "expected": expected, "fields": FIELDS, "turns": 3,
            "statuses": ["OK", "OK", "SUBMITTED"], "terminated": True, "truncated": False}


def _run(successes: dict[int, list[bool]]) -> list[dict]:
    return [_record(task, right) for task, outcomes in successes.items() for right in outcomes]


def test_the_outcome_class_is_the_expected_answers_categorical_fields():
    assert outcome_class(_record(4, False)) == "REJECT/DAMAGE"
    assert outcome_class({**_record(0, True), "fields": [FIELDS[2]]}) == "all"


def test_greedy_success_and_its_interval_are_the_evaluators():
    records = _run({t: [t % 4 != 0] for t in range(40)})
    out = greedy_metrics(records, n_bootstrap=500, seed=3)
    result = evaluate_records(records, n_bootstrap=500, seed=3)
    assert out["val/task_success_rate"] == result["task_success_rate"] == 0.75
    assert [out["val/task_success_rate/ci_low"], out["val/task_success_rate/ci_high"]] == result["ci95"]["task_success_rate"]
    assert out["val/field_accuracy/accepted_pallets"] == 0.75 and out["val/field_accuracy/disposition"] == 1.0


def test_a_class_never_solved_is_counted_and_each_class_has_its_rate():
    # every task of class 0 (t % 3 == 0) wrong, the others right
    records = _run({t: [t % 3 != 0] for t in range(30)})
    out = greedy_metrics(records, n_bootstrap=0)
    assert out["val/class/ACCEPT/NONE/task_success_rate"] == 0.0 and out["val/class/REJECT/DAMAGE/task_success_rate"] == 1.0
    assert sum(out[f"val/class/{d}/{r}/episodes"] for d, r in CLASSES) == 30
    assert out["val/classes_never_solved"] == 1.0


def test_pass_at_k_counts_a_task_any_of_whose_samples_succeeds():
    # 20 tasks, 4 samples each: half the tasks right in 1 sample of 4, the others never
    records = _run({t: [t % 2 == 0 and s == 0 for s in range(4)] for t in range(20)})
    out = sampled_metrics(records, k=4, n_bootstrap=300)
    assert out["val/sampled/pass_at_1"] == pytest.approx(0.125) and out["val/sampled/pass_at_4"] == pytest.approx(0.5)
    assert out["val/sampled/pass_at_4/ci_low"] <= 0.5 <= out["val/sampled/pass_at_4/ci_high"]
    assert out["val/sampled/samples_per_task"] == 4


def test_sampled_metrics_refuse_tasks_with_fewer_than_k_samples():
    with pytest.raises(ValueError, match="k=4 needs at least 4 episodes per task"):
        sampled_metrics(_run({0: [True, False]}), k=4)


def test_the_same_episodes_before_and_after_differ_by_exactly_zero():
    records = _run({t: [t % 3 == 0] for t in range(30)})
    assert paired_difference(records, records, n_bootstrap=200) == {"difference": 0.0, "ci_low": 0.0, "ci_high": 0.0,
                                                                    "tasks": 30.0}


def test_a_gain_on_the_same_tasks_has_a_paired_interval_that_excludes_zero():
    before = _run({t: [t % 2 == 0] for t in range(64)})
    after = _run({t: [t % 2 == 0 or t % 8 == 1] for t in range(64)})  # 8 more tasks right, none lost
    out = paired_difference(before, after, n_bootstrap=1000)
    assert out["difference"] == pytest.approx(8 / 64) and out["ci_low"] > 0


def test_a_paired_difference_over_different_tasks_is_refused_naming_them():
    with pytest.raises(ValueError, match=r"expected equal task sets, got 2 and 2 tasks \(only before: \['t0'\], only after: \['t2'\]\)"):
        paired_difference(_run({0: [True], 1: [True]}), _run({1: [True], 2: [False]}))


def test_every_key_is_a_valid_mlflow_metric_name():
    odd = [{**r, "expected": {**r["expected"], "disposition": "ACCEPT@<night>"}} for r in _run({0: [True], 1: [False]})]
    keys = [*greedy_metrics(odd, n_bootstrap=10), *sampled_metrics(_run({0: [True, False]}), k=2, n_bootstrap=10)]
    assert keys and all(re.fullmatch(r"[A-Za-z0-9_\-. /]+", key) for key in keys), keys
