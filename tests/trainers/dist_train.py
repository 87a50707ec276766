"""What the torchrun tests launch on each rank: ``sopgym train`` on the fake env.

    torchrun --nproc-per-node 2 -m tests.trainers.dist_train --config run.yaml [key=value ...]

It registers ``sopgym-test/Fake-v0`` (importing ``fake_env``), makes the fake env's oracle the
demonstrator, and runs the train command's ``main``, the code ``torchrun -m sopgym train`` runs.
With ``SOPGYM_TEST_RAISE_ON_RANK=k`` rank k raises in its second optimiser step: a failure injected
by the test, never by sopgym.
"""

from __future__ import annotations

import os
import sys

from sopgym.cli import train as train_command
from sopgym.trainers import loop, optimise

from . import fake_env


def _inject_failure(rank: int) -> None:
    real = optimise.accumulate_gradients
    calls = []

    def accumulate_gradients(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError(f"injected failure on rank {rank}")
        return real(*args, **kwargs)

    optimise.accumulate_gradients = accumulate_gradients


def main() -> int:
    loop.default_oracle = fake_env.FakeOracle
    raise_on = os.environ.get("SOPGYM_TEST_RAISE_ON_RANK")
    if raise_on is not None and int(os.environ["RANK"]) == int(raise_on):
        _inject_failure(int(raise_on))
    return train_command.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
