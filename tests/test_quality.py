"""Domain quality checks (sopgym/authoring/quality.py), the scaffold (sopgym/authoring/scaffold.py) and the inputs-only baseline.

Each negative test breaks one property of a known-good pack (the scaffold) and checks that exactly
the matching check fails.
"""

from __future__ import annotations

import dataclasses

import pytest

from sopgym.authoring.quality import load_pack_from_path, validate_pack
from sopgym.authoring.scaffold import new_domain

SMALL = {"train_tasks": 30}


@pytest.fixture(scope="module")
def scaffold(tmp_path_factory):
    folder = new_domain("ScaffoldProbe", tmp_path_factory.mktemp("domains"))
    return load_pack_from_path(folder)


def failing(report):
    return sorted(c.name for c in report.checks if not c.ok)


def variant(pack, name, **changes):
    from sopgym.sop_tasks.registry import register_pack

    new = dataclasses.replace(pack, name=name, **changes)
    register_pack(new, replace=True)
    return new


def test_scaffolded_domain_passes_every_check(scaffold):
    report = validate_pack(scaffold, **SMALL)
    assert failing(report) == [], report.format()


def test_wrong_solver_fails_the_oracle_check(scaffold):
    def wrong(inputs):
        answer = yield from scaffold.solver(inputs)
        return {"decision": "APPROVE_REPAIR"} if answer["decision"] == "NO_FAULT_FOUND" else answer

    assert "oracle" in failing(validate_pack(variant(scaffold, "ProbeWrongSolver", solver=wrong), **SMALL))


def test_short_sop_fails_the_sop_check(scaffold):
    assert failing(validate_pack(variant(scaffold, "ProbeShortSop", sop="1. Decide.\n"), **SMALL)) == ["sop"]


def test_unused_tool_fails_the_coverage_check(scaffold):
    tools = tuple(dataclasses.replace(t, distractor=False) if t.name == "get_promotions" else t for t in scaffold.tools)
    assert "coverage" in failing(validate_pack(variant(scaffold, "ProbeUnusedTool", tools=tools), **SMALL))


def test_unbalanced_labels_fail_the_balance_check(scaffold):
    def skewed(rng, split, index):
        return scaffold.generate(rng, split, 0 if index % 2 else index)  # half the tasks share index 0's label

    report = validate_pack(variant(scaffold, "ProbeSkewed", generate=skewed), **SMALL)
    assert "balance" in failing(report)


def test_answer_leaking_input_fails_the_baseline_check(scaffold):
    def leaky(rng, split, index):
        task = dict(scaffold.generate(rng, split, index))
        task["inputs"] = {**task["inputs"], "hint": task["answer"]["decision"]}
        return task

    report = validate_pack(variant(scaffold, "ProbeLeaky", generate=leaky), **SMALL)
    assert "baselines" in failing(report)
    assert report.figures["baselines_test_success"]["inputs-only"] == 1.0


def test_new_domain_refuses_bad_names_and_existing_folders(tmp_path):
    with pytest.raises(ValueError, match="CamelCase"):
        new_domain("bad name", tmp_path)
    new_domain("Twice", tmp_path)
    with pytest.raises(ValueError, match="already exists"):
        new_domain("Twice", tmp_path)
