"""How the Docker code runner reads the daemon's events after a failed run (``pool.memory_events``),
on scripted event streams: the real daemon is exercised by tests/docker/test_docker_attribution.py,
where the order of its events depends on load."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("docker")

from sopgym.sandboxes.docker.pool import memory_events  # noqa: E402


class Events:
    """A client whose ``api.events`` yields the given (status, seconds after ``since``) events."""

    def __init__(self, since: float, *events: tuple[str, float], fail: bool = False):
        self.api = self
        self.since, self.scripted, self.fail = since, events, fail

    def events(self, **_):
        if self.fail:
            raise ConnectionError("daemon unreachable")
        return Stream({"status": status, "timeNano": int((self.since + after) * 1e9)} for status, after in self.scripted)


class Stream(list):
    """What ``api.events`` returns: iterable, and closed after reading."""

    def close(self):
        pass


@pytest.mark.parametrize("events, verdict", [
    ((("oom", 0.5), ("die", 0.6)), "oom"),
    ((("kill", 0.5), ("oom", 0.6), ("die", 0.7)), "outside"),
    ((("oom", 0.5), ("kill", 0.6), ("die", 0.7)), "outside"),  # the daemon logs kill after the signal
    ((("pause", 0.5), ("oom", 0.6)), "outside"),
    ((("oom", -5.0), ("die", 0.5)), None),  # before the run: not the run's
    ((("die", 0.5),), None),
    ((), None),
], ids=["oom", "kill-then-oom", "oom-then-kill", "pause-then-oom", "oom-before-the-run", "die-alone", "nothing"])
def test_a_container_acted_on_from_outside_is_never_the_runs(events, verdict):
    since = time.time()
    assert memory_events(Events(since, *events), "c" * 64, since, settle_s=0.0) == verdict


def test_an_unreachable_daemon_is_no_verdict():
    since = time.time()
    assert memory_events(Events(since, ("oom", 0.5), fail=True), "c" * 64, since, settle_s=0.0) is None
