#!/usr/bin/env bash
# Run Ember's test suite from a fresh checkout: creates .venv if missing, installs
# Ember in editable mode with its test extras, then runs pytest on 2 workers.
# Extra arguments replace the default test path: bash scripts/test.sh tests/test_interop.py
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
extras=test
# PyTorch 2.13 (CPU) serves as an oracle in parity tests; EMBER_TEST_ORACLE=0 skips it.
if [ "${EMBER_TEST_ORACLE:-1}" != "0" ]; then extras=test,oracle; fi
# onnx + onnxruntime for the ONNX export tests (they skip without them).
extras=$extras,onnx
# mpi4py + mpich for the multi-process tests of ember.distributed (they skip without them).
extras=$extras,distributed
# NVRTC wheels: every generated CUDA kernel is compiled to PTX in the tests (no GPU needed).
extras=$extras,nvrtc
if ! .venv/bin/python -m pip install -q -e ".[$extras]"; then
    if .venv/bin/python -m pip install -q -e '.[test,onnx,distributed,nvrtc]' ||
            .venv/bin/python -m pip install -q -e '.[test,onnx,distributed]' ||
            .venv/bin/python -m pip install -q -e '.[test,onnx]' ||
            .venv/bin/python -m pip install -q -e '.[test]'; then
        echo "scripts/test.sh: some optional test extras ($extras) are not" \
            "installable here; the tests needing them skip" >&2
    else
        # Offline machines: carry on if everything the tests need is already installed.
        .venv/bin/python -c "import numpy, ml_dtypes, pytest, xdist, hypothesis" || exit 1
        echo "scripts/test.sh: pip install failed; using the packages already in .venv" >&2
    fi
fi
exec .venv/bin/python -m pytest -q -n 2 "${@:-tests/}"
