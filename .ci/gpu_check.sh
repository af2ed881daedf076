#!/usr/bin/env bash
# The GPU check: tests/test_gpu.py (-m gpu) then the quick subset, on a machine with CUDA. CI has no GPU and does
# not run this. Written for a GPU machine that has torch but no package index (logs under $OUT, default ./gpu-out):
#   .whl/  wheels of what that machine lacks (python 3.12 there), made on a machine with an index:
#          pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#            --platform manylinux_2_17_x86_64 -d .whl omegaconf==2.4.0 antlr4-python3-runtime==4.13.2 trl==1.16.0 \
#            datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 math-verify==0.9.0 latex2sympy2_extended==1.11.0 \
#            gguf==0.19.0 peft==0.21.2 transformers==5.19.0 evalplus==0.3.1 tokenizers==0.23.3
#          (not huggingface_hub 2.x: it needs httpx2; the machine's 1.3x satisfies transformers 5.19)
#   .gpu/models.tgz  tar czf .gpu/models.tgz -C ~/.cache/selfevo models/tiny-random
#   .gpu/data.tgz    tar czf .gpu/data.tgz -C ../shared data/math/train.jsonl data/gsm8k data/kodcode data/scibench data/mbpp
# A machine with a package index: `pip install -e .[test]` and `pytest -m gpu tests/test_gpu.py` is all it takes.
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
T0=$(date +%s)
if [ -d .whl ]; then
  rm -rf /tmp/site  # a warm machine keeps the last call's packages: a stale one would shadow the carried set
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
fi
if [ -f .gpu/models.tgz ]; then
  export SELFEVO_CACHE=/tmp/scache SELFEVO_DATA=/tmp/sdata/data
  mkdir -p /tmp/scache /tmp/sdata && tar xzf .gpu/models.tgz -C /tmp/scache && tar xzf .gpu/data.tgz -C /tmp/sdata
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; lscpu | grep -E "Model name"
  python3 -c "import torch,transformers,peft,trl,omegaconf,datasets,selfevo.cli; print('torch',torch.__version__,'tf',transformers.__version__,'peft',peft.__version__,'trl',trl.__version__,'cuda',torch.cuda.is_available())"; } 2>&1 | tee "$OUT/env.txt"
echo "setup $(( $(date +%s) - T0 )) s"
timeout "${GPU_T:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -n 6 --timeout 240 -rfE --durations=15 \
  2>&1 | tee "$OUT/gpu_tests.log" | tail -40
echo "gpu tests done at $(( $(date +%s) - T0 )) s"
# the quick subset with the GPU visible (recipes run via the CLI go to CUDA: model.device=auto; their CPU goldens
# are expected to differ there), without the benchmark data
if [ "${QUICK_T:-120}" -gt 0 ]; then  # QUICK_T=0 skips it
  SELFEVO_DATA= timeout "${QUICK_T:-120}" python3 -m pytest -q -p no:cacheprovider -m "not slow" -n 12 --timeout 120 -rfE tests \
    > "$OUT/quick.log" 2>&1; tail -5 "$OUT/quick.log"
  grep -E "^(FAILED|ERROR)" "$OUT/quick.log" | cut -c1-300 | head -60
fi
echo "all done at $(( $(date +%s) - T0 )) s"
