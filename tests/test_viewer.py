"""The viewer page of ``sopgym show --html`` (sopgym/evaluation/viewer.py), read as data: what it holds
for each episode, that nothing a model wrote can leave its data element, that it loads nothing from
elsewhere, and its addresses. What a browser shows of it: tests/test_viewer_browser.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from urllib.parse import parse_qsl

import pytest
from viewer_runs import SAMPLES, STATEFUL, TASKS, make_runs, viewer_document

from sopgym import cli
from sopgym.evaluation import score_record
from sopgym.evaluation.episode_text import read_trajectory
from sopgym.evaluation.metrics import state_keys_ok
from sopgym.evaluation.viewer import run_name, viewer_link

BREAKOUT = "</script><script>document.title='pwned'</script><!-- <script> </SCRIPT > & \u2028 <img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("viewer")
    files = make_runs(folder)
    page = folder / "viewer.html"
    assert cli.main(["show", str(files["oracle"]), str(files["random"]), "--html", str(page)]) == 0
    return files, page


def _breakout_page(tmp_path):
    line = {"type": "step", "episode_index": 0, "turn": 1, "observation": BREAKOUT, "action": BREAKOUT,
            "calls": [{"name": BREAKOUT, "arguments": {"x": BREAKOUT}, "status": "ERROR_UNKNOWN_TOOL"}],
            "tool_results": [{"role": "tool", "name": BREAKOUT, "content": BREAKOUT}], "reward": 0.0,
            "status": "ERROR_UNKNOWN_TOOL", "terminated": False, "truncated": False}
    (tmp_path / "t.jsonl").write_text(json.dumps(line) + "\n")
    assert cli.main(["show", str(tmp_path / "t.jsonl"), "--html", str(tmp_path / "p.html")]) == 0
    return tmp_path / "p.html"


def test_viewer_holds_every_episode_of_every_run_with_the_evaluators_verdict(runs):
    files, page = runs
    episodes = viewer_document(page)["episodes"]
    assert len(episodes) == 2 * 2 * TASKS * SAMPLES
    for number, path in enumerate(files.values()):
        _, by_index = read_trajectory(str(path))
        mine = [e for e in episodes if e["run"] == number]
        assert [e["index"] for e in mine] == sorted(by_index)
        for e in mine:
            success = score_record(by_index[e["index"]]["episode"]).success
            assert e["verdict"] == ("success" if success else "failure")


def test_viewer_matches_the_samples_of_a_task_across_runs(runs):
    _, page = runs
    episodes = viewer_document(page)["episodes"]
    keys = [{(e["env"], e["task"], e["sample"]) for e in episodes if e["run"] == n} for n in (0, 1)]
    assert keys[0] == keys[1] and len(keys[0]) == 2 * TASKS * SAMPLES


def test_viewer_compares_the_final_state_with_the_expected_state_key_by_key(runs):
    files, page = runs
    episodes = [e for e in viewer_document(page)["episodes"] if e["env"] == STATEFUL]
    assert episodes and all(e["state"] is not None for e in episodes)
    for e in episodes:
        path = files["oracle" if e["run"] == 0 else "random"]
        record = read_trajectory(str(path))[1][e["index"]]["episode"]
        assert [k["key"] for k in e["state"]["keys"]] == list(record["expected_state"])
        assert [k["ok"] for k in e["state"]["keys"]] == list(state_keys_ok(record["final_state"], record["expected_state"]).values())
        assert [k["final"] for k in e["state"]["keys"]] == [record["final_state"].get(k) for k in record["expected_state"]]
        assert e["state_ok"] == all(k["ok"] for k in e["state"]["keys"])
    assert {e["state_ok"] for e in episodes} == {True, False}  # the oracle's states match, the random policy's do not


def test_state_keys_ok_is_the_evaluators_state_check(runs):
    files, _ = runs
    for path in files.values():
        for ep in read_trajectory(str(path))[1].values():
            record = ep["episode"]
            if record["expected_state"]:
                assert all(state_keys_ok(record["final_state"], record["expected_state"]).values()) == score_record(record).state_ok


def test_model_text_cannot_end_the_data_element(tmp_path):
    page = _breakout_page(tmp_path)
    text = page.read_text()
    assert len(re.findall(r"<script", text, re.I)) == 2 and len(re.findall(r"</script", text, re.I)) == 2
    assert "<img" not in text and "<!--" not in text
    step = viewer_document(page)["episodes"][0]["steps"][0]
    assert step["reply"] == BREAKOUT.replace("\u2028", "\\u2028")  # shown as sopgym show prints it
    assert step["results"][0]["content"] == step["reply"] and step["calls"][0]["name"] == step["reply"]


def test_viewer_loads_nothing_from_elsewhere_and_runs_only_its_own_code(runs):
    _, page = runs
    text = page.read_text()
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text).group(1)
    assert policy.startswith("default-src 'none';")
    script = re.search(r"<script>(.*?)</script>", text, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", text, re.S).group(1)
    for name, body in (("script-src", script), ("style-src", style)):
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"{name} 'sha256-{digest}'" in policy
    code = text.replace(text[text.index('<script type="application/json"'):text.index("</script>") + 9], "")
    assert not re.search(r"\b(src|href)\s*=|https?:|<link|@import|url\(", code), "a reference to another resource"


def test_viewer_links_are_the_addresses_the_page_reads():
    link = viewer_link("viewer.html", run="gpt & co", env="sopgym/A-v0", verdict="failure", episode="gpt & co/3")
    page, fragment = link.split("#")
    assert page == "viewer.html" and " " not in fragment and "/" not in fragment
    assert dict(parse_qsl(fragment)) == {"run": "gpt & co", "env": "sopgym/A-v0", "verdict": "failure", "episode": "gpt & co/3"}
    with pytest.raises(ValueError, match="expected keys among"):
        viewer_link("v.html", model="x")


def test_run_names_come_from_the_trajectory_files():
    assert run_name("runs/qwen.jsonl") == "qwen" and run_name("r.trajectories.jsonl") == "r"


def test_show_text_takes_one_file_and_html_several(runs, tmp_path, capsys):
    files, _ = runs
    assert cli.main(["show", str(files["oracle"]), str(files["random"])]) == 2
    assert "expected one trajectory file for text output, got 2" in capsys.readouterr().err
    assert cli.main(["show", str(files["oracle"]), str(files["oracle"]), "--html", str(tmp_path / "v.html")]) == 0
    assert [r["name"] for r in viewer_document(tmp_path / "v.html")["runs"]] == ["oracle", "oracle #2"]


def _report_links(folder):
    text = (folder / "leaderboard.md").read_text()
    return re.findall(r"\]\((viewer\.html#[^)\s]+)\)", text)


def test_report_viewer_links_each_headline_cell_to_a_view_of_its_run_and_env(runs, tmp_path):
    files, _ = runs
    results = [files[p].with_suffix(".json") for p in ("oracle", "random")]
    assert cli.main(["report", *map(str, results), "--out", str(tmp_path / "rep"), "--no-plots", "--viewer"]) == 0
    doc = viewer_document(tmp_path / "rep" / "viewer.html")
    names, envs = {r["name"] for r in doc["runs"]}, {e["env"] for e in doc["episodes"]}
    views = [dict(parse_qsl(link.split("#", 1)[1])) for link in _report_links(tmp_path / "rep")]
    assert len(views) == len(names) * (len(envs) + 1)  # a cell per run and env, and the run's suite cell
    assert all(v["run"] in names and v.get("env", next(iter(envs))) in envs for v in views)
    assert {(v["run"], v.get("env")) for v in views} == {(n, e) for n in names for e in [*envs, None]}
