"""Loading the six real SOP-Bench domains: discovery, counts, columns, NaN handling, no leaks, licence."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pandas as pd
import pytest

from sopgym.sopbench import load

from .helpers import REAL_DOMAINS, sopbench_dir

COUNTS = {
    "customer_service": 156, "order_fulfillment": 30, "referral_abuse_detection_v1": 200,
    "referral_abuse_detection_v2": 200, "traffic_spoofing_detection": 200, "warehouse_package_inspection": 150,
}


def test_discovery_finds_the_six_domains(real_report):
    assert sorted(real_report.domains) == sorted(REAL_DOMAINS), real_report.skipped
    assert real_report.skipped == {}


@pytest.mark.parametrize("name", REAL_DOMAINS)
def test_task_count_is_the_number_of_csv_rows(real_report, name):
    domain = real_report.domains[name]
    assert domain.num_tasks == COUNTS[name]
    assert gym.spec(f"sopbench/{name}-v0") is not None
    from sopgym.sop_tasks.registry import get_pack

    pack = get_pack(f"sopbench/{name}")
    assert (pack.num_tasks("test"), pack.num_tasks("train"), pack.num_tasks("val")) == (COUNTS[name], 0, 0)


def test_input_columns_follow_metadata_when_given(real_report):
    d = real_report.domains["customer_service"]
    assert d.inputs_rule == "metadata"
    assert d.input_columns == ("account_id", "service_area_code", "service_type", "subscribed_bandwidth")
    assert d.output_columns == ("final_resolution_status",)


def test_missing_input_columns_show_all_but_ground_truth(real_report):
    d = real_report.domains["order_fulfillment"]
    assert d.inputs_rule == "all_but_ground_truth"
    assert "expected_output" not in d.input_columns
    assert len(d.input_columns) == len(d.frame.columns) - 1


def test_missing_input_columns_hide_tool_only_columns_via_unlabelled_csv(real_report):
    d = real_report.domains["warehouse_package_inspection"]
    assert d.inputs_rule == "without_outputs_columns"
    assert set(d.hidden_columns) == {"problem_type", "package_condition", "barcode_match", "charge_back_amt"}
    assert "resolution_status" not in d.input_columns


def test_env_info_says_how_inputs_were_chosen(real_report):
    env = gym.make("sopbench/warehouse_package_inspection-v0")
    _, info = env.reset(seed=0)
    assert info["sopbench"]["inputs_rule"] == "without_outputs_columns"
    assert "problem_type" in info["sopbench"]["hidden_columns"]
    assert any("ground truth included" in n for n in info["sopbench"]["notes"])
    env.close()


def test_csv_is_read_with_pandas_default_semantics(real_report):
    for _name, d in real_report.domains.items():
        expected = pd.read_csv(d.path / "test_set_with_outputs.csv")
        pd.testing.assert_frame_equal(d.frame, expected)


def test_missing_cells_become_none_in_json_values_and_nan_in_raw_rows(real_report):
    d = real_report.domains["customer_service"]
    # Row 0 has an empty reason_for_account_status cell.
    assert math.isnan(d.raw_row(0)["reason_for_account_status"])
    assert d.row(0)["reason_for_account_status"] is None
    # The string "None" is NaN under pandas defaults (referral v2's rehabilitation status).
    v2 = real_report.domains["referral_abuse_detection_v2"]
    assert v2.row(0)["account_rehabilitation_status"] is None
    for _name, dom in real_report.domains.items():
        for i in range(dom.num_tasks):
            json.dumps(dom.row(i), allow_nan=False)  # no NaN survives in JSON values


def test_booleans_and_numbers_keep_inferred_types(real_report):
    d = real_report.domains["referral_abuse_detection_v1"]
    row = d.row(0)
    assert row["address_validity"] is False and isinstance(row["connected_accounts"], int)
    assert isinstance(row["revenue_amount"], float)


@pytest.mark.parametrize("style", ["chat", "upstream"])
def test_no_ground_truth_in_any_task_message(real_report, style):
    """Every task of every domain: the user message names no ground-truth column and never contains
    a label value that is not also one of the shown input values."""
    for name, d in real_report.domains.items():
        env = gym.make(f"sopbench/{name}-v0", prompt_style=style)
        for i in range(d.num_tasks):
            _, info = env.reset(options={"task_index": i})
            user = [m["content"] for m in info["messages"] if m["role"] == "user"][0]
            task_part = user.split("</sop>")[-1]
            keys = {line.split(":", 1)[0].lstrip("- ").strip() for line in task_part.splitlines() if ":" in line}
            assert not keys & set(d.output_columns), (name, i, keys & set(d.output_columns))
            shown = {str(v) for v in d.inputs(i).values()}
            for col, label in d.labels(i).items():
                if label is None or str(label) in shown:
                    continue
                assert f": {label}\n" not in task_part + "\n", (name, i, col, label)
        env.close()


def test_licence_without_training_condition_allows_training(real_report):
    assert all(d.training_allowed for d in real_report.domains.values())
    env = gym.make("sopbench/customer_service-v0")
    _, info = env.reset(seed=0)
    assert info["license"] == "CC-BY-NC-4.0" and info["training_allowed"] is True
    env.close()


def test_data_only_checkout_reports_missing_tools(real_report):
    for d in real_report.domains.values():
        assert not d.has_tools
        assert any("tools.py missing" in p for p in d.problems)


def test_load_accepts_a_single_domain_folder(real_report):
    report = load(sopbench_dir() / "order_fulfillment")
    assert list(report.domains) == ["order_fulfillment"]
