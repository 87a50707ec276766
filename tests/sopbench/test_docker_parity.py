"""In-process vs Docker sandbox: the same calls give the same texts.

Skipped with a reason when Docker (SDK, daemon or sandbox image) is unavailable, unless
``SOPGYM_REQUIRE_DOCKER=1``, in which case that is a failure (the ``docker_runner`` fixture).
"""

from __future__ import annotations

from sopgym.sopbench.runners import InProcessToolRunner

from .test_tools_fixture import EXPECTED


def test_docker_and_inprocess_give_identical_texts(fixture_report, docker_runner):
    helpdesk = fixture_report.domains["helpdesk"]
    calls = [(n, a) for n, a, _, _ in EXPECTED]
    docker = docker_runner(helpdesk).call_many(calls)
    local = InProcessToolRunner(helpdesk).call_many(calls)
    assert docker == local
    assert [r["text"] for r in docker] == [t for _, _, t, _ in EXPECTED]


def test_docker_runner_hides_tool_prints_and_reads_files_beside_tools(fixture_report, docker_runner):
    intake = fixture_report.domains["intake"]
    got = docker_runner(intake).call_many([("inspect_parcel", {"parcel_id": "P2"}), ("inspect_parcel", {"parcel_id": "P9"})])
    assert [r["text"] for r in got] == [
        '{"parcel_id": "P2", "damage_code": "D7", "weight": NaN, "status": "rejected"}', "Error: 'P9'"]
