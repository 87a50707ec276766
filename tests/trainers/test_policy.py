"""Batched KV-cached sampling, and the OpenAI-compatible client against a local HTTP server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from sopgym.evaluation import EnvPool, evaluate_records, run_episodes
from sopgym.trainers.policy.hf import HFPolicy, top_p_filter
from sopgym.trainers.policy.openai_client import ChatAgent, EndpointError, OpenAIChatPolicy, tool_calls_to_hermes
from sopgym.trainers.rollout import group_spec_list

from . import fake_env
from .helpers import tiny_model, tiny_tokenizer


def test_top_p_filter_keeps_smallest_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    out = top_p_filter(logits, 0.7)
    assert torch.isfinite(out[0, :2]).all() and torch.isinf(out[0, 2:]).all()
    assert torch.isfinite(top_p_filter(logits, 0.4)[0, 0]) and torch.isinf(top_p_filter(logits, 0.4)[0, 1:]).all()


def test_batched_greedy_equals_one_at_a_time():
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    policy = HFPolicy(model, tok)
    prompts = [tok("key: k1 lookup", add_special_tokens=False)["input_ids"], tok("SOP", add_special_tokens=False)["input_ids"], [5, 6, 7, 8, 9, 10, 11]]
    caps = [7, 3, 5]
    batched = policy.generate(prompts, caps, temperature=0.0)
    for p, cap, b in zip(prompts, caps, batched):
        (single,) = policy.generate([p], cap, temperature=0.0)
        assert single.ids == b.ids
        assert max(abs(x - y) for x, y in zip(single.logps, b.logps)) < 1e-4
        assert len(b.ids) <= cap
    for kwargs in ({"static_cache": False}, {"bucket_by_length": False}, {"bucket_by_length": False, "static_cache": False}):
        other = HFPolicy(model, tok, **kwargs).generate(prompts, caps, temperature=0.0)  # left-padded batch too
        assert [s.ids for s in other] == [b.ids for b in batched], kwargs
        assert max(abs(x - y) for s, b in zip(other, batched) for x, y in zip(s.logps, b.logps)) < 1e-4


def test_sampling_is_reproducible_and_logps_match_the_model():
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    policy = HFPolicy(model, tok)
    prompt = tok("key: k3", add_special_tokens=False)["input_ids"]
    a = policy.generate([prompt, prompt], 6, temperature=0.7, generator=torch.Generator().manual_seed(1))
    b = policy.generate([prompt, prompt], 6, temperature=0.7, generator=torch.Generator().manual_seed(1))
    assert [s.ids for s in a] == [s.ids for s in b]
    ids = prompt + a[0].ids
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    ref = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.7, -1).gather(-1, torch.tensor(a[0].ids)[:, None])[:, 0]
    assert torch.allclose(ref, torch.tensor(a[0].logps), atol=1e-4)
    assert all(s.hit_cap == (tok.eos_token_id not in s.ids) for s in a)


class _Handler(BaseHTTPRequestHandler):
    requests: list = []
    fail_first = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body, self.headers.get("Authorization")))
        if type(self).fail_first > 0:
            type(self).fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        if body["model"] == "bad":
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b"bad model")
            return
        msgs = body["messages"]
        last = msgs[-1]
        if last["role"] == "tool":
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "submit_answer", "arguments": json.dumps({"answer": last["content"]})}}]}
        else:
            message = {"role": "assistant", "content": fake_env.oracle_reply(msgs)}
        data = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Handler.requests = []
    _Handler.fail_first = 0
    httpd = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_tool_calls_to_hermes():
    msg = {"content": "ok", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]}
    assert tool_calls_to_hermes(msg) == 'ok\n<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'


def test_openai_client_runs_episodes_against_local_server(server):
    policy = OpenAIChatPolicy(server, model="m", api_key="k", max_workers=2)
    _Handler.fail_first = 1  # one 503: retried
    results = run_episodes(group_spec_list(["fake"], "val", 0, 3, 1), ChatAgent(policy), EnvPool(lambda env_id: fake_env.FakeSopEnv()))
    assert [r.success for r in results] == [True, True, True]
    path, body, auth = _Handler.requests[-1]
    assert path == "/v1/chat/completions" and body["model"] == "m" and auth == "Bearer k"
    assert body["tools"][0]["function"]["name"] == "lookup"


def test_openai_client_errors(server):
    with pytest.raises(EndpointError, match="HTTP 400"):
        OpenAIChatPolicy(server, model="bad").complete([{"role": "user", "content": "hi"}])
    results = run_episodes(group_spec_list(["fake"], "val", 0, 1, 1),
                           ChatAgent(OpenAIChatPolicy("http://127.0.0.1:9/v1", model="m", retries=1, timeout_s=1)),
                           EnvPool(lambda e: fake_env.FakeSopEnv()))
    assert results[0].record["infrastructure_failure"] is True
    assert evaluate_records([results[0].record], n_bootstrap=0)["infrastructure_failure_rate"] == 1.0
