#!/bin/bash
# Issue 21 follow-up check on a real GPU (<= ~90 s on an H200): the GPU tests (vectorised
# elementwise kernels, eager GPU kernels and composites, the attention's saved LSE included),
# then GB/s of clone / x*2 / eager and compiled GELU vs cudaMemcpy and PyTorch, x*2 by size
# with the eager kernels on|off, and the GPT eager step (Ember vs PyTorch eager).
# Run: OUT=<dir> scripts/gpu_check.sh   (logs under $OUT) on a machine with an NVIDIA GPU, CuPy,
# PyTorch, pytest-xdist and pytest-timeout; CI never runs it.
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
date; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 46 python3 -m pytest -q -rfE -p no:cacheprovider --timeout 40 -n 8 \
    tests/cuda/test_gpu*.py > $OUT/tests.log 2>&1
echo "pytest rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | cut -c1-300 | head -30
timeout 16 python3 bench/cuda.py --quick --only bandwidth 2>&1 | tee $OUT/bandwidth.log
timeout 26 python3 - <<'PY' 2>&1 | tee $OUT/gpt.log
import importlib.util as u
sp = u.spec_from_file_location("bcuda", "bench/cuda.py")
b = u.module_from_spec(sp)
sp.loader.exec_module(b)
from ember.codegen import cuda_attention, cuda_eager, eager_composite
for r in b.gpt_rows(12, b._torch(), compiled=False):
    print(r, flush=True)
print("cuda_eager", cuda_eager.stats, "attention", cuda_attention.stats,
      "composites", eager_composite.stats, flush=True)
PY
date
