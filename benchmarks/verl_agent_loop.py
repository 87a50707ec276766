"""Episodes per second of verl's ``SopgymAgentLoop`` against a stand-in inference server, with a baseline.

What is timed: ``N`` episodes of the oracle's replies (``--episodes``, 64 by default), each a
``SopgymAgentLoop.run`` built from verl's registry as verl's ``AgentLoopWorker`` builds it, all
started at once on one event loop (``asyncio.gather``, as the worker runs its samples). The server
stands in for vLLM/SGLang: each request sleeps ``--latency`` seconds (50 ms by default) on the event
loop and answers the token ids of the oracle's next reply for the prompt's task. Reported: wall time,
episodes/s and the most requests in flight at once.

Baseline (``--compare-with REV``, default the commit before the loop became asynchronous): the same
measurement, in a subprocess, of the package as it was at ``REV`` (``git archive``), whose loop ran
each whole episode in the executor and so held a thread for every generation. The ratio is
episodes/s of this checkout over the baseline's, measured in the same run. ``--compare-with none``
skips it.

Needs verl (run it in the verl tox env):
    .tox/verl/bin/python benchmarks/verl_agent_loop.py [--episodes 64] [--latency 0.05] [--compare-with REV|none]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _revision import run_at  # noqa: E402

ENV = "sopgym/WarehouseReceiving-v0"
#: The last commit whose SopgymAgentLoop ran whole episodes in the executor.
BASELINE_REV = "fe57dc2"


class ScriptedServer:
    """verl's ``server_manager`` stand-in: the next scripted reply of the prompt's task as token ids.

    Args:
        tokenizer: the episodes' tokenizer (prompts are decoded to find the task and the turn).
        replies: ``user message -> the replies of that task, in order``.
        latency: seconds each request waits on the event loop before it answers.
        fail_at_turn: raise ``ConnectionError`` on that turn (0-based), as a server that went away.
    """

    def __init__(self, tokenizer, replies: dict[str, list[str]], latency: float = 0.0, fail_at_turn: int | None = None):
        self.tokenizer, self.replies, self.latency, self.fail_at_turn = tokenizer, replies, latency, fail_at_turn
        self.requests: list[tuple[str, list[int], dict]] = []
        self.in_flight = self.max_in_flight = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append((request_id, list(prompt_ids), dict(sampling_params)))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
            user = next(u for u in self.replies if u in text)
            turn = text.count("<|im_start|>assistant") - 1
            if turn == self.fail_at_turn:
                raise ConnectionError("injected: the inference server went away")
            ids = self.tokenizer(self.replies[user][turn], add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")
        finally:
            self.in_flight -= 1


def build_loop(server, tokenizer, prompt_length: int = 4096, response_length: int = 4096, entry=None):
    """A ``SopgymAgentLoop`` from verl's registry, as ``AgentLoopWorker._run_agent_loop`` builds one;
    ``entry``: the loop's config entry instead of the registry's (one of an agent_loop_config_path file)."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from sopgym.integrations.verl import AGENT_NAME

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": prompt_length, "response_length": response_length}},
                               "data": {}})
    return hydra.utils.instantiate(
        config=_agent_loop_registry[AGENT_NAME] if entry is None else entry, trainer_config=DictConfigWrap(config=config), server_manager=server,
        tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data), tools=ToolListWrap([]),
    )


def setup(num_tasks: int):
    """Rows, the oracle's replies per task and a tokenizer built on their text (offline)."""
    import gymnasium as gym

    import sopgym  # noqa: F401
    from sopgym.envs.policies import make_policy
    from sopgym.episodes.runner import run_episode
    from sopgym.integrations.verl import verl_rows
    from sopgym.trainers.tokenizer import build_bpe_tokenizer

    kwargs = {"code_runner": "inprocess"}
    rows = verl_rows(ENV, "train", num_tasks, env_kwargs=kwargs)
    replies, texts = {}, []
    env = gym.make(ENV, **kwargs)
    for row in rows:
        episode = row["extra_info"]["sopgym"]
        result = run_episode(env, make_policy("oracle"), seed=episode["seed"],
                             options={"split": episode["split"], "task_index": episode["task_index"]})
        replies[row["prompt"][1]["content"]] = [t.action for t in result.turns]
        texts += [m["content"] for m in row["prompt"]] + [str(m.get("content")) for m in result.messages]
    env.close()
    return rows, replies, build_bpe_tokenizer(texts * 2, vocab_size=1000)


def measure(episodes: int, latency: float, num_tasks: int) -> dict:
    rows, replies, tokenizer = setup(num_tasks)
    server = ScriptedServer(tokenizer, replies, latency=latency)

    async def main():
        runs = []
        for i in range(episodes):
            row = rows[i % len(rows)]
            runs.append(build_loop(server, tokenizer).run({"temperature": 1.0}, **row, raw_prompt=row["prompt"]))
        return await asyncio.gather(*runs)

    start = time.perf_counter()
    outputs = asyncio.run(main())
    wall = time.perf_counter() - start
    assert all(out.reward_score == 1.0 for out in outputs), "expected the oracle's replies to score 1.0 in every episode"
    return {"episodes": episodes, "wall_s": wall, "episodes_per_s": episodes / wall, "requests": len(server.requests),
            "max_in_flight": server.max_in_flight}


def baseline(rev: str, args) -> dict:
    """The same measurement of the package at ``rev``, in a subprocess."""
    return run_at(rev, __file__, ["--episodes", str(args.episodes), "--latency", str(args.latency), "--tasks", str(args.tasks),
                                  "--compare-with", "none", "--json"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request of the stand-in server")
    parser.add_argument("--tasks", type=int, default=8, help="distinct tasks the episodes cycle through")
    parser.add_argument("--compare-with", default=BASELINE_REV, help="git revision of the baseline, or 'none'")
    parser.add_argument("--json", action="store_true", help="print this checkout's figures as one JSON line")
    args = parser.parse_args()
    here = measure(args.episodes, args.latency, args.tasks)
    if args.json:
        print(json.dumps(here))
        return
    print(f"== verl SopgymAgentLoop: {args.episodes} episodes of {ENV} (oracle replies), stand-in server {args.latency * 1000:.0f} ms/request")
    print(f"{'package':<28} {'wall s':>8} {'episodes/s':>11} {'requests':>9} {'max in flight':>14}")
    rows = [("this checkout", here)]
    if args.compare_with != "none":
        rows.append((f"baseline {args.compare_with}", baseline(args.compare_with, args)))
    for name, r in rows:
        print(f"{name:<28} {r['wall_s']:>8.2f} {r['episodes_per_s']:>11.1f} {r['requests']:>9} {r['max_in_flight']:>14}")
    if len(rows) == 2:
        print(f"ratio (episodes/s, this checkout / baseline): {here['episodes_per_s'] / rows[1][1]['episodes_per_s']:.2f}x")


if __name__ == "__main__":
    main()
