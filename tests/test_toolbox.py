"""The ToolBox and the in-process stateful backend (sandboxes/)."""

import sys
import types

import pytest

from sopgym.sandboxes import (
    ERROR_KEY,
    InProcessBackend,
    Outcome,
    SandboxEpisode,
    SandboxError,
    StatefulProgram,
    Tier,
    ToolBox,
    ToolSpec,
    canonical_args,
)

LOOKUP = ToolSpec("lookup", "d", {"type": "object", "properties": {"k": {"type": "string"}, "n": {"type": "integer"}}, "required": ["k"]}, not_found="no record for {k}")
PUT = ToolSpec("put", "d", {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}, tier=Tier.STATEFUL, writes=True)
GET = ToolSpec("get_all", "d", {"type": "object", "properties": {}}, tier=Tier.STATEFUL)

PROGRAM_SRC = '''
SCHEMA = "CREATE TABLE items (v TEXT NOT NULL);"
def put(db, args):
    db.execute("INSERT INTO items (v) VALUES (?)", (args["v"],))
    if args["v"] == "boom":
        raise ValueError("boom is not allowed")
    return {"ok": True}
def get_all(db, args):
    return [r["v"] for r in db.execute("SELECT v FROM items ORDER BY rowid")]
TOOLS = {"put": put, "get_all": get_all}
def snapshot(db):
    return {"items": get_all(db, {})}
'''


@pytest.fixture(scope="module")
def program():
    module = types.ModuleType("sopgym_test_program")
    exec(PROGRAM_SRC, module.__dict__)
    sys.modules[module.__name__] = module
    yield StatefulProgram(module.__name__)
    del sys.modules[module.__name__]


def episode(program=None, state=None, replay=None):
    return SandboxEpisode("t/0", replay=replay or {}, program=program, initial_state=state)


def test_replay_hit_is_keyed_by_canonical_coerced_arguments():
    box = ToolBox([LOOKUP])
    box.start_episode(episode(replay={"lookup": {canonical_args({"k": "a", "n": 2}): {"x": 1}}}))
    assert box.call("lookup", {"n": "2", "k": "a"}).content == {"x": 1}


def test_replay_miss_returns_the_tools_not_found_error_deterministically():
    box = ToolBox([LOOKUP])
    box.start_episode(episode())
    results = {box.call("lookup", {"k": "zz"}) for _ in range(3)}
    assert len(results) == 1
    (r,) = results
    assert (r.outcome, r.error, r.render()) == (Outcome.TOOL_ERROR, "no record for zz", "Error: no record for zz")


def test_recorded_error_replays_as_tool_error():
    box = ToolBox([LOOKUP])
    box.start_episode(episode(replay={"lookup": {canonical_args({"k": "a"}): {ERROR_KEY: "service down"}}}))
    assert box.call("lookup", {"k": "a"}).render() == "Error: service down"


def test_unknown_tool_and_bad_arguments_are_outcomes():
    box = ToolBox([LOOKUP])
    box.start_episode(episode())
    assert box.call("nope", {}).outcome is Outcome.UNKNOWN_TOOL
    assert box.call("lookup", {"k": 1}).outcome is Outcome.BAD_ARGUMENTS


def test_write_then_read_within_an_episode(program):
    box = ToolBox([PUT, GET], stateful=InProcessBackend())
    box.start_episode(episode(program, {"items": [{"v": "seed"}]}))
    box.call("put", {"v": "new"})
    assert box.call("get_all", {}).content == ["seed", "new"]


def test_failed_write_is_rolled_back(program):
    box = ToolBox([PUT, GET], stateful=InProcessBackend())
    box.start_episode(episode(program, {}))
    result = box.call("put", {"v": "boom"})
    assert (result.outcome, result.error) == (Outcome.TOOL_ERROR, "boom is not allowed")
    assert box.snapshot() == {"items": []}


def test_nothing_survives_start_episode(program):
    box = ToolBox([PUT, GET], stateful=InProcessBackend())
    box.start_episode(episode(program, {}))
    box.call("put", {"v": "leak"})
    box.start_episode(episode(program, {}))
    assert box.snapshot() == {"items": []}


def test_two_backends_do_not_share_state(program):
    a, b = ToolBox([PUT, GET], stateful=InProcessBackend()), ToolBox([PUT, GET], stateful=InProcessBackend())
    a.start_episode(episode(program, {}))
    b.start_episode(episode(program, {}))
    a.call("put", {"v": "only-a"})
    assert b.snapshot() == {"items": []}


def test_backend_infrastructure_failure_becomes_sandbox_error_outcome(program):
    class Broken(InProcessBackend):
        def call(self, name, arguments):
            raise SandboxError("container vanished")

    box = ToolBox([PUT, GET], stateful=Broken())
    box.start_episode(episode(program, {}))
    result = box.call("put", {"v": "x"})
    assert result.outcome is Outcome.SANDBOX_ERROR and result.is_infrastructure_failure


def test_close_is_idempotent(program):
    box = ToolBox([PUT, GET], stateful=InProcessBackend())
    box.close()
    box.start_episode(episode(program, {}))
    box.close()
    box.close()
