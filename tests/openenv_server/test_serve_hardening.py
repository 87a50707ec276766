"""``sopgym serve`` against hostile or careless clients (issue 23): bounded task API work, bounded request
bodies, one env limit over every path that makes envs (their containers released with them), foreign
Origins and Hosts refused, a token on every request, and no ground truth leaving the server unless asked.
Every server listens on 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time

import pytest
from server_helpers import HEADERS, HOST, SKIP_REASON, TOKEN, start_cli_server, stderr_line

pytest.importorskip("openenv", reason=SKIP_REASON)
pytest.importorskip("websockets", reason=SKIP_REASON)

import httpx  # noqa: E402  (openenv's dependency)
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from websockets.exceptions import InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from sopgym.integrations.protocol import AT_CAPACITY, GROUND_TRUTH_KEYS, TOKEN_ENV, WITHHELD_KEY, task_api_name  # noqa: E402

STATEFUL = "sopgym/CustomerServiceTroubleshooting-v0"
CODE = "sopgym/DrivingVideoAnnotationQC-v0"  # verifiable: run_python


def _ws(url: str, **kwargs):
    return connect(url.replace("http://", "ws://") + "/ws", proxy=None, open_timeout=30, **kwargs)


def _raw_http(port: int, request: bytes, timeout: float) -> bytes:
    """Send ``request`` on a plain socket and read what comes back within ``timeout`` seconds."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        try:
            while b"\r\n\r\n" not in answer or len(answer) < answer.index(b"\r\n\r\n") + 4 + 10:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pass
        return answer


# --------------------------------------------------------------------------------------------------
# The task API: bounded, and stopped when its client leaves
# --------------------------------------------------------------------------------------------------
def test_a_task_range_over_the_page_limit_is_refused_saying_how_to_page(server):
    base = f"{server(STATEFUL).url}/{task_api_name(STATEFUL)}"
    started = time.monotonic()
    answer = httpx.post(base + "/task_range", json={"split": "train", "start": 0, "stop": 50_000_000}, headers=HEADERS, timeout=20)
    assert time.monotonic() - started < 5
    assert answer.status_code == 400, answer.text
    assert "at most 1000 tasks per request" in answer.json()["detail"] and "stop=S+1000" in answer.json()["detail"]
    page = httpx.post(base + "/task_range", json={"split": "train", "start": 10**12, "stop": 10**12 + 1000}, headers=HEADERS, timeout=60)
    assert [t["index"] for t in page.json()["tasks"]] == list(range(10**12, 10**12 + 1000))


def test_a_large_finite_split_is_listed_and_ranged_a_page_at_most(server, monkeypatch):
    """A split of a million tasks: `tasks` lists its first 1000, an unbounded `task_range` is refused."""
    from types import SimpleNamespace

    from sopgym.sop_tasks.pack import DomainPack

    base = f"{server(STATEFUL).url}/{task_api_name(STATEFUL)}"
    monkeypatch.setattr(DomainPack, "num_tasks", lambda self, split: 10**6)
    monkeypatch.setattr(DomainPack, "task", lambda self, split, index: SimpleNamespace(task_id=f"big/{split}/{index}"))
    listed = httpx.post(base + "/tasks", json={"split": "test"}, headers=HEADERS, timeout=60).json()["tasks"]
    assert [t["index"] for t in listed] == list(range(1000))
    whole = httpx.post(base + "/task_range", json={"split": "test"}, headers=HEADERS, timeout=60)
    assert whole.status_code == 400 and "(1000000 tasks)" in whole.json()["detail"]
    tail = httpx.post(base + "/task_range", json={"split": "test", "start": -5}, headers=HEADERS, timeout=60).json()["tasks"]
    assert [t["index"] for t in tail] == list(range(10**6 - 5, 10**6))


def test_task_work_stops_when_its_client_leaves(server, monkeypatch):
    """A client that gives up on a slow task range: the server stops making its tasks (it would have
    gone on for the whole range, with nobody to read the answer)."""
    srv = server(STATEFUL)
    from sopgym.sop_tasks.pack import DomainPack

    made = []
    real = DomainPack.task

    def slow(self, split, index):
        time.sleep(0.02)
        made.append(index)
        return real(self, split, index)

    monkeypatch.setattr(DomainPack, "task", slow)
    with pytest.raises(httpx.ReadTimeout):  # 1000 tasks x 20 ms = 20 s of work; the client waits 1 s
        httpx.post(f"{srv.url}/{task_api_name(STATEFUL)}/task_range", json={"split": "train", "start": 0, "stop": 1000},
                   headers=HEADERS, timeout=1)
    time.sleep(0.5)
    after_leaving = len(made)
    time.sleep(1.5)
    assert len(made) - after_leaving <= 1, f"{len(made) - after_leaving} tasks made after the client left"
    assert len(made) < 200


def test_sigterm_stops_the_server_within_seconds_with_a_step_in_flight():
    """A session's step that holds the env for minutes (16 endless run_python calls): SIGTERM still
    stops the server within seconds."""
    proc, url = start_cli_server(CODE, "--env-arg", "code_runner=inprocess")
    try:
        ws = _ws(url, additional_headers=HEADERS, legacy=True)
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        call = "<tool_call>" + json.dumps({"name": "run_python", "arguments": {"code": "while True: pass"}}) + "</tool_call>"
        ws.send(json.dumps({"type": "step", "data": {"type": "reply", "reply": call * 16}}))
        time.sleep(2)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()


# --------------------------------------------------------------------------------------------------
# Request bodies
# --------------------------------------------------------------------------------------------------
def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    """Headers announcing 300 MiB, and no body: the answer comes at once (it waited for the whole body)."""
    srv = server(STATEFUL)
    request = (f"POST /mcp HTTP/1.1\r\nHost: {HOST}:{srv.port}\r\nAuthorization: Bearer {TOKEN}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {300 * 2**20}\r\n\r\n").encode()
    answer = _raw_http(srv.port, request, timeout=10)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"over the limit of 16777216 bytes" in answer


def test_a_body_without_length_is_cut_at_the_limit(server):
    srv = server(STATEFUL, max_request_bytes=2**20)

    def chunks():
        for _ in range(64):
            yield b"x" * 65536  # 4 MiB in all

    answer = httpx.post(srv.url + "/mcp", content=chunks(), headers=HEADERS, timeout=30)
    assert answer.status_code == 413, answer.text
    assert "over the limit of 1048576 bytes" in answer.json()["detail"]


# --------------------------------------------------------------------------------------------------
# One env limit over every path that makes envs
# --------------------------------------------------------------------------------------------------
def test_stateless_resets_count_against_the_session_limit(server):
    srv = server(STATEFUL, max_sessions=2)
    with GenericEnvClient(base_url=srv.url, headers=HEADERS).sync() as a, GenericEnvClient(base_url=srv.url, headers=HEADERS).sync() as b:
        a.reset(seed=0)
        b.reset(seed=0)
        refused = httpx.post(srv.url + "/reset", json={"seed": 0}, headers=HEADERS, timeout=30)
        assert refused.status_code == 503, refused.text
        assert refused.json()["detail"].startswith(AT_CAPACITY) and "2/2 envs in use" in refused.json()["detail"]
    deadline = time.monotonic() + 20
    while (answer := httpx.post(srv.url + "/reset", json={"seed": 0}, headers=HEADERS, timeout=30)).status_code == 503:
        assert time.monotonic() < deadline, "the closed sessions' envs never gave back their slots"
        time.sleep(0.2)
    assert answer.status_code == 200 and answer.json()["observation"]["status"] == "OK"


def test_concurrent_stateless_resets_are_refused_beyond_the_limit(server):
    srv = server(STATEFUL, max_sessions=2)
    codes, barrier = [], threading.Barrier(12)

    def reset():
        barrier.wait(30)
        codes.append(httpx.post(srv.url + "/reset", json={"seed": 0}, headers=HEADERS, timeout=60).status_code)

    threads = [threading.Thread(target=reset) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(set(codes)) <= [200, 503] and len(codes) == 12
    assert 200 in codes


def _containers_of(pid: int) -> list[str]:
    from sopgym.sandboxes.docker import hardening, pool

    client = pool.connect(timeout=10)
    found = client.api.containers(all=True, filters={"label": [f"{hardening.MANAGED}=1", f"{hardening.OWNER_PID}={pid}"]})
    return [c["Id"][:12] for c in found]


@pytest.mark.docker
def _reset_once_a_slot_is_free(env, wait_s: float = 60.0):
    """A stateless reset's env is closed (its container removed) after its answer is sent, so right
    after a burst of them the server may still be at capacity: retry, as the refusal says, until a
    slot is given back."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return env.reset(seed=1)
        except ConnectionError as exc:
            if "at capacity" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_docker_containers_are_released_with_their_envs(docker_sandbox):
    """sandbox=docker: stateless resets (beyond the limit too) and sessions leave no container behind,
    warm or otherwise, once they are done."""
    import gymnasium as gym

    proc, url = start_cli_server(STATEFUL, "--env-arg", "sandbox=docker", "--max-sessions", "3")
    try:
        codes = []

        def reset():
            codes.append(httpx.post(url + "/reset", json={"seed": 0}, headers=HEADERS, timeout=120).status_code)

        threads = [threading.Thread(target=reset) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert sorted(set(codes)) <= [200, 503] and 200 in codes
        for _ in range(2):
            env = gym.make("sopgym/Remote-v0", url=url)
            _reset_once_a_slot_is_free(env)
            env.close()
        deadline = time.monotonic() + 60
        while (left := _containers_of(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left == []
    finally:
        proc.terminate()
        proc.wait(30)


# --------------------------------------------------------------------------------------------------
# Origins, Hosts and the token
# --------------------------------------------------------------------------------------------------
def test_a_foreign_origin_is_refused(server):
    srv = server(STATEFUL)
    with pytest.raises(InvalidStatus) as refused:
        _ws(srv.url, additional_headers=HEADERS, origin="http://evil.example")
    assert refused.value.response.status_code == 403
    assert "Origin 'http://evil.example' is not allowed" in refused.value.response.body.decode()
    # A no-preflight cross-origin POST (text/plain) is refused too, before it can open a session.
    answer = httpx.post(srv.url + "/mcp", content=json.dumps({"jsonrpc": "2.0", "method": "openenv/session/create", "params": {}, "id": 1}),
                        headers={**HEADERS, "Content-Type": "text/plain", "Origin": "http://evil.example"}, timeout=30)
    assert answer.status_code == 403


def test_an_allow_listed_origin_and_the_servers_own_are_let_in(server):
    srv = server(STATEFUL, allowed_origins=("http://ui.example:3000",))
    with _ws(srv.url, additional_headers=HEADERS, origin="http://ui.example:3000") as ws:
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "state"
    assert httpx.get(srv.url + "/metadata", headers={**HEADERS, "Origin": srv.url}, timeout=30).status_code == 200


@pytest.mark.parametrize("host,allowed", [("evil.example", False), ("localhost", True), (HOST, True), ("[::1]", True),
                                          ("envs.internal", False)])
def test_only_local_names_and_addresses_are_answered_by_default(server, host, allowed):
    """DNS rebinding: a page whose name resolves to 127.0.0.1 sends its own name as Host."""
    srv = server(STATEFUL)
    answer = httpx.get(srv.url + "/metadata", headers={**HEADERS, "Host": f"{host}:{srv.port}"}, timeout=30)
    assert answer.status_code == (200 if allowed else 403), answer.text
    if not allowed:
        assert f"Host '{host}:{srv.port}' is not allowed" in answer.json()["detail"]


def test_an_allow_listed_host_is_answered(server):
    srv = server(STATEFUL, allowed_hosts=("envs.internal",))
    assert httpx.get(srv.url + "/metadata", headers={**HEADERS, "Host": f"envs.internal:{srv.port}"}, timeout=30).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-the-token"}, {"Authorization": TOKEN}])
def test_requests_without_the_token_are_refused(server, headers):
    srv = server(STATEFUL)
    for method, path in (("post", "/reset"), ("get", "/state"), ("post", "/mcp"), ("get", "/schema"),
                         ("post", f"/{task_api_name(STATEFUL)}/task")):
        answer = httpx.request(method, srv.url + path, json={}, headers=headers, timeout=30)
        assert answer.status_code == 401, (path, answer.text)
        assert answer.headers["www-authenticate"] == "Bearer"
    with pytest.raises(InvalidStatus) as refused:
        _ws(srv.url, additional_headers=headers)
    assert refused.value.response.status_code == 401
    assert httpx.get(srv.url + "/health", timeout=30).status_code == 200  # says only that it runs


def test_the_remote_env_without_the_token_says_what_is_missing(server, monkeypatch):
    import gymnasium as gym

    url = server(STATEFUL).url
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(ConnectionError, match=r"HTTP 401: a token is required.*no token was sent: pass token= or set SOPGYM_SERVE_TOKEN"):
        gym.make("sopgym/Remote-v0", url=url)
    gym.make("sopgym/Remote-v0", url=url, token=TOKEN).close()


def test_without_a_token_option_requests_need_none_but_foreign_pages_stay_out(server):
    srv = server(STATEFUL, token=None)
    assert httpx.post(srv.url + "/reset", json={"seed": 0}, timeout=30).status_code == 200
    assert httpx.post(srv.url + "/reset", json={"seed": 0}, headers={"Origin": "http://evil.example"}, timeout=30).status_code == 403


def test_the_command_prints_a_generated_token_that_clients_need():
    environ = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    proc, url = start_cli_server(STATEFUL, environ=environ)
    try:
        token = stderr_line(proc, "sopgym serve: token ").split()[3]
        assert len(token) >= 32 and token != TOKEN
        assert httpx.get(url + "/state", headers=HEADERS, timeout=30).status_code == 401
        assert httpx.get(url + "/state", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)


# --------------------------------------------------------------------------------------------------
# Ground truth
# --------------------------------------------------------------------------------------------------
def test_ground_truth_never_leaves_the_server_by_default(server):
    """The expected answer and state are in no frame of a whole episode (the final record, the state)."""
    from sopgym.envs.policies import make_policy

    srv = server(STATEFUL)
    frames = []
    with _ws(srv.url, additional_headers=HEADERS) as ws:
        def ask(message):
            ws.send(json.dumps(message))
            frames.append(ws.recv(timeout=60))
            return json.loads(frames[-1])

        step = json.loads(ask({"type": "reset", "data": {"split": "test", "index": 0}})["data"]["observation"]["gym_step"])
        policy = make_policy("oracle")
        policy.reset(step["info"])
        while not step.get("terminated"):
            reply = policy.act(step["observation"], step["info"])
            step = json.loads(ask({"type": "step", "data": {"type": "reply", "reply": reply}})["data"]["observation"]["gym_step"])
        state = ask({"type": "state"})["data"]
    record = step["info"]["episode"]
    assert step["reward"] == 1.0
    assert not set(GROUND_TRUTH_KEYS) & set(record) and record[WITHHELD_KEY] == list(GROUND_TRUTH_KEYS)
    assert state["episode"] == record and state["ground_truth"] is False
    assert not any(re.search(r'\\?"expected(_state)?\\?"\s*:', frame) for frame in frames)  # no such key, at any depth
