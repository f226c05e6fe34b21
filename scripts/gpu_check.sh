#!/bin/bash
# Issue 21 check on a real GPU (~10-12 min on an H100, in three parts: below): every GPU test, then the GPT step
# (bench/cuda_step.py: PyTorch eager, Ember eager, Ember compiled, in the default mode with
# the kernel profile and in mode="reduce-overhead" — CUDA graphs), multi-tensor launches,
# the GPT's attention forward and backward alone (the full-tile default vs the old
# all-masked kernels, the 128-row forward, torch's sdpa: bench/cuda_attention*.py --quick,
# ~1 min together, unmeasured), and bench/cuda.py --quick (matmul TFLOP/s, GELU GB/s vs
# cudaMemcpy, W1, the GPT rows beside torch.compile; then bench/train.py's W1-W3 eager and
# compiled beside torch).
# Run: OUT=<dir> scripts/gpu_check.sh [PART...]   (logs under $OUT) on a machine with an NVIDIA
# GPU, CuPy, PyTorch, pytest-xdist and pytest-timeout; CI never runs it. Three parts, each
# under the device tool's 10 minutes a command (timeouts add up to 420 / 435 / 330 s), in
# order of importance: 1 the GPU tests and the GPT step (profile with each kernel's GB/s,
# CUDA graphs); 2 bench/cuda.py's GPT rows beside torch.compile, the attention kernels'
# variants, matmul/GELU/W1; 3 multi-tensor launches, W1-W3, ember train --device cuda --amp
# bf16/fp16. No PART: all three.
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
PARTS=" ${*:-1 2 3} "
want() { [[ $PARTS == *" $1 "* ]]; }
date; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if want 1; then
timeout 200 python3 -m pytest -q -rfE -p no:cacheprovider --timeout 150 -n 14 \
    tests/cuda/test_gpu*.py > $OUT/tests.log 2>&1
echo "pytest rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/tests.log | cut -c1-300 | head -30
timeout 120 python3 bench/cuda_step.py --profile 2>&1 | tee $OUT/gpt.log | \
    grep -E "torch eager|ember eager|ember compiled|host-side|kernel time total"
grep -E "^ +(ember|cupy|Memcpy|nvjet|void|sm)" $OUT/gpt.log | \
    awk '{printf "%-52s %s %s\n", substr($1,1,52), $(NF-4), $NF}' | head -25
sed -n '/^generated kernels by device time/,/^all .* generated kernels/p' $OUT/gpt.log | head -34
timeout 100 python3 bench/cuda_step.py --mode reduce-overhead --no-torch 2>&1 | \
    tee $OUT/gpt_graphs.log | grep -E "ember compiled|host-side|cuda graph" | sed 's/^/graphs: /'
fi
if want 2; then
timeout 200 python3 bench/cuda.py --quick --only gpt 2>&1 | tee $OUT/cuda_gpt.log | tail -12
timeout 60 python3 bench/cuda_attention.py --quick 2>&1 | tee $OUT/attn.log | tail -4
timeout 75 python3 bench/cuda_attention_bwd.py --quick --subs 16 2>&1 | tee $OUT/attn_bwd.log | \
    tail -6
timeout 100 python3 bench/cuda.py --quick --only matmul gelu w1 2>&1 | tee $OUT/cuda.log | \
    tail -14
fi
if want 3; then
timeout 90 python3 bench/cuda_multi.py 2>&1 | tail -14
timeout 150 python3 bench/cuda.py --quick --only workloads 2>&1 | tee $OUT/workloads.log | tail -12
for amp in bf16 fp16; do     # the main job on the GPU in mixed precision (a small model)
    timeout 60 python3 -m ember.cli train --device cuda --amp $amp --model mlp --dataset spirals \
        --epochs 2 --no-progress --overwrite --checkpoint $OUT/ck_$amp.safetensors 2>&1 | \
        tail -3 | sed "s/^/train --amp $amp: /"
done
fi
date
