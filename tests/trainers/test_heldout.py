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


# --- the training loop's held-out evaluations (a tiny model on the fake env) --------------------------


def _train(tmp_path, tok_dir, *extra):
    from sopgym.trainers.loop import train

    from . import fake_env
    from .helpers import fake_env_config

    cfg = fake_env_config(tok_dir, tmp_path, "eval_num_tasks=4", "eval_bootstrap=100", *extra)
    return train(cfg, make_env=lambda env_id: fake_env.FakeSopEnv(max_turns=2, shaped=True))


def test_a_run_reports_sampled_pass_at_k_before_and_after_rl(tmp_path, tok_dir, capsys):
    result = _train(tmp_path, tok_dir, "steps=1", "eval_samples=3")
    for val in (result.val_before, result.val_after):
        assert 0.0 <= val["val/sampled/pass_at_1"] <= val["val/sampled/pass_at_3"] <= 1.0
        assert val["val/sampled/pass_at_3/ci_low"] <= val["val/sampled/pass_at_3"] <= val["val/sampled/pass_at_3/ci_high"]
        assert val["val/sampled/samples_per_task"] == 3
    out = capsys.readouterr().out
    assert "  sampled (T=" in out and ", 3 per task): pass@1 " in out


def test_without_eval_samples_only_the_greedy_figures_are_reported(tmp_path, tok_dir, capsys):
    result = _train(tmp_path, tok_dir, "steps=1")
    assert not any(key.startswith("val/sampled/") for key in result.val_after)
    assert "sampled (" not in capsys.readouterr().out


def test_the_paired_difference_is_after_minus_before_on_the_same_tasks(tmp_path, tok_dir, capsys):
    result = _train(tmp_path, tok_dir, "steps=1")
    gain = result.val_after["val/task_success_rate"] - result.val_before["val/task_success_rate"]
    assert result.paired["difference"] == pytest.approx(gain) and result.paired["tasks"] == 4
    assert result.paired["ci_low"] <= result.paired["difference"] <= result.paired["ci_high"]
    last = capsys.readouterr().out.splitlines()
    assert last[-2].startswith("held-out success before RL: ") and last[-1].startswith(
        "  paired difference (after - before, greedy): ")


def test_the_paired_difference_of_a_resumed_run_pairs_with_the_evaluation_before_its_first_part(tmp_path, tok_dir):
    straight = _train(tmp_path / "a", tok_dir, "steps=2")
    _train(tmp_path / "b", tok_dir, "steps=1")
    resumed = _train(tmp_path / "b", tok_dir, "steps=2")  # steps is a run-length key: the run continues
    assert resumed.paired == straight.paired and resumed.paired["tasks"] == 4


def test_the_held_out_figures_are_logged_to_mlflow(tmp_path, tok_dir):
    from mlflow.tracking import MlflowClient

    result = _train(tmp_path, tok_dir, "steps=1", "tracking.enabled=true")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    metrics = client.get_run(result.run_id).data.metrics
    for key in ("val/task_success_rate/ci_low", "val/task_success_rate/ci_high", "val/classes_never_solved",
                "val/paired/difference", "val/paired/ci_low", "val/paired/ci_high"):
        assert key in metrics, key
    assert [m.step for m in client.get_metric_history(result.run_id, "val/paired/difference")] == [1]
