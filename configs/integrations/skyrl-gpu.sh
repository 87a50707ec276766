#!/usr/bin/env bash
# SkyRL GRPO on sopgym on a GPU host: NOT run in this project's CI (no GPU, and SkyRL's trainer needs its
# vLLM or SGLang inference engines and FSDP workers, none of which runs on CPU). Needs Python >= 3.12
# (skyrl 0.3.0's generator does not import on 3.11): pip install torch==<your CUDA build>,
# pip install -e '.[skyrl-train]' and SkyRL's own GPU extras (pip install 'skyrl[vllm,fsdp]==0.3.0').
#
# The overrides are in skyrl-gpu.overrides (checked against the pinned SkyRL's config by tox -e skyrl);
# extra arguments are more overrides. sopgym.integrations.skyrl_train registers sopgym's envs in the
# process that runs SkyRL's generator and refuses lengths below the first prompt before Ray starts.
set -euo pipefail
cd "$(dirname "$0")/../.."
ENV_ID=${ENV_ID:-sopgym/WarehouseReceiving-v0}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
DATA=${DATA:-runs/skyrl-gpu}
mkdir -p "$DATA"
python - <<PY
import pandas as pd
from sopgym.integrations.skyrl import skyrl_rows
pd.DataFrame(skyrl_rows("$ENV_ID", "train", 1024, env_kwargs={"reward": "binary"})).to_parquet("$DATA/train.parquet")
pd.DataFrame(skyrl_rows("$ENV_ID", "val", 64, env_kwargs={"reward": "binary"})).to_parquet("$DATA/val.parquet")
PY
mapfile -t OVERRIDES < <(grep -v '^\s*\(#\|$\)' configs/integrations/skyrl-gpu.overrides)
python -m sopgym.integrations.skyrl_train "${OVERRIDES[@]}" \
  data.train_data="['$DATA/train.parquet']" data.val_data="['$DATA/val.parquet']" \
  trainer.policy.model.path="$MODEL" trainer.ckpt_path="$DATA/ckpt" trainer.log_path="$DATA/logs" "$@"
