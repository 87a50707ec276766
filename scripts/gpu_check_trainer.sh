#!/usr/bin/env bash
# The trainer's CUDA checks (issue 11), in one short run on a machine with one CUDA GPU, from the
# repository root. What it checks:
#   1. tests marked `gpu` in tests/trainers: the KV-cached sampler against a no-cache forward for every
#      backend (flash_varlen when flash_attn is installed, torch_varlen, sdpa_varlen, sdpa, eager) x
#      {one prompt, equal-length bucket, left-padded batch} x {static, dynamic cache}; packed =
#      unpacked log-probs with the flash kernels; `auto` picks a flash kernel for bf16 and sdpa_varlen
#      for fp32;
#   2. the sampler's generation tokens/s at batch 32 on the GPU (benchmarks/train_throughput.py);
#   3. on a machine with 2+ GPUs, the data-parallel learner over NCCL (tests/trainers/test_distributed.py,
#      marked `gpu`): 2 torchrun ranks train the parameters of one process; with one GPU it is skipped
#      with that reason (NCCL needs a GPU per rank);
#   4. mixed precision on CUDA (tests/trainers/test_mixed_precision.py, marked `gpu`): the bf16 config
#      with `attention: auto` picks a flash kernel over fp32 master weights, computes in bf16, and one
#      AdamW step at lr 1e-6 and 1e-5 moves every parameter tensor (norm gains included) by AdamW's
#      update within fp32 rounding; the sampler (autocast on the trained model) stays closer to the
#      trainer's bf16 forward than to an fp32 one;
#   5. a short learning run on the GPU: the RL sanity test's contextual bandit (tests/trainers/test_rl_sanity.py,
#      marked `gpu`), a from-scratch tiny model warm-started blind, then 15 GRPO steps, held-out greedy
#      success from at most 0.6 to at least 0.9; its figures (before, after, rollout success per step,
#      seconds) in $OUT/learning.json;
#   6. asynchronous rollouts on the GPU (benchmarks/async_rollouts.py, issue 26): seconds per RL step, sync
#      against async K=1 and K=2, with the learner and an in-process engine copy on the GPU (the device
#      machines have no Ray), in $OUT/async_rollouts.txt.
#
# The device machines of this workplace have torch, transformers and pytest but no network and no
# gymnasium: carry its wheels. Prepare once where PyPI is reachable:
#   pip download --no-deps -d .gpu_wheels gymnasium==1.4.0 farama-notifications
# and name `.gpu_wheels` in the run's carry list. Output goes to $OUT (or ./gpu_check_out).
# Each part has its own timeout (240 + 90 + 120 + 90 s): at most 9 minutes in all, inside one 10-minute
# device call; a part that runs out leaves its log with what it reached, and the next part still runs.
set -uo pipefail
OUT="${OUT:-gpu_check_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
if [ -d .gpu_wheels ]; then
  "$PY" -m pip install --no-index --no-deps --quiet .gpu_wheels/*.whl 2>&1 | tail -2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
  "$PY" -c "import torch.nn.attention.varlen as v; print('varlen_attn', hasattr(v, 'varlen_attn'))" 2>&1 | tail -1
  "$PY" -c "import flash_attn; print('flash_attn', flash_attn.__version__)" 2>&1 | tail -1
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
timeout 240 "$PY" -m pytest -q -p no:cacheprovider -m gpu -rA tests/trainers/test_sampler.py tests/trainers/test_packing.py \
  tests/trainers/test_distributed.py tests/trainers/test_mixed_precision.py \
  > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests exit code $?" | tee -a "$OUT/gpu_tests.txt"
tail -40 "$OUT/gpu_tests.txt"
timeout 90 "$PY" benchmarks/train_throughput.py --only rollout --device cuda --per-domain 1 --repeats 3 \
  --rollout-prompts 32 --rollout-tokens 64 > "$OUT/rollout_benchmark.txt" 2>&1
echo "benchmark exit code $?" | tee -a "$OUT/rollout_benchmark.txt"
tail -8 "$OUT/rollout_benchmark.txt"
SOPGYM_GPU_FIGURES="$OUT/learning.json" timeout 120 "$PY" -m pytest -q -p no:cacheprovider -m gpu -rA \
  tests/trainers/test_rl_sanity.py > "$OUT/learning.txt" 2>&1
echo "learning run exit code $?" | tee -a "$OUT/learning.txt"
cat "$OUT/learning.json" 2>/dev/null
timeout 90 "$PY" benchmarks/async_rollouts.py --engine inprocess --device cuda --steps 5 --repeats 1 \
  > "$OUT/async_rollouts.txt" 2>&1
echo "async rollouts exit code $?" | tee -a "$OUT/async_rollouts.txt"
grep -v "alarm" "$OUT/async_rollouts.txt" | tail -8
