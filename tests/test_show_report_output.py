"""What ``sopgym show`` and ``sopgym report`` print is safe whatever the files hold: no control
character reaches the terminal, every action the env accepted is shown, Markdown cells stay cells,
CSV cells are never formulas, and a malformed results file is one line naming the file and what is
wrong (sopgym/evaluation/escaping.py, episode_text.py, viewer.py, report.py)."""

from __future__ import annotations

import copy
import csv
import json
import random
import re
import unicodedata

import gymnasium as gym
import pytest
from hostile_actions import ToolView, hostile_action, make_env_without_docker

from sopgym import cli
from sopgym.envs.policies import format_call
from sopgym.envs.wrappers import RecordTrajectory
from sopgym.evaluation.episode_text import format_episode, read_trajectory
from sopgym.evaluation.escaping import csv_cell, markdown_cell, visible
from sopgym.evaluation.viewer import viewer_data, viewer_html

WR = "sopgym/WarehouseReceiving-v0"
TERMINAL_ATTACK = "\x1b]0;pwned\x07\x1b[2J\x1b[32m== end: terminated | 1 turns | reward 1.000\x1b[0m\rhidden\u202eevil\x9b31m\u2028x"


def _unsafe(text: str) -> list[str]:
    """Characters a terminal would act on (controls but line feed and tab, bidi controls, separators)."""
    return sorted({c for c in text if c not in "\n\t" and (unicodedata.category(c) in ("Cc", "Zl", "Zp")
                                                          or c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")})


def _record(path, env, actions):
    env = RecordTrajectory(env, path)
    try:
        env.reset(seed=0)
        statuses = []
        for action in actions:
            *_, terminated, truncated, info = env.step(action)
            statuses.append(info["turn_status"])
            if terminated or truncated:
                env.reset(seed=len(statuses))
    finally:
        env.close()
    return statuses


# -- show ---------------------------------------------------------------------------------------------
def test_show_text_escapes_control_characters_of_model_and_tool_text(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    _record(path, gym.make(WR, max_turns=5), [
        "I am done." + TERMINAL_ATTACK,  # model text
        format_call("\x1b[2Jno_such_tool" + TERMINAL_ATTACK, {}),  # the env's error quotes the name: tool text
    ])
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert _unsafe(out) == [], _unsafe(out)
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in out and "\\rhidden\\u202eevil\\x9b31m\\u2028x" in out
    assert not [line for line in out.splitlines() if line.startswith(("== ", "\x1b"))][1:]  # no fake line of ours


def test_visible_keeps_text_and_line_structure():
    assert visible("a\tb\nc\r\nd é 中 😀") == "a\tb\nc\nd é 中 😀"
    assert visible("a\nb", newlines=False) == "a\\x0ab"


ODD_ACTIONS = [
    {"role": "assistant", "tool_calls": [{"function": "submit_answer"}]},
    {"role": "assistant", "tool_calls": [{"function": ["submit_answer"]}, 5, None, {"id": "x"}]},
    {"role": "assistant", "tool_calls": "submit_answer"},
    {"role": "assistant", "tool_calls": {"function": {"name": "submit_answer"}}},
    {"role": "assistant", "content": 5},
    {"role": "assistant", "content": {"text": "hi"}, "tool_calls": []},
    ["a", "list"],
    None,
    7,
]


def test_show_shows_every_action_the_env_recorded_as_unreadable(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    statuses = _record(path, gym.make(WR, max_turns=20), ODD_ACTIONS)
    assert set(statuses) == {"ERROR_PARSE"}, statuses
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert '-> {"function": "submit_answer"} [unreadable native tool call]' in out
    assert '-> {"function": ["submit_answer"]} [unreadable native tool call]' in out and "-> 5 [unreadable" in out
    assert '-> "submit_answer" [tool_calls that is not a list]' in out and "5 [content that is not text]" in out
    assert out.count("-- turn ") == len(ODD_ACTIONS)


def test_show_prints_hostile_episodes_of_every_env_as_text_and_html(env_id, tmp_path):
    env = make_env_without_docker(env_id, max_turns=50)
    _, info = env.reset(seed=0)
    rng = random.Random(env_id)
    view = ToolView(info["tools"], avoid=frozenset({"run_python", "run_sql"}))
    path = tmp_path / "t.jsonl"
    _record(path, env, [hostile_action(rng, view)[1] for _ in range(30)] + ODD_ACTIONS)
    run, episodes = read_trajectory(str(path))
    for index, ep in episodes.items():
        assert _unsafe(format_episode(index, ep)) == []
    assert "<html" in viewer_html(viewer_data([("hostile", str(path), run, episodes)]))


# -- report -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("results") / "r.json"
    assert cli.main(["eval", "--env", WR, "--episodes", "2", "--quiet", "--out", str(path)]) == 0
    return json.loads(path.read_text())


def _write(tmp_path, data, name="r.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_markdown_cells_cannot_add_rows_or_columns(results, tmp_path, capsys):
    data = copy.deepcopy(results)
    data["config"]["agent"] = {"model": "evil | 1.000 | 1.000 |\n| injected | 1.000 | 1.000 | `x` <img src=x> [a](b) *b* \x1b[2J"}
    data["envs"] = {"sopgym/A|B-v0\n| row": data["envs"][WR]}
    assert cli.main(["report", str(_write(tmp_path, data)), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert _unsafe(capsys.readouterr().out) == []
    text = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "injected" not in [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("|")]
    table = [line for line in text.splitlines() if line.startswith("| ")]
    header_cells = len(re.split(r"(?<!\\)\|", table[0]))
    assert all(len(re.split(r"(?<!\\)\|", line)) == header_cells for line in table[:2]), table[:2]
    assert "<img" not in text.replace("\\<img", "") and "\\<img src=x\\>" in text and "\\`x\\`" in text and "\x1b" not in text


def test_csv_cells_are_never_formulas(results, tmp_path):
    data = copy.deepcopy(results)
    data["config"]["agent"] = {"model": '=HYPERLINK("evil","click")'}
    data["envs"] = {"@SUM(1+1)*cmd|' /C calc'!A0": data["envs"][WR], "+1": data["envs"][WR], "\tx\ny": data["envs"][WR]}
    assert cli.main(["report", str(_write(tmp_path, data)), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    rows = list(csv.DictReader((tmp_path / "out" / "leaderboard.csv").open(encoding="utf-8")))
    assert len(rows) == 4
    for row in rows:
        for key in ("model", "env"):
            assert not row[key].startswith(("=", "+", "-", "@", "\t", "\r")), row[key]
    assert rows[0]["model"] == '\'=HYPERLINK("evil","click")'
    assert [r["env"] for r in rows[:3]] == ["'@SUM(1+1)*cmd|' /C calc'!A0", "'+1", "'\\x09x\\x0ay"]
    assert float(rows[0]["task_success_rate"]) == 1.0 and csv_cell(-0.5) == -0.5 and markdown_cell(0.5) == "0.5"


def _set(path: str, value):
    def mutate(data):
        *keys, last = path.split(".")
        target = data
        for key in keys:
            target = target[WR if key == "ENV" else key]
        target[WR if last == "ENV" else last] = value
        return data
    return mutate


MALFORMED = {
    "a rate that is a string": (_set("envs.ENV.task_success_rate", "=1+1"), "envs['sopgym/WarehouseReceiving-v0'].task_success_rate must be a finite number or null, got str"),
    "a rate that is true": (_set("envs.ENV.field_accuracy", True), ".field_accuracy must be a finite number or null, got bool"),
    "an absurd integer": (_set("envs.ENV.episodes", 10**40), ".episodes must be a finite number or null, got int of 41 digits"),
    "ci95 a string": (_set("envs.ENV.ci95", "wide"), ".ci95 must be an object or null, got str"),
    "an interval of three": (_set("envs.ENV.ci95.task_success_rate", [0, 1, 2]), "ci95.task_success_rate must be [low, high] or null"),
    "an interval bound a string": (_set("envs.ENV.ci95.task_success_rate", [0, "1"]), "task_success_rate[1] must be a finite number"),
    "an env that is a list": (_set("envs.ENV", [1]), "envs['sopgym/WarehouseReceiving-v0'] must be an object, got list"),
    "usage a list": (_set("envs.ENV.usage", []), ".usage must be an object or null, got list"),
    "a usage count a string": (_set("envs.ENV.usage", {"cost_usd": "3"}), ".usage.cost_usd must be a finite number"),
    "latency a number": (_set("envs.ENV.usage", {"latency_s_per_turn": 2}), ".usage.latency_s_per_turn must be an object"),
    "compat a number": (_set("envs.ENV.sopbench_compat", 1), ".sopbench_compat must be an object or null"),
    "a pass@k key not a k": (_set("envs.ENV.pass_at_k_curve", {"one": 1.0}), "pass_at_k_curve keys must be k as digits"),
    "a pass@k value a string": (_set("envs.ENV.pass_at_k_curve", {"1": "1.0"}), "pass_at_k_curve['1'] must be a finite number"),
    "suite compat a string": (_set("suite.sopbench_compat_task_success_rate", "x"), "suite.sopbench_compat_task_success_rate must be"),
    "suite mean turns a list": (_set("suite.mean_turns", [2]), "suite.mean_turns must be a finite number or null, got list"),
    "config a list": (_set("config", []), "config must be an object or null, got list"),
    "agent a string": (_set("config.agent", "gpt"), "config.agent must be an object or null, got str"),
    "identity a list": (_set("config.identity", []), "config.identity must be an object or null, got list"),
}
RAW = {
    "nested 100,000 deep": ('{"envs": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    "an integer of 5000 digits in the text": ('{"envs": {}, "suite": {}, "n": ' + "7" * 5000 + "}", "cannot read the results file"),
    "not UTF-8": (b"{\"envs\": \"\xff\xfe\"}", "expected a UTF-8 results JSON file"),
    "invalid JSON": ("{not json", "got invalid JSON"),
}


@pytest.mark.parametrize("label", sorted(MALFORMED) + sorted(RAW))
def test_a_malformed_results_file_is_one_line_naming_it(results, tmp_path, capsys, label):
    if label in MALFORMED:
        mutate, words = MALFORMED[label]
        path = _write(tmp_path, mutate(copy.deepcopy(results)))
    else:
        content, words = RAW[label]
        path = tmp_path / "r.json"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    good = _write(tmp_path, results, "good.json")
    assert cli.main(["report", str(good), str(path), "--out", str(tmp_path / "out"), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"sopgym report: {path}: ") and len(err) < 400, err
    assert words in err, err
