"""What the torchrun tests launch on each rank: ``sopgym train`` on the fake env.

    torchrun --nproc-per-node 2 -m tests.trainers.dist_train --config run.yaml [key=value ...]

It registers ``sopgym-test/Fake-v0`` (importing ``fake_env``), makes the fake env's oracle the
demonstrator, and runs the train command's ``main``, the code ``torchrun -m sopgym train`` runs.
With ``SOPGYM_TEST_RAISE_ON_RANK=k`` rank k raises in its second optimiser step: a failure injected
by the test, never by sopgym. With ``SOPGYM_TEST_COMPUTE_DTYPES=<folder>`` every rank writes the dtypes
its trained model's first attention projection computed in to ``<folder>/rank<k>.txt``.
"""

from __future__ import annotations

import os
import sys

from sopgym.cli import train as train_command
from sopgym.trainers import distributed, loop, optimise

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


def _record_compute_dtypes(folder: str, rank: int) -> None:
    real = distributed.DataParallel.wrap
    seen: set[str] = set()

    def wrap(self, lm, precision=None):
        if not seen:  # the trained model (wrapped first), not the KL reference
            seen.add("")
            lm.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, out: _write(out.dtype))
        return real(self, lm, precision)

    def _write(dtype) -> None:
        if str(dtype) not in seen:
            seen.add(str(dtype))
            with open(os.path.join(folder, f"rank{rank}.txt"), "a") as f:
                f.write(f"{dtype}\n")

    distributed.DataParallel.wrap = wrap


def main() -> int:
    loop.demonstrator = lambda sft_cfg, seed: fake_env.FakeOracle
    raise_on = os.environ.get("SOPGYM_TEST_RAISE_ON_RANK")
    if raise_on is not None and int(os.environ["RANK"]) == int(raise_on):
        _inject_failure(int(raise_on))
    if os.environ.get("SOPGYM_TEST_COMPUTE_DTYPES"):
        _record_compute_dtypes(os.environ["SOPGYM_TEST_COMPUTE_DTYPES"], int(os.environ["RANK"]))
    return train_command.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
