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


# -- Difficulty must not predict the label (issue 12) ---------------------------------------------------
def test_a_difficulty_derived_from_the_label_fails_the_difficulty_label_check(scaffold):
    def leaky_difficulty(rng, split, index):
        task = dict(scaffold.generate(rng, split, index))
        early = task["answer"]["decision"] == "DENY_SELLER"
        task["difficulty"] = "easy" if early else ("medium" if task["answer"]["decision"].startswith("DENY") else "hard")
        return task

    report = validate_pack(variant(scaffold, "ProbeLeakyDifficulty", generate=leaky_difficulty), **SMALL)
    assert failing(report) == ["difficulty_label"], report.format()
    assert report.figures["difficulty_label_guess"]["test"] > 0.4


def test_difficulty_guess_accuracy_is_the_share_of_the_most_common_label_per_level():
    from types import SimpleNamespace as T

    from sopgym.authoring.quality import difficulty_guess_accuracy

    tasks = [T(difficulty="easy", answer={"d": "A"})] * 3 + [T(difficulty="easy", answer={"d": "B"})] + \
        [T(difficulty="hard", answer={"d": x}) for x in "ABCD"]
    assert difficulty_guess_accuracy(tasks, "d") == (3 + 1) / 8


# -- One-line errors, exit code 2 (issue 12) ------------------------------------------------------------
def _one_line_error(capsys, argv, *words):
    from sopgym import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


def test_validate_domain_on_a_missing_path_is_one_line(capsys, tmp_path):
    _one_line_error(capsys, ["validate-domain", str(tmp_path / "nope")], "nope", "expected a domain-pack folder")


def test_validate_domain_on_a_folder_without_pack_is_one_line(capsys, tmp_path):
    (tmp_path / "nopack").mkdir()
    (tmp_path / "nopack" / "__init__.py").write_text("X = 1\n")
    _one_line_error(capsys, ["validate-domain", str(tmp_path / "nopack")], "PACK", "DomainPack")


def test_validate_domain_on_a_pack_that_fails_to_import_is_one_line_naming_where(capsys, tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "__init__.py").write_text("import json\n\nraise RuntimeError('half-written pack')\n")
    _one_line_error(capsys, ["validate-domain", str(tmp_path / "broken")], "RuntimeError", "half-written pack", "__init__.py:3")
    (tmp_path / "syntax").mkdir()
    (tmp_path / "syntax" / "__init__.py").write_text("def broken(:\n")
    _one_line_error(capsys, ["validate-domain", str(tmp_path / "syntax")], "SyntaxError", "__init__.py:1")


def test_validate_domain_whose_generator_raises_is_one_line(capsys, scaffold):
    def raising(rng, split, index):
        raise KeyError("a generator bug")

    variant(scaffold, "ProbeRaisingGenerator", generate=raising)
    _one_line_error(capsys, ["validate-domain", "ProbeRaisingGenerator"], "stopped", "KeyError", "a generator bug")


@pytest.mark.parametrize("argv", [["--max-baseline", "2"], ["--max-baseline", "-0.1"]])
def test_validate_domain_rejects_bad_options_in_one_line(capsys, argv):
    _one_line_error(capsys, ["validate-domain", "WarehouseReceiving", *argv], "--max-baseline")


def test_validate_domain_rejects_a_negative_train_task_count(capsys):
    with pytest.raises(SystemExit) as exit_info:
        from sopgym import cli

        cli.main(["validate-domain", "WarehouseReceiving", "--train-tasks", "-1"])
    assert exit_info.value.code == 2 and "expected an integer >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["bad name", "lowercase", "Has-Dash"])
def test_new_domain_with_a_bad_name_is_one_line(capsys, tmp_path, name):
    _one_line_error(capsys, ["new-domain", name, "--dest", str(tmp_path)], "CamelCase")


def test_new_domain_over_an_existing_folder_or_into_a_file_is_one_line(capsys, tmp_path):
    (tmp_path / "twice").mkdir()
    _one_line_error(capsys, ["new-domain", "Twice", "--dest", str(tmp_path)], "already exists")
    (tmp_path / "a_file").write_text("x")
    _one_line_error(capsys, ["new-domain", "Fresh", "--dest", str(tmp_path / "a_file")], "a_file")
