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
``env_kwargs`` for ``gymnasium.make``) and selects this loop (``agent_name: sopgym_agent``). The loop
resets the env to that task, then runs it through sopgym's one runner: each round asks verl's
``server_manager.generate`` for the next turn's token ids (and log-probs), hands the decoded text to
``env.step`` (sopgym's parsing, statuses, feedback, invalid-action penalty and exact tool schemas,
rendered into the prompt by the chat template), and appends the env's messages through the chat
template (:class:`~sopgym.trainers.episodes.EpisodeBuilder`). It returns ``prompt_ids`` (the initial
chat with the tool schemas and the generation prompt), ``response_ids`` (every later token),
``response_mask`` (1 on sampled tokens only), ``response_logprobs`` and ``reward_score`` (sopgym's
return, so verl's reward function is not asked).

Budget: ``rollout.response_length`` counts every response token of the episode; a turn is cut where
it ends, and an episode with no room left is ended with ``end_episode("context_budget")``. A prompt
longer than ``rollout.prompt_length`` is refused (left-truncating it would cut the SOP).

Infrastructure failures (a failed or aborted generation request, ``ERROR_SANDBOX``): the episode is
ended as such (``end_episode("inference")`` for the server), its ``response_mask`` is all 0 (nothing
of it is trained on) and ``extra_fields["infrastructure_failure"]`` is True. verl's group baseline
still counts its reward (0); drop such samples before the advantage if that matters.

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

from sopgym.evaluation.runner import EndEpisode, EnvPool, EpisodeSpec

from ._common import ROW_KEYS, env_kwargs_of, episode_metrics, make_env, reset_from_row, task_rows
from ._tokens import TokenTurn, run_token_episodes

__all__ = ["AGENT_NAME", "SopgymAgentLoop", "verl_rows"]

AGENT_NAME = "sopgym_agent"


def verl_rows(env_id: str | Sequence[str], split: str = "train", num_tasks: int = 64, *,
              env_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """verl dataset rows (``RLHFDataset`` columns) for tasks of ``split``.

    Columns: ``prompt`` (sopgym's initial chat), ``data_source`` (the env id), ``agent_name``
    (``sopgym_agent``), ``extra_info.sopgym`` (the episode: env id, split, task index, seed, task id,
    and ``env_kwargs`` as a JSON object string) and ``reward_model`` (the task id as ``ground_truth``; the loop scores itself).
    Keyword arguments go to :func:`~sopgym.integrations._common.task_rows`.
    """
    out = []
    for row in task_rows(env_id, split, num_tasks, env_kwargs=env_kwargs, **kwargs):
        episode = {k: row[k] for k in (*ROW_KEYS, "task_id")}
        episode["env_kwargs"] = json.dumps(dict(env_kwargs or {}), sort_keys=True)
        out.append({
            "prompt": row["prompt"],
            "data_source": row["env_id"],
            "agent_name": AGENT_NAME,
            "extra_info": {"sopgym": episode},
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
    tool list) is ignored: the tools are the env's.
    """

    def __init__(self, *args: Any, tools: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        episode = _episode_of(kwargs)
        env = make_env(episode["env_id"], env_kwargs_of(episode.get("env_kwargs")))
        loop = asyncio.get_running_loop()
        timing = {"generate_sequences": 0.0}
        request_id = uuid4().hex  # one sticky session per episode, as verl's tool agent does

        def generate(prompts: list[list[int]]) -> list[TokenTurn | EndEpisode]:
            assert len(prompts) == 1, "one episode per agent loop run"
            if len(prompts[0]) > self.prompt_length + self.response_length:
                return [EndEpisode("context_budget", "the episode no longer fits in prompt_length + response_length")]
            start = time.perf_counter()
            future = asyncio.run_coroutine_threadsafe(
                self.server_manager.generate(request_id=request_id, prompt_ids=prompts[0], sampling_params=sampling_params), loop)
            try:
                output = future.result()
            except Exception as exc:  # noqa: BLE001 - any server failure ends this episode as the infrastructure's
                return [EndEpisode("inference", f"server_manager.generate failed: {type(exc).__name__}: {exc}")]
            finally:
                timing["generate_sequences"] += time.perf_counter() - start
            if getattr(output, "stop_reason", None) == "aborted":
                return [EndEpisode("inference", "the generation request was aborted")]
            return [TokenTurn(list(output.token_ids), list(output.log_probs) if output.log_probs is not None else None)]

        def run_episode():
            reset_from_row(env, {k: episode.get(k) for k in (*ROW_KEYS, "task_id")})  # checks the row names a task
            spec = EpisodeSpec(episode["env_id"], int(episode["seed"]),
                               {"split": episode["split"], "task_index": int(episode["task_index"])})
            return run_token_episodes([spec], EnvPool.of(env), generate, self.tokenizer, self.response_length)[0]

        started = time.perf_counter()
        try:
            ep = await loop.run_in_executor(None, run_episode)
        finally:
            env.close()
        elapsed = time.perf_counter() - started
        p = ep.prompt_len
        if p > self.prompt_length:
            raise ValueError(f"{episode['env_id']} task {episode.get('task_id')}: the prompt has {p} tokens, more than "
                             f"rollout.prompt_length={self.prompt_length}; expected it to fit (truncating would cut the SOP)")
        record = ep.result.record
        infra = bool(record["infrastructure_failure"])
        response_ids = ep.ids[p:][: self.response_length]  # only env tokens (mask 0) can lie past the budget
        mask = [0] * len(response_ids) if infra else ep.loss_mask[p:][: self.response_length]
        return AgentLoopOutput(
            prompt_ids=ep.ids[:p],
            response_ids=response_ids,
            response_mask=mask,
            response_logprobs=ep.logps[p:][: self.response_length] if ep.has_logprobs else None,
            reward_score=float(ep.result.total_reward),
            num_turns=len(ep.result.messages) - 1,
            metrics=AgentLoopMetrics(generate_sequences=timing["generate_sequences"],
                                     tool_calls=max(0.0, elapsed - timing["generate_sequences"])),
            extra_fields={
                "infrastructure_failure": infra,
                "sopgym_success": bool(ep.result.success),
                "sopgym_metrics": episode_metrics(record),
                "sopgym_record": record,
            },
        )
