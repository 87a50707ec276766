"""Loading a SOP-Bench checkout whose folders are damaged, or whose licences are written in ways a
plain substring match misses: each folder loads on its own, every bad one is reported by name with
what is wrong, the no-training condition is found whatever its Markdown and Unicode dress, a licence
the matcher cannot settle fails closed, colliding env ids are both reported, and a reset observation
never exceeds the env's bound. Fixture folders are built in tmp dirs from tests/sopbench/fixtures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import gymnasium as gym
import pytest

from sopgym.sop_tasks import registry
from sopgym.sopbench import adapter, load, register
from sopgym.sopbench.licence import NO_TRAINING_CONDITION, judge_licence

from .helpers import FIXTURES, REPO, sopbench_dir


@pytest.fixture
def checkout(tmp_path):
    """``make(folder, **files)``: a domain folder copied from the helpdesk fixture under a tmp
    checkout, with ``files`` ({file name: text}) written over it. Returns the checkout root."""
    root = tmp_path / "checkout"
    root.mkdir()

    def make(folder: str, **files: str):
        dest = root / folder
        shutil.copytree(FIXTURES / "helpdesk", dest)
        for name, text in files.items():
            (dest / name.replace("__", ".")).write_text(text, encoding="utf-8")
        return root

    return make


@pytest.fixture
def isolated_registry(monkeypatch):
    """Domains registered by the test are forgotten afterwards (packs, adapter entries, gym ids)."""
    registry._load_authored()
    monkeypatch.setattr(registry, "_PACKS", dict(registry._PACKS))
    monkeypatch.setattr(adapter, "_REGISTERED", dict(adapter._REGISTERED))
    before = set(gym.registry)
    yield
    for env_id in set(gym.registry) - before:
        del gym.registry[env_id]


# (file, content, words the reason must contain)
MALFORMED = [
    ("metadata.json", "[]", ["metadata.json", "must be an object", "list"]),
    ("metadata.json", '{"input_columns": 5}', ["metadata.json", "'input_columns'", "list of column names", "int 5"]),
    ("metadata.json", '{"output_columns": "resolution"}', ["metadata.json", "'output_columns'", "list of column names", "str"]),
    ("metadata.json", '{"input_columns": [1, 2]}', ["metadata.json", "'input_columns'", "list of column names"]),
    ("metadata.json", "{not json", ["metadata.json", "not valid JSON"]),
    ("metadata.json", "[" * 100_000, ["metadata.json"]),
    ("metadata.json", '{"n": ' + "9" * 5000 + "}", ["metadata.json", "cannot be read"]),
    ("toolspecs.json", '[{"toolSpec": 5}]', ["toolspecs.json", "entry 0", "'toolSpec' must be an object", "int 5"]),
    ("toolspecs.json", "[5]", ["toolspecs.json", "entry 0", "must be an object", "int 5"]),
    ("toolspecs.json", '{"toolSpec": {}}', ["toolspecs.json", "must be a list", "dict"]),
    ("toolspecs.json", '[{"toolSpec": {"name": 5}}]', ["toolspecs.json", "entry 0", "'name' must be a non-empty string"]),
    ("toolspecs.json", '[{"toolSpec": {"name": "x", "description": ["a"]}}]', ["toolspecs.json", "(x)", "'description' must be a string"]),
    ("toolspecs.json", '[{"toolSpec": {"name": "x", "inputSchema": "s"}}]', ["toolspecs.json", "(x)", "'inputSchema' must be an object"]),
    ("toolspecs.json", '[{"toolSpec": {"name": "x", "inputSchema": {"json": 5}}}]', ["toolspecs.json", "(x)", "'json'"]),
]


@pytest.mark.parametrize("file,content,words", MALFORMED, ids=[f"{f}:{c[:30]}" for f, c, _ in MALFORMED])
def test_a_malformed_folder_is_reported_by_name_and_the_others_load(checkout, file, content, words):
    checkout("a_good")
    checkout("m_bad", **{file.replace(".", "__"): content})
    root = checkout("z_good")
    report = load(root)
    assert sorted(report.domains) == ["a_good", "z_good"]
    assert list(report.skipped) == ["m_bad"]
    reason = report.skipped["m_bad"]
    assert reason.startswith("m_bad: ") and len(reason) < 400, reason
    for word in words:
        assert word in reason, (word, reason)


def test_the_others_register_and_the_bad_folder_is_reported(checkout, isolated_registry):
    checkout("robust_a")
    checkout("robust_b", metadata__json="[]")
    root = checkout("robust_c", toolspecs__json='[{"toolSpec": 5}]')
    report = register(root)
    assert "sopbench/robust_a-v0" in gym.registry
    assert "sopbench/robust_b-v0" not in gym.registry and "sopbench/robust_c-v0" not in gym.registry
    assert set(report.skipped) == {"robust_b", "robust_c"}


def test_sopbench_check_lists_the_bad_folder(checkout, capsys):
    from sopgym.cli import main

    checkout("fine")
    root = checkout("broken_meta", metadata__json='{"input_columns": 5}')
    assert main(["sopbench", "check", str(root), "--no-run"]) == 0
    out = capsys.readouterr().out
    assert "sopbench/fine: " in out
    assert "skipped broken_meta: broken_meta: metadata.json: 'input_columns' must be a list of column names" in out


def test_import_with_a_bad_folder_registers_the_others_and_warns_by_name(checkout):
    checkout("import_good")
    root = checkout("import_bad", toolspecs__json='[{"toolSpec": 5}]')
    code = "import sopgym, gymnasium as g; print(sorted(k for k in g.registry if k.startswith('sopbench/')))"
    env = dict(os.environ, SOPBENCH_DIR=str(root), PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-W", "always", "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "sopbench/import_good-v0" in out.stdout and "import_bad" not in out.stdout
    assert "domain 'import_bad' not loaded: import_bad: toolspecs.json entry 0" in out.stderr


def test_folders_giving_one_env_id_are_both_reported(checkout):
    checkout("collide-a")
    checkout("collide_a")
    root = checkout("other")
    report = load(root)
    assert sorted(report.domains) == ["other"]
    assert set(report.skipped) == {"collide-a", "collide_a"}
    assert "sopbench/collide_a-v0" in report.skipped["collide-a"] and "'collide_a'" in report.skipped["collide-a"]
    assert "'collide-a'" in report.skipped["collide_a"]


# -- the licence -------------------------------------------------------------------------------------
FORBIDDING = {
    "plain": f"Conditions: {NO_TRAINING_CONDITION}.",
    "blockquote": "## Conditions\n\n> No one should take steps to facilitate\n> training AI models on this data.\n",
    "nested blockquote and bold": "> > **No one should take steps** to facilitate _training_ AI models on this data.",
    "non-breaking hyphen": "No one should take steps to facilitate training AI\u2011models on this data.",
    "en dash": "No one should take steps to facilitate training AI\u2013models on this data.",
    "zero-width space": "No one should take steps to facilitate tra\u200bining AI mo\u200cdels on this data.",
    "soft hyphen and word joiner": "No one should take steps to facil\u00aditate train\u2060ing AI models on this data.",
    "byte-order mark": "\ufeffNo one should take steps to facilitate training AI models on this\ufeff data.",
    "curly quotes": "\u201cNo one should take steps to facilitate \u2018training\u2019 AI models on this data\u201d",
    "upper case": NO_TRAINING_CONDITION.upper(),
    "full-width letters": "No one should take steps to facilitate \uff54\uff52\uff41\uff49\uff4e\uff49\uff4e\uff47 AI models on this data.",
    "no-break spaces and line breaks": "No\u00a0one should take\nsteps to facilitate\u2003training AI\n\nmodels on this data.",
    "list item": "* Attribution.\n* No one should take steps to facilitate training AI models on this data.",
    "link": "No one should take steps to facilitate [training AI models](https://example.org) on this data.",
    "html emphasis": "No one should take steps to facilitate <em>training</em> AI models on this data.",
    "combining accent": "No one should take steps to facilitate trai\u0301ning AI models on this data.",
    "code ticks": "No one should take steps to facilitate `training AI models` on this data.",
}


UNSETTLED = {
    "other wording": "You may not use this data to train machine-learning systems.",
    "ai models only": "Using the data with AI models requires permission.",
    "machine learning": "Not for m\u200bachine learning.",
    "condition broken by a homoglyph": "No one should take steps to facilitate tr\u0430ining AI models on this data.",
    "homoglyphs only": "No one should t\u0430ke steps to f\u0430cilit\u0430te tr\u0430ining \u0410I m\u043edels on this d\u0430ta.",
    "llm": "Do not feed this to an LLM.",
    "permission": "Training AI models on this data is permitted.",
}


VERDICTS = [(text, "forbids", False) for text in FORBIDDING.values()] + [(text, "cannot settle", True) for text in UNSETTLED.values()]


@pytest.mark.parametrize("text,reason,overridable", VERDICTS, ids=[f"forbids:{n}" for n in FORBIDDING] + [f"unsettled:{n}" for n in UNSETTLED])
def test_a_licence_that_forbids_training_or_cannot_be_settled_is_not_allowed(text, reason, overridable):
    """The condition is found whatever its Markdown and Unicode dress (never overridden); a licence
    that mentions training otherwise fails closed, and only the explicit override allows it."""
    verdict = judge_licence(text)
    assert not verdict.training_allowed and reason in verdict.reason, verdict.reason
    overridden = judge_licence(text, allow_training=True)
    assert overridden.training_allowed is overridable
    assert "explicit override" in overridden.reason if overridable else reason in overridden.reason


@pytest.mark.parametrize("text", ["", "Please cite the SOP-Bench paper.\n\nCC BY-NC 4.0", "the checkout's LICENSE"])
def test_a_licence_without_training_words_allows_training(text):
    if text == "the checkout's LICENSE":
        path = sopbench_dir() / "LICENSE"
        if not path.is_file():
            pytest.skip(f"no SOP-Bench LICENSE at {path}; set SOPBENCH_DIR")
        text = path.read_text(encoding="utf-8")  # the CC BY-NC 4.0 legal code itself
    assert judge_licence(text).training_allowed


def test_sopgym_list_shows_why_training_is_not_allowed(checkout, isolated_registry, capsys):
    from sopgym.cli import main

    checkout("licence_forbids", LICENSE__md=FORBIDDING["blockquote"])
    root = checkout("licence_unsettled", LICENSE__md=UNSETTLED["other wording"])
    register(root)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("sopbench/licence_")}
    assert rows["sopbench/licence_forbids-v0"].rstrip().endswith("no")
    assert "sopbench/licence_forbids-v0: training not allowed: LICENSE.md forbids it" in out
    assert "sopbench/licence_unsettled-v0: training not allowed: LICENSE.md mentions" in out and "cannot settle" in out


def test_only_an_explicit_override_allows_an_unsettled_licence(checkout, isolated_registry):
    root = checkout("licence_read", LICENSE__md=UNSETTLED["other wording"])
    assert not load(root).domains["licence_read"].training_allowed
    report = register(root, allow_training=["licence_read"])
    assert report.domains["licence_read"].training_allowed
    env = gym.make("sopbench/licence_read-v0", tools_runner="inprocess", trust_tools_code=True)
    try:
        _, info = env.reset(seed=0)
    finally:
        env.close()
    assert info["training_allowed"] is True


# -- the observation bound ---------------------------------------------------------------------------
def test_a_reset_observation_never_exceeds_the_bound(checkout, isolated_registry):
    root = checkout("huge_cell")
    csv = root / "huge_cell" / "test_set_with_outputs.csv"
    lines = csv.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("region")] = "x" * 2_000_000
    csv.write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n", encoding="utf-8")
    register(root)
    for style in ("chat", "upstream"):
        env = gym.make("sopbench/huge_cell-v0", tools_runner="inprocess", trust_tools_code=True, prompt_style=style)
        try:
            with pytest.raises(ValueError, match=r"huge_cell/test/0 cannot be posed: .* 2,0\d\d,\d\d\d characters, more than "
                                                 r"this env's observation bound of 1,000,000 \(max_observation_length\)"):
                env.reset(options={"task_index": 0})
            obs, _ = env.reset(options={"task_index": 1})  # the other tasks are posed
            assert env.observation_space.contains(obs)
        finally:
            env.close()
        big = gym.make("sopbench/huge_cell-v0", tools_runner="inprocess", trust_tools_code=True, prompt_style=style,
                       max_observation_length=3_000_000)
        try:
            obs, _ = big.reset(options={"task_index": 0})
            assert 2_000_000 < len(obs) <= 3_000_000 and big.observation_space.contains(obs)
        finally:
            big.close()


def test_every_registered_env_resets_within_its_bound(env_id):
    from hostile_actions import make_env_without_docker

    env = make_env_without_docker(env_id)
    try:
        for seed in range(3):
            obs, _ = env.reset(seed=seed)
            assert env.observation_space.contains(obs) and len(obs) <= env.observation_space.max_length
    finally:
        env.close()


def test_the_cli_json_of_register_carries_the_training_note(checkout, isolated_registry, capsys):
    from sopgym.cli import main

    root = checkout("licence_json", LICENSE__md=FORBIDDING["zero-width space"])
    assert main(["sopbench", "register", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["domains"]["licence_json"]["training_allowed"] is False
    assert "forbids" in out["domains"]["licence_json"]["training_note"]
