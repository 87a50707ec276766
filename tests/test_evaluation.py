"""The independent evaluator: metrics recomputed from hand-built and live episode records."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from episode_helpers import policy_records

from sopgym.episodes import EnvFactory, EnvPool, builtin_policy_agent, run_episodes, task_specs
from sopgym.episodes.specs import episode_seed
from sopgym.evaluation import evaluate_records, load_records, score_record
from sopgym.status import INFRASTRUCTURE, INVALID_ACTION, Status

REPO = Path(__file__).resolve().parents[1]
EVAL_DIR = REPO / "sopgym" / "evaluation"
WR = "sopgym/WarehouseReceiving-v0"

FIELDS = [
    {"name": "disposition", "type": "string", "enum": ["ACCEPT", "REJECT", "QUARANTINE"], "nullable": False},
    {"name": "count", "type": "integer", "enum": None, "nullable": True},
]
RIGHT = {"disposition": "REJECT", "count": 3}


def rec(task_id="T/test/0", **over):
    """A finished, correct, submitted episode; override any key."""
    base = {
        "env_id": "sopgym/T-v0", "domain": "T", "task_id": task_id, "split": "test", "difficulty": "easy",
        "answer": dict(RIGHT), "expected": dict(RIGHT), "fields": FIELDS,
        "final_state": None, "expected_state": None,
        "turns": 3, "statuses": ["OK", "OK", "SUBMITTED"], "num_tool_calls": 2, "num_tool_calls_ok": 2,
        "num_invalid_actions": 0, "terminated": True, "truncated": False, "truncation_cause": None,
        "infrastructure_failure": False, "reward": 1.0, "reward_components": {},
    }
    base.update(over)
    return base


def truncated(cause, **over):
    return rec(answer=None, terminated=False, truncated=True, truncation_cause=cause, reward=0.0, **over)


# -- correctness is recomputed ------------------------------------------------------------------
def test_success_ignores_a_record_reward_that_claims_success():
    wrong = rec(answer={"disposition": "ACCEPT", "count": 3}, reward=1.0, reward_components={"field/disposition": 1.0})
    assert evaluate_records([wrong], n_bootstrap=0)["task_success_rate"] == 0.0


def test_success_ignores_a_record_reward_that_claims_failure():
    assert evaluate_records([rec(reward=0.0)], n_bootstrap=0)["task_success_rate"] == 1.0


def test_answers_are_compared_after_strict_normalisation():
    score = score_record(rec(answer={"disposition": "  reject ", "count": 3.0}))
    assert score.fields == {"disposition": True, "count": True}


@pytest.mark.parametrize("answer", [
    None,
    "REJECT",
    ["REJECT", 3],
    {"disposition": "REJECT"},                                   # missing field
    {"disposition": "REJECT", "count": 3, "note": "x"},          # extra field
    {"disposition": "REJECT or QUARANTINE", "count": 3},         # two values in one field
    {"disposition": "REJECT", "count": "3"},                     # wrong type
])
def test_malformed_answers_are_not_success(answer):
    assert score_record(rec(answer=answer)).success is False


@pytest.mark.parametrize("answer,completed", [
    (None, False),
    ({"disposition": "REJECT"}, False),
    ({"disposition": "MAYBE", "count": 3}, False),   # well formed, value outside the enum
    ({"disposition": "ACCEPT", "count": None}, True),  # legal (nullable), but wrong
])
def test_completion_needs_a_well_formed_legal_submission(answer, completed):
    assert score_record(rec(answer=answer)).completed is completed


def test_field_accuracy_is_per_field_and_mean_over_episodes():
    records = [
        rec(),                                                        # 2/2
        rec(answer={"disposition": "ACCEPT", "count": 3}),            # 1/2
        rec(answer={"disposition": "ACCEPT", "count": 4}),            # 0/2
        rec(answer={"disposition": "REJECT"}),                        # malformed: 0/2
    ]
    out = evaluate_records(records, n_bootstrap=0)
    assert out["field_accuracy_per_field"] == {"disposition": 0.25, "count": 0.5}
    assert out["field_accuracy"] == pytest.approx((1 + 0.5 + 0 + 0) / 4)


def test_field_names_are_qualified_by_domain_when_records_mix_domains():
    out = evaluate_records([rec(), rec(domain="U", task_id="U/test/0")], n_bootstrap=0)
    assert set(out["field_accuracy_per_field"]) == {"T/disposition", "T/count", "U/disposition", "U/count"}


def test_expected_state_must_match_the_final_state():
    want = {"cases": [["C-1", "open"]], "notes": 2}
    assert score_record(rec(final_state={"cases": [["C-1", "open"]], "notes": 2, "other": 1}, expected_state=want)).success
    assert not score_record(rec(final_state={"cases": [["C-1", "closed"]], "notes": 2}, expected_state=want)).success
    assert not score_record(rec(final_state={"cases": [["C-1", "open"]]}, expected_state=want)).success
    assert not score_record(rec(final_state=None, expected_state=want)).success


def test_state_comparison_treats_tuples_like_their_json_lists():
    live = rec(final_state={"cases": [("C-1", "open")]}, expected_state={"cases": [["C-1", "open"]]})
    assert score_record(live).state_ok


# -- rates --------------------------------------------------------------------------------------
def test_truncation_rate_overall_and_by_cause():
    records = [truncated("max_turns"), truncated("max_turns"), truncated("context_budget"), rec()]
    out = evaluate_records(records, n_bootstrap=0)
    assert out["truncation_rate"] == 0.75
    assert out["truncation_rate_by_cause"] == {"context_budget": 0.25, "max_turns": 0.5}
    assert out["counts"]["truncated_by_cause"] == {"context_budget": 1, "max_turns": 2}


def test_truncation_without_a_cause_is_reported_as_unknown():
    out = evaluate_records([truncated(None)], n_bootstrap=0)
    assert out["truncation_rate_by_cause"] == {"unknown": 1.0}


def test_infrastructure_failures_are_counted_and_not_completions():
    records = [
        truncated("sandbox", infrastructure_failure=True, statuses=["OK", "ERROR_SANDBOX"], turns=2),
        rec(infrastructure_failure=False, statuses=["ERROR_SANDBOX"], turns=1, answer=None, terminated=False,
            truncated=True, truncation_cause="sandbox"),   # flag missing, status says so
        rec(),
        rec(answer={"disposition": "ACCEPT", "count": 3}),
    ]
    out = evaluate_records(records, n_bootstrap=0)
    assert out["infrastructure_failure_rate"] == 0.5
    assert out["execution_completion_rate"] == 0.5
    assert out["task_success_rate"] == 0.25
    assert out["task_success_rate_excluding_infrastructure"] == 0.5


def test_execution_completion_and_conditional_success():
    records = [rec(), rec(answer={"disposition": "ACCEPT", "count": 3}), truncated("max_turns"), truncated("max_turns")]
    out = evaluate_records(records, n_bootstrap=0)
    assert out["execution_completion_rate"] == 0.5
    assert out["conditional_task_success_rate"] == 0.5


def test_conditional_success_is_none_when_nothing_completed():
    assert evaluate_records([truncated("max_turns")], n_bootstrap=0)["conditional_task_success_rate"] is None


def test_tool_call_accuracy_is_ok_calls_over_calls():
    out = evaluate_records([rec(num_tool_calls=4, num_tool_calls_ok=1), rec(num_tool_calls=0, num_tool_calls_ok=0),
                            rec(num_tool_calls=4, num_tool_calls_ok=4)], n_bootstrap=0)
    assert out["tool_call_accuracy"] == pytest.approx(5 / 8)


def test_tool_call_accuracy_is_none_without_calls():
    assert evaluate_records([rec(num_tool_calls=0, num_tool_calls_ok=0)], n_bootstrap=0)["tool_call_accuracy"] is None


def test_invalid_action_rate_counts_invalid_turn_statuses_over_turns():
    records = [
        rec(turns=4, statuses=["NO_TOOL_CALL", "ERROR_PARSE", "ERROR_TOOL", "SUBMITTED"], num_invalid_actions=0),
        rec(turns=4, statuses=["ERROR_UNKNOWN_TOOL", "ERROR_BAD_ARGUMENTS", "OK", "SUBMITTED"]),
    ]
    out = evaluate_records(records, n_bootstrap=0)
    assert out["invalid_action_rate"] == pytest.approx(4 / 8)
    assert out["mean_turns"] == 4


def test_invalid_actions_fall_back_to_the_count_without_statuses():
    record = rec(turns=5, num_invalid_actions=2)
    del record["statuses"]
    assert evaluate_records([record], n_bootstrap=0)["invalid_action_rate"] == pytest.approx(0.4)


@pytest.mark.parametrize("status", [s.value for s in Status])
def test_evaluator_counts_each_turn_status_in_its_status_class(status):
    score = score_record(rec(turns=1, statuses=[status], answer=None, terminated=False, truncated=True,
                             truncation_cause="max_turns"))
    assert score.invalid_actions == (1 if Status(status) in INVALID_ACTION else 0)
    assert score.infrastructure_failure == (Status(status) in INFRASTRUCTURE)


def test_pass_at_k_and_pass_hat_k_group_samples_by_task():
    records = [rec("A", answer=None)] * 2 + [rec("A")] + [rec("B")] * 3
    out = evaluate_records(records, k=2, n_bootstrap=0)
    assert out["num_tasks"] == 2 and out["min_samples_per_task"] == 3
    assert out["pass_at_k"] == pytest.approx((2 / 3 + 1) / 2)   # A: 1 - C(2,2)/C(3,2)
    assert out["pass_hat_k"] == pytest.approx((0 + 1) / 2)      # A: C(1,2)=0


def test_pass_at_k_needs_k_samples_of_every_task():
    with pytest.raises(ValueError, match="k=2 needs at least 2 episodes per task"):
        evaluate_records([rec("A"), rec("A"), rec("B")], k=2)


def test_headline_rates_get_intervals_containing_them():
    records = [rec(f"t{i}", answer=None if i % 3 else RIGHT) for i in range(30) for _ in range(2)]
    out = evaluate_records(records, k=2, n_bootstrap=300, seed=3)
    for name in ("task_success_rate", "field_accuracy", "execution_completion_rate", "pass_at_k", "pass_hat_k"):
        low, high = out["ci95"][name]
        assert low <= out[name] <= high, name
    assert out["ci95"]["task_success_rate"][0] < out["ci95"]["task_success_rate"][1]


def test_no_intervals_when_bootstrap_is_off():
    assert evaluate_records([rec()], n_bootstrap=0)["ci95"] == {}


def test_results_are_json_serialisable():
    out = evaluate_records([rec(), truncated("max_turns")], n_bootstrap=50)
    assert json.loads(json.dumps(out, allow_nan=False)) == out


@pytest.mark.parametrize("broken,match", [
    ({"expected": None}, "'expected' must be a dict"),
    ({"fields": []}, "non-empty list"),
    ({"num_tool_calls": -1}, "num_tool_calls"),
    ({"num_tool_calls": 1, "num_tool_calls_ok": 2}, "exceeds"),
    ({"turns": "3"}, "'turns' must be a non-negative integer"),
])
def test_malformed_records_raise_value_errors_naming_the_record(broken, match):
    with pytest.raises(ValueError, match=f"record 1: .*{match}"):
        evaluate_records([rec(), rec(**broken)], n_bootstrap=0)


def test_a_record_missing_a_key_names_the_key():
    record = rec()
    del record["expected"]
    with pytest.raises(ValueError, match=r"record 0: episode record is missing keys \['expected'\]"):
        evaluate_records([record], n_bootstrap=0)


def test_no_records_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        evaluate_records([])


# -- independence from the reward ---------------------------------------------------------------
def _imported_modules(path: Path) -> set[str]:
    """Absolute names of everything a file of sopgym.evaluation imports (relative imports resolved)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "sopgym.evaluation".split(".")[: 2 - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            names.add(module)
            names |= {f"{module}.{a.name}" for a in node.names}
    return names


def test_import_scan_sees_relative_and_absolute_reward_imports(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ..envs import reward\nimport sopgym.envs.reward as r\nfrom sopgym.envs.reward import outcome_reward\n")
    found = _imported_modules(bad)
    assert {"sopgym.envs.reward", "sopgym.envs.reward.outcome_reward"} <= found


def test_no_evaluation_module_imports_the_reward_module():
    for path in EVAL_DIR.glob("*.py"):
        bad = {m for m in _imported_modules(path) if m.endswith("reward") or ".reward." in m}
        assert bad == set(), f"{path.name} imports {bad}"


@pytest.mark.parametrize("name", ["metrics.py", "passk.py", "__init__.py", "../episodes/progress.py"])
def test_metric_modules_import_nothing_from_envs(name):
    bad = {m for m in _imported_modules(EVAL_DIR / name) if m.startswith(("sopgym.envs", "envs"))}
    assert bad == set()


def test_metrics_run_in_an_interpreter_where_envs_cannot_be_imported():
    code = f"""
import importlib.abc, sys, types
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "sopgym.envs" or name.startswith("sopgym.envs."):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
pkg = types.ModuleType("sopgym"); pkg.__path__ = [{str(REPO / "sopgym")!r}]
sys.modules["sopgym"] = pkg  # skip sopgym/__init__, which registers the envs
from sopgym.evaluation import evaluate_records
rec = {{"task_id": "t", "answer": {{"x": "A"}}, "expected": {{"x": "a"}}, "turns": 1, "statuses": ["SUBMITTED"],
       "fields": [{{"name": "x", "type": "string"}}], "terminated": True, "truncated": False}}
print(evaluate_records([rec], n_bootstrap=10)["task_success_rate"])
print(sorted(m for m in sys.modules if m.startswith("sopgym.envs")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1.0", "[]"]


# -- live runs ----------------------------------------------------------------------------------
def test_oracle_live_records_score_full_success():
    records = policy_records(WR, "oracle", 10, 1, 0, "test", {})
    out = evaluate_records(records, n_bootstrap=0)
    assert (out["task_success_rate"], out["execution_completion_rate"], out["tool_call_accuracy"]) == (1.0, 1.0, 1.0)


def test_evaluator_success_equals_the_binary_env_reward_on_live_episodes():
    records = policy_records(WR, "random", 20, 2, 1, "test", {"reward": "binary"})
    records += policy_records(WR, "oracle", 5, 1, 1, "test", {"reward": "binary"})
    assert [score_record(r).success for r in records] == [r["reward"] == 1.0 for r in records]


def test_policy_runs_repeat_each_task_with_distinct_seeds():
    records = policy_records(WR, "random", 6, 4, 0, "test", {})
    assert [r["task_id"] for r in records] == [f"WarehouseReceiving/test/{i}" for i in range(6) for _ in range(4)]
    assert len({episode_seed(0, t, s) for t in range(6) for s in range(4)}) == 24
    per_task = [json.dumps([r["statuses"] for r in records[i:i + 4]]) for i in range(0, 24, 4)]
    assert any(len({json.dumps(r["statuses"]) for r in records[i:i + 4]}) > 1 for i in range(0, 24, 4)), per_task


def test_policy_runs_are_reproducible_under_a_seed():
    first = policy_records(WR, "random", 5, 2, 11, "test", {})
    assert policy_records(WR, "random", 5, 2, 11, "test", {}) == first


def test_a_run_past_the_splits_tasks_is_refused():
    pool = EnvPool(EnvFactory(split="test"))
    try:
        with pytest.raises(ValueError, match=r"task_index'\] must be an int in \[0, 200\) \(split 'test'\), got 200"):
            run_episodes(task_specs(WR, "test", 1, first_task=200), builtin_policy_agent("oracle"), pool)
    finally:
        pool.close()


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="policy must be one of"):
        builtin_policy_agent("genius")


def test_load_records_reads_bare_record_files(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (rec(), truncated("max_turns"))) + "\n\n")
    assert load_records(path) == [rec(), truncated("max_turns")]


def test_load_records_names_the_line_of_invalid_json(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(rec()) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        load_records(path)
