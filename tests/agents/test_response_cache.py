"""The response cache (``sopgym eval --cache DIR``, sopgym/agents/response_cache.py) against a real HTTP
server on loopback that counts the requests it answers (tests/agents/fault_server.py): a re-run asks
nothing, any change of the request asks again, an expired entry asks again, failed or cut answers are
never kept, a damaged cache file is an error naming it, and threads and processes share one file."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import threading
import time

import pytest

from sopgym.agents.chat import ChatAgent, ChatRequest, Completion, RequestFailed
from sopgym.agents.response_cache import CACHE_FILE, CachedChatModel, CacheError, ResponseCache, request_key

from .fault_server import USAGE, FaultServer
from .needs import require
from .test_openai_faults import CHAT, SUBMIT_OK, WR, model, run_wr, sopgym_cli

require("openai")

TOOLS = [{"type": "function", "function": {"name": "t", "description": "d", "parameters": {"type": "object"}}}]


@pytest.fixture
def server():
    with FaultServer() as s:
        s.default = ("reply", SUBMIT_OK, "stop", USAGE)
        yield s


def eval_args(server: FaultServer, out, cache, *more: str) -> list[str]:
    return ["eval", "--env", WR, "--policy", "openai", "--base-url", server.base_url, "--model", "m", "--episodes", "3",
            "--concurrency", "2", "--quiet", "--n-bootstrap", "0", "--out", str(out), "--cache", str(cache), *more]


def _posts(server: FaultServer) -> int:
    return len(server.requests)


def _without_usage(results: dict) -> dict:
    return {k: v for k, v in results["envs"][WR].items() if k != "usage"}


# --------------------------------------------------------------------------------------------------
# sopgym eval --cache
# --------------------------------------------------------------------------------------------------
def test_a_rerun_with_the_same_settings_makes_no_model_call(server, tmp_path):
    server.default = ("reply", {"role": "assistant", "content": "thinking"}, "stop", USAGE)  # NO_TOOL_CALL: 2 turns each
    more = ["--env-arg", "max_turns=2", "--price-prompt", "1", "--price-completion", "1"]
    first = sopgym_cli(*eval_args(server, tmp_path / "a.json", tmp_path / "cache", *more))
    assert first.returncode == 0, first.stderr
    asked = _posts(server)
    assert asked == 6  # 3 episodes x 2 turns
    second = sopgym_cli(*eval_args(server, tmp_path / "b.json", tmp_path / "cache", *more))
    assert second.returncode == 0, second.stderr
    assert _posts(server) == asked  # not one chat request the second time
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert _without_usage(a) == _without_usage(b)
    usage = b["envs"][WR]["usage"]
    assert usage["cached_turns"] == usage["turns"] == 6 and usage["requests"] == 0 and usage["cost_usd"] == 0
    assert a["envs"][WR]["usage"]["cached_turns"] == 0 and a["envs"][WR]["usage"]["cost_usd"] > 0
    assert b["config"]["agent"]["response_cache"]["hits"] == 6 and b["config"]["agent"]["response_cache"]["stored"] == 0
    assert a["config"]["agent"]["response_cache"]["stored"] == 6
    assert "turns answered from --cache" in second.stdout
    steps = [json.loads(x) for x in (tmp_path / "b.trajectories.jsonl").read_text().splitlines() if '"step"' in x]
    assert len(steps) == 6 and all(s["agent"]["cached"] is True for s in steps)


@pytest.mark.parametrize("change", [["--temperature", "0.5"], ["--model", "other"], ["--max-tokens", "99"],
                                    ["--model-seed", "3"], ["--top-p", "0.9"], ["--stop", "END"],
                                    ["--extra-body", '{"top_k": 5}'], ["--tools", "prompt"]])
def test_a_changed_setting_misses(server, tmp_path, change):
    args = eval_args(server, tmp_path / "a.json", tmp_path / "cache")
    assert sopgym_cli(*args).returncode == 0
    asked = _posts(server)
    if "--model" in change:  # one --model only
        args[args.index("--model") + 1] = change[1]
        change = []
    done = sopgym_cli(*args, *change)
    assert done.returncode == 0, done.stderr
    assert _posts(server) == 2 * asked


@pytest.mark.parametrize("variant", [
    ChatRequest([{"role": "user", "content": "hi!"}]),                     # a message changed
    ChatRequest([*CHAT, {"role": "user", "content": "more"}]),              # a message added
    ChatRequest(CHAT, tools=TOOLS),                                         # tools sent
    ChatRequest(CHAT, seed=7),                                              # a seed
])
def test_a_changed_request_misses_and_the_same_one_hits(server, tmp_path, variant):
    cached = CachedChatModel(model(server), ResponseCache(tmp_path))
    try:
        cached.complete_batch([ChatRequest(CHAT)])
        assert _posts(server) == 1
        (answer,) = cached.complete_batch([variant])
        assert _posts(server) == 2 and not answer.cached
        again = cached.complete_batch([ChatRequest(CHAT), variant])
        assert _posts(server) == 2 and all(a.cached and a.attempts == 0 for a in again)
        assert again[0].message == answer.message and again[0].prompt_tokens == USAGE["prompt_tokens"]
    finally:
        cached.close()


def test_the_key_is_the_canonical_json_of_the_request(server):
    openai_model = model(server)
    key = request_key(openai_model.cache_key(ChatRequest([{"content": "hi", "role": "user"}])))
    assert key == request_key(openai_model.cache_key(ChatRequest([{"role": "user", "content": "hi"}])))  # key order
    body = openai_model.cache_key(ChatRequest(CHAT, seed=3))["body"]
    assert body["seed"] == 3 and body["model"] == "m" and body["messages"] == CHAT and "stream" not in body
    openai_model.close()


def test_an_expired_entry_misses(server, tmp_path):
    now = [1000.0]
    cached = CachedChatModel(model(server), ResponseCache(tmp_path, expiry_s=60, clock=lambda: now[0]))
    try:
        cached.complete_batch([ChatRequest(CHAT)])
        now[0] += 59
        cached.complete_batch([ChatRequest(CHAT)])
        assert _posts(server) == 1
        now[0] += 2  # 61 s after it was stored
        (answer,) = cached.complete_batch([ChatRequest(CHAT)])
        assert _posts(server) == 2 and not answer.cached
        assert cached.cache.describe()["expired"] == 1
        now[0] += 30  # the fresh answer replaced the expired one
        (answer,) = cached.complete_batch([ChatRequest(CHAT)])
        assert _posts(server) == 2 and answer.cached
    finally:
        cached.close()


def test_sopgym_eval_cache_expiry_makes_entries_miss(server, tmp_path):
    args = eval_args(server, tmp_path / "a.json", tmp_path / "cache", "--cache-expiry", "1s")
    assert sopgym_cli(*args).returncode == 0
    asked = _posts(server)
    time.sleep(1.2)
    done = sopgym_cli(*args)
    assert done.returncode == 0, done.stderr
    assert _posts(server) == 2 * asked
    assert json.loads((tmp_path / "a.json").read_text())["config"]["agent"]["response_cache"]["expiry_s"] == 1.0


@pytest.mark.parametrize("value", ["0", "-5", "soon", "3x", "inf"])
def test_a_cache_expiry_that_is_not_a_duration_is_refused(server, tmp_path, value):
    done = sopgym_cli(*eval_args(server, tmp_path / "a.json", tmp_path / "cache", "--cache-expiry", value))
    assert done.returncode == 2 and "expected a duration > 0" in done.stderr and _posts(server) == 0


# --------------------------------------------------------------------------------------------------
# What is never kept
# --------------------------------------------------------------------------------------------------
DONE_WITHOUT_FINISH = ("sse", [json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                                           "choices": [{"index": 0, "delta": {"role": "assistant", "content": "x"},
                                                        "finish_reason": None}]}), "[DONE]"])


@pytest.mark.parametrize("name, script, settings, expected", [
    ("failed", [("status", 500, {"error": {"message": "boom"}}, {})] * 2, {"max_retries": 1}, RequestFailed),
    ("cut by the byte cap", [("big", 256 * 1024)], {"max_reply_bytes": 1024}, Completion),
    ("end not reported", [DONE_WITHOUT_FINISH], {}, Completion),
])
def test_failed_and_incomplete_answers_are_never_cached(server, tmp_path, name, script, settings, expected):
    server.script = list(script)
    cached = CachedChatModel(model(server, **settings), ResponseCache(tmp_path))
    try:
        (answer,) = cached.complete_batch([ChatRequest(CHAT)])
        assert isinstance(answer, expected)
        asked = _posts(server)
        (again,) = cached.complete_batch([ChatRequest(CHAT)])  # the server's default: a whole answer
        assert _posts(server) == asked + 1 and not again.cached
        stats = cached.cache.describe()
        assert stats["not_stored"] == 1 and stats["stored"] == 1 and stats["hits"] == 0
    finally:
        cached.close()


# --------------------------------------------------------------------------------------------------
# A damaged cache is an error, never an empty cache
# --------------------------------------------------------------------------------------------------
def _garbage(path):
    path.write_bytes(b"this is not a database\n" * 200)


def _truncated(path):
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("CREATE TABLE answers (key TEXT PRIMARY KEY, created REAL NOT NULL, model TEXT NOT NULL, answer TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('format', 'sopgym-response-cache/1')")
    db.executemany("INSERT INTO answers VALUES (?, 0, 'm', ?)", [(f"{i:064x}", "x" * 3000) for i in range(200)])
    db.commit()
    db.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _foreign(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE people (name TEXT)")
    db.commit()
    db.close()


def _bad_row(path):
    cache = ResponseCache(path.parent)
    cache.close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO answers VALUES (?, ?, 'm', '{not json')", ("k", time.time()))
    db.commit()
    db.close()


@pytest.mark.parametrize("damage", [_garbage, _truncated, _foreign], ids=["not-sqlite", "truncated", "other-schema"])
def test_a_damaged_cache_file_is_an_error_naming_it(server, tmp_path, damage):
    folder = tmp_path / "cache"
    folder.mkdir()
    damage(folder / CACHE_FILE)
    done = sopgym_cli(*eval_args(server, tmp_path / "a.json", folder))
    assert done.returncode == 2, done.stderr
    assert str(folder / CACHE_FILE) in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert _posts(server) == 0


def test_a_stored_answer_that_does_not_read_back_is_an_error_naming_the_file(server, tmp_path):
    _bad_row(tmp_path / CACHE_FILE)
    cache = ResponseCache(tmp_path)
    with pytest.raises(CacheError, match=str(tmp_path / CACHE_FILE)):
        cache.get("k")
    cache.close()


# --------------------------------------------------------------------------------------------------
# Concurrent episodes, threads and processes
# --------------------------------------------------------------------------------------------------
def test_concurrent_episodes_share_the_cache(server, tmp_path):
    cached = CachedChatModel(model(server, max_concurrency=4), ResponseCache(tmp_path))
    try:
        first = run_wr(ChatAgent(cached), episodes=8, concurrency=4)
        asked = _posts(server)
        again = run_wr(ChatAgent(cached), episodes=8, concurrency=4)
        assert _posts(server) == asked
        assert [r.record for r in first] == [r.record for r in again]
        assert all(t["cached"] for r in again for t in r.extra["turns"])
    finally:
        cached.close()


def _hammer(folder: str, worker: int, rounds: int, errors: list | None = None) -> None:
    try:
        _write_and_read(folder, worker, rounds)
    except BaseException as exc:  # a thread's failure, reported by the test
        if errors is None:
            raise
        errors.append(exc)


def _write_and_read(folder: str, worker: int, rounds: int) -> None:
    cache = ResponseCache(folder)
    answer = Completion({"role": "assistant", "content": f"w{worker}"}, "stop", 1, 1, 0.1)
    for i in range(rounds):
        cache.put(f"{worker}-{i}", "m", answer)
        cache.put(f"shared-{i}", "m", answer)
        assert cache.get(f"{worker}-{i}").message["content"] == f"w{worker}"
    cache.close()


def test_threads_and_processes_write_one_cache_at_once(tmp_path):
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_hammer, args=(str(tmp_path), w, 60)) for w in range(3)]
    errors: list = []
    threads = [threading.Thread(target=_hammer, args=(str(tmp_path), w, 60, errors)) for w in range(3, 6)]
    for p in [*processes, *threads]:
        p.start()
    for p in [*processes, *threads]:
        p.join(120)
    assert [p.exitcode for p in processes] == [0, 0, 0] and errors == []
    cache = ResponseCache(tmp_path)
    assert all(cache.get(f"{w}-{i}") is not None for w in range(6) for i in range(60))
    assert all(cache.get(f"shared-{i}") is not None for i in range(60))
    (count,) = sqlite3.connect(tmp_path / CACHE_FILE).execute("SELECT COUNT(*) FROM answers").fetchone()
    assert count == 6 * 60 + 60
    cache.close()


def test_a_model_runs_trajectories_rescored_give_its_metrics_usage_and_cached_turns(server, tmp_path):
    from sopgym import cli

    server.default = ("reply", {"role": "assistant", "content": "thinking"}, "stop", USAGE)
    for name in ("a", "b"):  # b: every answer from the cache
        done = sopgym_cli(*eval_args(server, tmp_path / f"{name}.json", tmp_path / "cache", "--env-arg", "max_turns=2"))
        assert done.returncode == 0, done.stderr
    for name in ("a", "b"):
        out = tmp_path / f"{name}.rescored.json"
        assert cli.main(["rescore", str(tmp_path / f"{name}.trajectories.jsonl"), "--n-bootstrap", "0", "--quiet",
                         "--out", str(out)]) == 0
        ran, rescored = (json.loads(p.read_text()) for p in (tmp_path / f"{name}.json", out))
        assert rescored["envs"] == ran["envs"] and rescored["suite"] == ran["suite"]
    assert rescored["envs"][WR]["usage"]["cached_turns"] == 6
