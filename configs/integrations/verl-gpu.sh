#!/usr/bin/env bash
# verl GRPO on sopgym on a GPU host: NOT run in this project's CI (no GPU, and verl's rollout needs vLLM,
# SGLang or TensorRT-LLM, none of which runs on CPU). Needs: pip install torch==<your CUDA build>,
# pip install -e '.[verl]' and verl's own vllm extra (pip install 'verl[vllm]==0.9.1').
#
# Lengths: rollout.prompt_length must hold the whole first prompt (SOP, task, tool schemas), which the
# loop refuses to truncate; WarehouseReceiving's is about 2,500 tokens with Qwen2.5's tokenizer (the
# figure the issue measured), so 4096 leaves room for the other envs' longer SOPs. response_length
# is the budget of every turn and tool result of an episode. The pre-flight below measures the first prompt
# of every env with the model's tokenizer and stops the script, naming the value to set, if 4096 is short.
# data.filter_overlong_prompts is off: verl's RLHFDataset measures a row with the tool schemas of
# tool_config_path only (one global list), not the per-env schemas sopgym's agent loop renders, so its
# filter would keep rows the loop then refuses; the pre-flight measures what the loop sends.
set -euo pipefail
cd "$(dirname "$0")/../.."
ENV_ID=${ENV_ID:-sopgym/WarehouseReceiving-v0}
DATA=${DATA:-runs/verl-gpu}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
PROMPT_LENGTH=${PROMPT_LENGTH:-4096}
mkdir -p "$DATA"
python -m sopgym.integrations.lengths --tokenizer "$MODEL" --library verl --env "$ENV_ID" --check "$PROMPT_LENGTH"
python - <<PY
import pandas as pd
from sopgym.integrations.verl import verl_rows
pd.DataFrame(verl_rows("$ENV_ID", "train", 1024)).to_parquet("$DATA/train.parquet")
pd.DataFrame(verl_rows("$ENV_ID", "val", 64)).to_parquet("$DATA/val.parquet")
PY
python -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files="$DATA/train.parquet" data.val_files="$DATA/val.parquet" \
  data.max_prompt_length=$PROMPT_LENGTH data.max_response_length=4096 data.filter_overlong_prompts=False \
  data.return_raw_chat=True data.train_batch_size=32 \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.mode=async actor_rollout_ref.rollout.n=8 \
  actor_rollout_ref.rollout.prompt_length=$PROMPT_LENGTH actor_rollout_ref.rollout.response_length=4096 \
  actor_rollout_ref.rollout.agent.agent_loop_config_path=configs/integrations/verl-agent-loop.yaml \
  actor_rollout_ref.actor.ppo_mini_batch_size=32 actor_rollout_ref.actor.optim.lr=1e-6 \
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps=200 trainer.logger='[console]' \
  trainer.project_name=sopgym trainer.experiment_name=verl-grpo "$@"
