"""``sopgym rescore TRAJECTORIES [--out RESULTS]``: the recorded episodes of a ``sopgym eval`` run scored
again by the current evaluator, written as a results file ``sopgym report`` reads
(:mod:`sopgym.bench.rescore`)."""

from __future__ import annotations

import argparse
import sys

from sopgym.cli.arguments import non_negative_int, positive_int

__all__ = ["build_parser", "main", "default_out"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sopgym rescore",
        description="Scores the finished episodes of a `sopgym eval` trajectory file again with this version's evaluator "
                    "(no model or env is run) and writes a results file in the format `sopgym eval --out` writes.")
    parser.add_argument("trajectories", help="a trajectory file of `sopgym eval` (--trajectories, or NAME.trajectories.jsonl)")
    parser.add_argument("--out", default=None,
                        help="the results JSON to write (default: the trajectory file's name with .rescored.json)")
    parser.add_argument("--k", type=positive_int, default=1, help="k of pass@k and pass^k (<= samples per task)")
    parser.add_argument("--n-bootstrap", type=non_negative_int, default=1000,
                        help="bootstrap resamples for the 95%% intervals (0: off)")
    parser.add_argument("--quiet", action="store_true", help="print only where the results went")
    return parser


def default_out(trajectories: str) -> str:
    """``r.trajectories.jsonl`` -> ``r.rescored.json``; ``t.jsonl`` -> ``t.rescored.json``."""
    for suffix in (".trajectories.jsonl", ".jsonl"):
        if trajectories.endswith(suffix):
            return trajectories[: -len(suffix)] + ".rescored.json"
    return trajectories + ".rescored.json"


def main(argv: list[str]) -> int:
    """Exit codes: 0 written, 2 a damaged or foreign trajectory file or a bad output path (one line on stderr),
    1 the results could not be written."""
    args = build_parser().parse_args(argv)
    from sopgym.bench.eval_command import check_output_paths, format_results, format_suite
    from sopgym.bench.rescore import rescore_trajectories
    from sopgym.bench.suite import write_results

    out = args.out or default_out(args.trajectories)
    problem = check_output_paths(out, None)
    if problem:
        print(f"sopgym rescore: {problem}", file=sys.stderr)
        return 2
    try:
        results = rescore_trajectories(args.trajectories, k=args.k, n_bootstrap=args.n_bootstrap,
                                       arguments={"trajectories": args.trajectories, "out": out, "k": args.k,
                                                  "n_bootstrap": args.n_bootstrap})
    except OSError as exc:
        print(f"sopgym rescore: cannot read {args.trajectories}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"sopgym rescore: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        identity = results["config"]["identity"]
        for env_id, metrics in results["envs"].items():
            print(format_results(metrics, env_id, identity.get("policy"), identity["plan"]["split"]))
            print()
        if len(results["envs"]) > 1:
            print(format_suite(results))
        run = results["run"]
        if run["status"] != "finished":
            print(f"sopgym rescore: note: {run['episodes_finished']} of the run's {run['episodes_planned']} episodes are "
                  "in the file (a run that did not finish): no intervals, k at most the samples found", file=sys.stderr)
    try:
        write_results(out, results)
    except OSError as exc:
        print(f"sopgym rescore: could not write the results to {out}: {exc}", file=sys.stderr)
        return 1
    print(f"results: {out}")
    return 0
