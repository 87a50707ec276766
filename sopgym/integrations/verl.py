"""A verl agent loop that runs whole sopgym episodes in token space. Needs verl (see docs/integrations.md).

Importing this module registers :class:`SopgymAgentLoop` with verl under ``"sopgym_agent"``.

Example (data and config)::

    import pandas as pd
    from sopgym.integrations.verl import verl_rows

    pd.DataFrame(verl_rows("sopgym/WarehouseReceiving-v0", "train", 1024)).to_parquet("train.parquet")
    # python -m verl.trainer.main_ppo data.train_files=train.parquet \\
    #     actor_rollout_ref.rollout.mode=async actor_rollout_ref.rollout.agent.agent_loop_config_path=sopgym_agent.yaml ...
    # sopgym_agent.yaml: [{name: sopgym_agent, _target_: sopgym.integrations.verl.SopgymAgentLoop}]

Each row names its episode (``extra_info.sopgym``: env id, split, task index, seed; optional
``env_kwargs`` for ``gymnasium.make``), carries verl's ``extra_info.index`` (its position in the
rows) and selects this loop (``agent_name: sopgym_agent``). The loop resets the env to that task,
then plays it turn by turn, asynchronously like verl's own ``ToolAgentLoop``: it awaits
``server_manager.generate`` for the next turn's token ids (and log-probs), hands the decoded text
to ``env.step`` (sopgym's parsing, statuses, feedback, invalid-action penalty and exact tool
schemas, rendered into the prompt by the chat template) in the default executor, and appends the
env's messages through the chat template (:class:`~sopgym.trainers.episodes.EpisodeBuilder`). It
returns ``prompt_ids`` (the initial chat with the tool schemas and the generation prompt),
``response_ids`` (every later token), ``response_mask`` (1 on sampled tokens only),
``response_logprobs``, ``num_turns`` (counted as ``ToolAgentLoop`` counts them: the prompt, each
assistant turn, each env answer in the response) and ``reward_score`` (sopgym's return, so verl's
reward function is not asked).

Budget: ``rollout.response_length`` counts every response token of the episode; a turn is cut where
it ends, and an episode with no room left is ended with ``end_episode("context_budget")``. A prompt
longer than ``rollout.prompt_length`` is refused before the first request (left-truncating it would
cut the SOP).

Infrastructure failures (a failed or aborted generation request, ``ERROR_SANDBOX``): the episode is
ended as such (``end_episode("inference")`` for the server), its ``response_mask`` is all 0 (nothing
of it is trained on) and ``extra_fields["infrastructure_failure"]`` is True. verl's group baseline
still counts its reward (0); drop such samples before the advantage if that matters.

Envs served elsewhere (``sopgym serve`` on another host): ``verl_rows(..., servers={env_id: URL})``
renders the rows there, and the agent loop's config entry takes the same ``servers`` (its keys
reach the constructor)::

    - name: sopgym_agent
      _target_: sopgym.integrations.verl.SopgymAgentLoop
      servers: {"sopgym/WarehouseReceiving-v0": "http://envhost:8000"}

Each episode is then a session of that server (the token from ``$SOPGYM_SERVE_TOKEN`` on the
agent-loop workers, or ``{"url": ..., "token": ...}``); rows, rewards and records are the local env's.

This loop tokenises with sopgym's EpisodeBuilder rather than verl's Continuous Token builder, whose
prefix checks are the same in kind: a template that rewrites earlier turns raises
``TemplatePrefixError`` instead of being trained on silently.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from sopgym.trainers.episodes import Episode, EpisodeBuilder

from ._common import (
    ROW_KEYS,
    env_kwargs_of,
    episode_metrics,
    make_env,
    reset_from_row,
    servers_of,
    success_of,
    task_rows,
)

__all__ = ["AGENT_NAME", "SopgymAgentLoop", "verl_rows"]

AGENT_NAME = "sopgym_agent"


def verl_rows(env_id: str | Sequence[str], split: str = "train", num_tasks: int = 64, *,
              env_kwargs: Mapping[str, Any] | None = None, servers: Mapping[str, Any] | None = None,
              **kwargs: Any) -> list[dict[str, Any]]:
    """verl dataset rows (``RLHFDataset`` columns) for tasks of ``split``.

    Columns: ``prompt`` (sopgym's initial chat), ``data_source`` (the env id), ``agent_name``
    (``sopgym_agent``), ``extra_info`` (``index``: the row's position, which verl's ``RLHFDataset``
    reads as the sample's index; ``sopgym``: the episode: env id, split, task index, seed, task id,
    and ``env_kwargs`` as a JSON object string) and ``reward_model`` (the task id as ``ground_truth``;
    the loop scores itself). With ``servers`` (``{env_id: URL}``) the rows are rendered by the
    servers, and equal those of the same envs made here (no server or token is written into them).
    Keyword arguments go to :func:`~sopgym.integrations._common.task_rows`.
    """
    out = []
    for index, row in enumerate(task_rows(env_id, split, num_tasks, env_kwargs=env_kwargs, servers=servers, **kwargs)):
        episode = {k: row[k] for k in (*ROW_KEYS, "task_id")}
        episode["env_kwargs"] = json.dumps(dict(env_kwargs or {}), sort_keys=True)
        out.append({
            "prompt": row["prompt"],
            "data_source": row["env_id"],
            "agent_name": AGENT_NAME,
            "extra_info": {"index": index, "sopgym": episode},
            "reward_model": {"style": "rule", "ground_truth": row["task_id"]},
        })
    return out


def _episode_of(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    extra = kwargs.get("extra_info") or {}
    episode = extra.get("sopgym") if isinstance(extra, Mapping) else None
    if not isinstance(episode, Mapping):
        raise ValueError(f"a sopgym row needs extra_info.sopgym (verl_rows writes it); got extra_info keys {sorted(extra) if isinstance(extra, Mapping) else extra!r}")
    return dict(episode)


@register(AGENT_NAME)
class SopgymAgentLoop(AgentLoopBase):
    """One sopgym episode per ``run``, generated through verl's ``server_manager`` (see the module doc).

    Constructed by verl's agent-loop worker (``hydra.utils.instantiate`` of the registry entry) with
    the trainer config, server manager, tokenizer, processor and dataset config; ``tools`` (verl's own
    tool list) is ignored: the tools are the env's. ``servers`` (a key of the loop's config entry):
    ``{env_id: URL}`` of envs served elsewhere, whose episodes are sessions of those servers.

    Asynchronous like verl's own ``ToolAgentLoop``: every generation is awaited on the worker's event
    loop, so all of a worker's episodes have their requests in flight at once; only the env's calls
    (``gymnasium.make``, ``reset``, ``step``, ``end_episode``, ``close``: tool backends may block) run
    in the loop's default executor, one short call at a time.
    """

    def __init__(self, *args: Any, tools: Any = None, servers: Mapping[str, Any] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.servers = servers_of(servers)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        episode = _episode_of(kwargs)
        loop = asyncio.get_running_loop()

        def off_loop(fn, *args):
            return loop.run_in_executor(None, fn, *args)

        env = await off_loop(make_env, episode["env_id"], env_kwargs_of(episode.get("env_kwargs")), self.servers)
        try:
            return await self._run_episode(env, episode, sampling_params, off_loop)
        finally:
            await off_loop(env.close)

    async def _run_episode(self, env, episode: Mapping[str, Any], sampling_params: dict[str, Any], off_loop) -> AgentLoopOutput:
        started = time.perf_counter()
        generating = 0.0
        _, info = await off_loop(reset_from_row, env, {k: episode.get(k) for k in (*ROW_KEYS, "task_id")})
        ep = Episode(task_id=str(info["task_id"]), group_id=0, seed=int(episode["seed"]), env_id=episode["env_id"],
                     messages=[dict(m) for m in info["messages"]], tools=info.get("tools"))
        builder = EpisodeBuilder(self.tokenizer, ep)
        prompt_len = len(ep.ids)
        if prompt_len > self.prompt_length:  # refused before any request (left-truncating would cut the SOP)
            raise ValueError(f"{episode['env_id']} task {info['task_id']}: the prompt has {prompt_len} tokens, more than "
                             f"rollout.prompt_length={self.prompt_length}; expected it to fit (truncating would cut the SOP)")
        request_id = uuid4().hex  # one sticky session per episode, as verl's tool agent does
        total_reward, env_rounds, num_messages, has_logprobs = 0.0, 0, len(info["messages"]), True
        while True:
            room = self.response_length - (len(ep.ids) - prompt_len)
            end = None
            if room <= 0:
                end = ("context_budget", f"no room left in rollout.response_length={self.response_length} tokens")
            else:
                t0 = time.perf_counter()
                try:
                    output = await self.server_manager.generate(request_id=request_id, prompt_ids=list(ep.ids),
                                                                sampling_params=sampling_params)
                except Exception as exc:  # noqa: BLE001 - any server failure ends this episode as the infrastructure's
                    end = ("inference", f"server_manager.generate failed: {type(exc).__name__}: {exc}")
                finally:
                    generating += time.perf_counter() - t0
                if end is None and getattr(output, "stop_reason", None) == "aborted":
                    end = ("inference", "the generation request was aborted")
            if end is not None:
                _, reward, _, _, info = await off_loop(env.unwrapped.end_episode, *end)
                total_reward += float(reward)
                break
            ids = [int(t) for t in output.token_ids][:room]  # a turn past the budget is cut, as verl's tool agent does
            has_logprobs = has_logprobs and output.log_probs is not None
            logps = [float(x) for x in output.log_probs][:room] if output.log_probs is not None else [0.0] * len(ids)
            reply = builder.add_assistant(ids, logps)
            _, reward, terminated, truncated, info = await off_loop(env.step, reply)
            total_reward += float(reward)
            if terminated or truncated:
                break
            messages = info["messages"]  # [..., the env's rendering of the reply, what the env added]
            builder.add_env_messages([dict(m) for m in messages[num_messages + 1:]])
            num_messages = len(messages)
            env_rounds += 1
        builder.close()  # the env's answer to the last reply is not appended: nothing follows it to train on
        record = dict(info["episode"])
        infra = bool(record["infrastructure_failure"])
        p = prompt_len
        response_ids = ep.ids[p:][: self.response_length]  # only env tokens (mask 0) can lie past the budget
        mask = [0] * len(response_ids) if infra else ep.loss_mask[p:][: self.response_length]
        metrics = episode_metrics(record)
        return AgentLoopOutput(
            prompt_ids=ep.ids[:p],
            response_ids=response_ids,
            response_mask=mask,
            response_logprobs=ep.old_logp[p:][: self.response_length] if has_logprobs else None,
            reward_score=total_reward,
            # As verl's ToolAgentLoop counts them: the prompt, each assistant turn, each env answer in the response.
            num_turns=1 + ep.num_turns + env_rounds,
            metrics=AgentLoopMetrics(generate_sequences=generating, tool_calls=max(0.0, time.perf_counter() - started - generating)),
            extra_fields={
                "infrastructure_failure": infra,
                "sopgym_success": success_of(record),  # None: the env's server withheld the ground truth
                "sopgym_metrics": metrics,
                "sopgym_record": record,
            },
        )
