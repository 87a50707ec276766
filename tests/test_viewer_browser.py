"""The viewer (``sopgym show A.jsonl B.jsonl --html viewer.html``) in a real headless Chromium, driven
by Selenium: the filters change what is listed, search finds an episode, the leaderboard's cells and
the viewer's addresses land on the episodes behind them, two runs side by side mark where the replies
diverge and where the verdicts differ, the final state is shown against the expected one, and what a
model wrote is shown as text. Screenshots are saved under each test's tmp dir.

Needs Debian's ``chromium`` and ``chromium-driver`` (scripts/setup.sh installs them as root) and the
``selenium`` package (the test extra). Without them these tests skip, unless ``SOPGYM_REQUIRE_BROWSER=1``
(CI, via .ci/run), where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from viewer_runs import STATEFUL, make_runs, viewer_document

from sopgym import cli
from sopgym.evaluation.viewer import viewer_link

CHROMIUM = os.environ.get("SOPGYM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SOPGYM_CHROMEDRIVER", "/usr/bin/chromedriver")
REQUIRE = os.environ.get("SOPGYM_REQUIRE_BROWSER") == "1"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        return f"selenium is not installed ({exc}): pip install -e '.[test]'"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(path) or shutil.which(path)):
            return f"{path} not found: apt-get install chromium chromium-driver (scripts/setup.sh does, as root)"
    return None


@pytest.fixture(scope="module")
def browser():
    missing = _missing()
    if missing:
        if REQUIRE:
            pytest.fail(f"SOPGYM_REQUIRE_BROWSER=1 but {missing}", pytrace=False)
        pytest.skip(f"{missing} (set SOPGYM_REQUIRE_BROWSER=1 to make this a failure)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("viewer-browser")
    files = make_runs(folder)
    page = folder / "viewer.html"
    assert cli.main(["show", str(files["oracle"]), str(files["random"]), "--html", str(page)]) == 0
    return page, viewer_document(page)


def _open(browser, page: Path, address: str = ""):
    browser.get("about:blank")  # a fresh load, whatever the previous address was
    browser.get(page.as_uri() + address)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def _wait_rendered(browser, href: str):
    """Wait until the page is at `href` and its hashchange handler has drawn it (the handler runs after the click)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(lambda b: b.execute_script(
        "return location.href === arguments[0] && document.body.dataset.rendered === location.hash", href))


def _rows(browser) -> list[tuple[str, int]]:
    from selenium.webdriver.common.by import By

    return [(r.get_attribute("data-run"), int(r.get_attribute("data-index")))
            for r in browser.find_elements(By.CSS_SELECTOR, "#list tr.ep-row")]


def _key(doc, ep) -> tuple[str, int]:
    return doc["runs"][ep["run"]]["name"], ep["index"]


def _choose(browser, select_id: str, value: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, select_id)).select_by_value(value)


def _text_of(ep) -> str:
    """What the viewer searches (viewer.js haystack): everything but the SOP."""
    parts = [ep["env"], ep["task"], ep["input"], ep.get("answer_text") or "", ep.get("failed_request") or "", ep.get("problem") or ""]
    for s in ep["steps"]:
        parts += [s["reply"], s["feedback"], s["status"]] + [c["name"] + " " + c["arguments"] for c in s["calls"]]
        parts += [x for r in s["results"] for x in (r["name"], r["content"])]
    return "\n".join(parts).lower()


def test_filters_change_what_is_listed(browser, viewer):
    page, doc = viewer
    _open(browser, page)
    episodes = doc["episodes"]
    assert len(_rows(browser)) == len(episodes)
    _choose(browser, "f-verdict", "failure")
    failures = [_key(doc, e) for e in episodes if e["verdict"] == "failure"]
    assert _rows(browser) == failures and 0 < len(failures) < len(episodes)
    _choose(browser, "f-env", STATEFUL)
    assert _rows(browser) == [_key(doc, e) for e in episodes if e["verdict"] == "failure" and e["env"] == STATEFUL]
    _choose(browser, "f-verdict", "")
    _choose(browser, "f-env", "")
    status = "ERROR_BAD_ARGUMENTS"
    _choose(browser, "f-status", status)
    assert _rows(browser) == [_key(doc, e) for e in episodes if status in e["statuses"]] != []
    _choose(browser, "f-status", "")
    for cause in {e["cause"] or "none" for e in episodes}:
        _choose(browser, "f-cause", cause)
        assert _rows(browser) == [_key(doc, e) for e in episodes if (e["cause"] or "none") == cause] != []
    _choose(browser, "f-cause", "")
    _choose(browser, "f-infra", "yes")
    assert _rows(browser) == [] and browser.find_element("id", "count").text.startswith("0 of ")
    assert "infra=yes" in browser.current_url  # the filters are the address: it can be shared


def test_search_finds_an_episode_by_what_a_tool_returned(browser, viewer):
    from selenium.webdriver.common.by import By

    page, doc = viewer
    # A session token a tool returned in one oracle episode of the stateful env.
    ep = next(e for e in doc["episodes"] if e["env"] == STATEFUL and doc["runs"][e["run"]]["name"] == "oracle")
    term = json.loads(ep["steps"][0]["results"][0]["content"])["session_token"]
    _open(browser, page)
    browser.find_element(By.ID, "f-q").send_keys(term.lower())
    expected = [_key(doc, e) for e in doc["episodes"] if term.lower() in _text_of(e)]
    assert _rows(browser) == expected and _key(doc, ep) in expected and len(expected) < len(doc["episodes"])
    browser.find_element(By.CSS_SELECTOR, f'#list tr.ep-row[data-run="oracle"][data-index="{ep["index"]}"]').click()
    assert browser.find_element(By.CSS_SELECTOR, ".episode-head h3").text == f"oracle · episode {ep['index']}"
    assert term in [m.text for m in browser.find_elements(By.CSS_SELECTOR, "#detail mark.hit")]


def test_a_leaderboard_cell_lands_on_the_episodes_behind_it(browser, viewer):
    from selenium.webdriver.common.by import By

    page, doc = viewer
    _open(browser, page)
    cells = browser.find_elements(By.CSS_SELECTOR, "#leaderboard a.fail-link")
    assert cells
    for i in range(len(cells)):
        cell = browser.find_elements(By.CSS_SELECTOR, "#leaderboard a.fail-link")[i]
        run, env, count = cell.get_attribute("data-run"), cell.get_attribute("data-env"), int(cell.text.split()[0])
        href = cell.get_attribute("href")
        cell.click()
        _wait_rendered(browser, href)
        expected = [_key(doc, e) for e in doc["episodes"] if doc["runs"][e["run"]]["name"] == run
                    and env in ("", e["env"]) and e["verdict"] == "failure"]
        assert _rows(browser) == expected != [] and count == len(expected)


def test_an_address_lands_on_the_episode(browser, viewer):
    from selenium.webdriver.common.by import By

    page, doc = viewer
    ep = doc["episodes"][-1]
    run = doc["runs"][ep["run"]]["name"]
    _open(browser, page, viewer_link(run=run, episode=f"{run}/{ep['index']}"))
    assert browser.find_element(By.CSS_SELECTOR, ".episode-head h3").text == f"{run} · episode {ep['index']}"
    assert browser.find_element(By.CSS_SELECTOR, "#list tr.current").get_attribute("data-index") == str(ep["index"])
    assert len(_rows(browser)) == sum(e["run"] == ep["run"] for e in doc["episodes"])  # the run filter applied


def test_a_report_link_lands_on_the_episodes_behind_it(browser, viewer, tmp_path):
    import re

    page, _ = viewer
    folder = page.parent
    results = [str(folder / f"{p}.json") for p in ("oracle", "random")]
    assert cli.main(["report", *results, "--out", str(tmp_path / "rep"), "--no-plots", "--viewer"]) == 0
    doc = viewer_document(tmp_path / "rep" / "viewer.html")
    link = next(x for x in re.findall(r"\]\((viewer\.html#[^)\s]+)\)", (tmp_path / "rep" / "leaderboard.md").read_text())
                if "random" in x and "Customer" in x)
    _open(browser, tmp_path / "rep", "/" + link)
    assert _rows(browser) == [_key(doc, e) for e in doc["episodes"]
                              if doc["runs"][e["run"]]["name"] == "random" and e["env"] == STATEFUL] != []


def test_two_runs_side_by_side_mark_diverging_replies_and_differing_verdicts(browser, viewer, tmp_path):
    from selenium.webdriver.common.by import By

    page, doc = viewer
    oracle = [e for e in doc["episodes"] if doc["runs"][e["run"]]["name"] == "oracle"]
    partner = {(e["env"], e["task"], e["sample"]): e for e in doc["episodes"] if doc["runs"][e["run"]]["name"] == "random"}
    differ = [e for e in oracle if partner[(e["env"], e["task"], e["sample"])]["verdict"] != e["verdict"]]
    assert differ
    _open(browser, page, viewer_link(run="oracle", compare="random", differ=1))
    assert _rows(browser) == [_key(doc, e) for e in differ]
    ep = next(e for e in differ if e["env"] == STATEFUL)
    other = partner[(ep["env"], ep["task"], ep["sample"])]
    browser.find_element(By.CSS_SELECTOR, f'#list tr.ep-row[data-index="{ep["index"]}"]').click()
    grid = browser.find_element(By.CSS_SELECTOR, "#detail .side-by-side")
    heads = [h.text for h in grid.find_elements(By.CSS_SELECTOR, ".episode-head h3")]
    assert heads == [f"oracle · episode {ep['index']}", f"random · episode {other['index']}"]
    assert len(grid.find_elements(By.CSS_SELECTOR, ".verdicts-differ")) == 2
    first = next(i for i in range(max(len(ep["steps"]), len(other["steps"])))
                 if i >= len(ep["steps"]) or i >= len(other["steps"]) or ep["steps"][i]["reply"] != other["steps"][i]["reply"])
    marks = grid.find_elements(By.CSS_SELECTOR, ".turn.first-divergence")
    assert len(marks) == 2 and marks[0].find_element(By.CSS_SELECTOR, ".turn-head b").text == f"turn {first + 1}"
    a, b = ep["steps"][first]["reply"], other["steps"][first]["reply"]
    same = next((n for n in range(min(len(a), len(b))) if a[n] != b[n]), min(len(a), len(b)))
    assert marks[0].find_element(By.CSS_SELECTOR, ".diverged").get_attribute("textContent") == (a[same:] or "(ends here)")
    browser.execute_script("arguments[0].scrollIntoView()", marks[0])
    shot = tmp_path / "side_by_side.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_final_state_is_shown_against_the_expected_state(browser, viewer, tmp_path):
    from selenium.webdriver.common.by import By

    page, doc = viewer
    ep = next(e for e in doc["episodes"] if e["env"] == STATEFUL and e["state_ok"] is False)
    run = doc["runs"][ep["run"]]["name"]
    _open(browser, page, viewer_link(episode=f"{run}/{ep['index']}"))
    keys = browser.find_elements(By.CSS_SELECTOR, "#detail .state .state-key")
    assert [k.find_element(By.TAG_NAME, "b").text for k in keys] == [k["key"] for k in ep["state"]["keys"]]
    assert ["bad" in k.get_attribute("class") for k in keys] == [not k["ok"] for k in ep["state"]["keys"]]
    assert browser.find_elements(By.CSS_SELECTOR, "#detail .state tr.mismatch")
    browser.execute_script("arguments[0].scrollIntoView()", keys[0])
    shot = tmp_path / "state.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_what_a_model_wrote_is_shown_as_text_never_run(browser, tmp_path):
    from selenium.webdriver.common.by import By

    hostile = "<img src=x onerror=\"document.title='pwned'\"></script><script>document.title='pwned'</script><b>bold</b>"
    line = {"type": "step", "episode_index": 0, "turn": 1, "observation": hostile, "action": hostile, "calls": [],
            "tool_results": [{"role": "tool", "name": "t", "content": hostile}], "reward": 0.0, "status": "NO_TOOL_CALL",
            "terminated": False, "truncated": False}
    (tmp_path / "t.jsonl").write_text(json.dumps(line) + "\n")
    assert cli.main(["show", str(tmp_path / "t.jsonl"), "--html", str(tmp_path / "p.html")]) == 0
    _open(browser, tmp_path / "p.html", "#episode=0")
    assert browser.title != "pwned"
    assert browser.find_elements(By.CSS_SELECTOR, "img, #detail script") == []
    assert browser.execute_script("return [...document.querySelectorAll('b')].filter(b => b.textContent === 'bold').length") == 0
    assert browser.find_element(By.CSS_SELECTOR, "#detail pre.reply").get_attribute("textContent") == hostile


def test_a_record_field_that_differs_from_the_expected_state_is_marked(browser, viewer, tmp_path):
    from selenium.webdriver.common.by import By

    page, _ = viewer
    lines = [json.loads(x) for x in (page.parent / "oracle.jsonl").read_text().splitlines()]
    end = next(x for x in lines if x.get("type") == "episode" and x["env_id"] == STATEFUL and x["final_state"]["tickets"])
    end["final_state"]["tickets"][0]["status"] = "closed" if end["expected_state"]["tickets"][0]["status"] != "closed" else "open"
    kept = [x for x in lines if x.get("episode_index") == end["episode_index"]]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(x) + "\n" for x in kept))
    assert cli.main(["show", str(tmp_path / "t.jsonl"), "--html", str(tmp_path / "p.html")]) == 0
    _open(browser, tmp_path / "p.html", f"#episode={end['episode_index']}")
    rows = browser.find_elements(By.CSS_SELECTOR, "#detail .state tr.mismatch")
    assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows] == ["status"]
    assert browser.find_element(By.CSS_SELECTOR, "#detail .episode-head .badge").text == "failure"
