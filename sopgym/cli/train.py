"""``sopgym train --config configs/X.yaml [key=value ...]``: the trainer's command line.

``main(argv)`` takes the arguments after ``train`` (a leading ``train`` is tolerated, so a script
can hand it its whole ``sys.argv[1:]``). Data-parallel on N processes (docs/scaling.md):

    torchrun --nproc-per-node N -m sopgym train --config configs/X.yaml
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable

__all__ = ["build_parser", "main", "needs"]


def needs() -> None:
    """What reading a config takes: PyYAML (the ``train`` extra) and the config module."""
    import yaml  # noqa: F401

    from sopgym.trainers import config  # noqa: F401


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sopgym train", description="Train a policy on sopgym environments (SFT + RL).")
    p.add_argument("--config", required=True, help="YAML config (see configs/)")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint in run_dir")
    p.add_argument("--allow-config-change", action="store_true",
                   help="resume even if the config differs from the checkpoint's beyond the run-length keys")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. rollout.group_size=8 optim.lr=1e-5")
    return p


def _config_errors(problems: list[str]) -> int:
    for problem in problems:
        print(f"sopgym train: {problem}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from sopgym.trainers.config import ConfigError, config_to_dict, load_config, runtime_problems

    try:
        cfg = load_config(args.config, args.overrides)
        if not args.print_config:
            problems = runtime_problems(cfg)
            if problems:
                raise ConfigError(problems)
    except ConfigError as exc:
        return _config_errors(exc.problems)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        return 0
    from sopgym.trainers.loop import TrainResult, train

    run: Callable[..., TrainResult | None] = train
    if "TORCHELASTIC_ERROR_FILE" in os.environ:
        # Under torchrun: a rank's exception goes to the error file torchrun reads, so its summary
        # of the failed run shows that rank's traceback.
        from torch.distributed.elastic.multiprocessing.errors import record

        run = record(train)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    try:
        result = run(cfg, resume=not args.no_resume, allow_config_change=args.allow_config_change)
    except ConfigError as exc:  # found once the checkpoint or tokenizer is read, before any training
        return _config_errors(exc.problems if rank0 else [])
    if rank0 and result is not None:  # None: record() returns None for a SystemExit(0)
        print(f"run dir: {result.run_dir}  mlflow run: {result.run_id}")
    return 0
