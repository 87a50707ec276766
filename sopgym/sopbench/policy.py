"""``groundtruth-replay``: the SOP-Bench plumbing baseline.

It calls each tool once, in ``toolspecs.json`` order, with the arguments implied by the task row
(see :mod:`.groundtruth`), then submits the row's labels. Its task success is 100% whenever the
env, the tools and the scoring are wired right; a lower figure is a plumbing bug (or a label that
the submit schema cannot express). It reads the row, labels included: it is a test fixture, not
an agent, and its episodes must never be used as training data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sopgym.envs.policies import Policy, format_call, register_policy
from sopgym.sop_tasks.pack import SUBMIT_TOOL

from .adapter import get_registered
from .groundtruth import decode, implied_args
from .loader import spec_of

__all__ = ["GroundTruthReplayPolicy"]


class GroundTruthReplayPolicy(Policy):
    name = "groundtruth-replay"

    def reset(self, info: Mapping[str, Any]) -> None:
        namespace = info["env_id"].split("/", 1)[0]
        self._domain = get_registered(f"{namespace}/{info['domain']}").domain
        self._index = int(info["task_id"].rsplit("/", 1)[1])
        self._row = self._domain.row(self._index)
        self._specs = [spec_of(e) for e in self._domain.toolspecs]
        self._earlier: list[Any] = []
        self._step = 0

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        if self._step > 0:
            last = info["messages"][-1]
            text = last.get("content") or ""
            self._earlier.append(None if text.startswith("Error: ") else decode(text))
        if self._step < len(self._specs):
            spec = self._specs[self._step]
            self._step += 1
            return format_call(spec["name"], implied_args(spec, self._row, [e for e in self._earlier if e is not None]))
        return format_call(SUBMIT_TOOL, self._domain.labels(self._index))


register_policy(GroundTruthReplayPolicy.name, GroundTruthReplayPolicy)
