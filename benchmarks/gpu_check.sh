#!/usr/bin/env bash
# The LLM backend on one GPU (issue 20): HF generate rollouts and LoRA PARPO updates (bf16) of a
# randomly initialised ~0.5B model built from a config (benchmarks/gpu_check.py); prints one JSON
# line (tokens/s, update time, the engine-vs-trainer log-prob gap). No hub, no vllm.
#
#   bash benchmarks/gpu_check.sh                    # on a machine with a CUDA GPU
#   GPU_CHECK_TINY=1 bash benchmarks/gpu_check.sh   # a tiny fp32 model on CPU (tests the script)
#
# Python: $PYTHON, else .venv/bin/python, else python3. Where that Python lacks parpo's pure
# dependencies (pydantic, polars: a bare GPU image), they are installed from a carried wheelhouse
# .gpu_wheels/ into a temporary folder (benchmarks/README.md says how to make it).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
if [ "${GPU_CHECK_TINY:-0}" != 1 ] && ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "gpu_check: no CUDA GPU visible to $PY (torch.cuda.is_available() is false); GPU_CHECK_TINY=1 runs the tiny CPU version" >&2
  exit 1
fi
if ! "$PY" -c 'import pydantic, polars' 2>/dev/null; then
  if [ ! -d .gpu_wheels ]; then
    echo "gpu_check: $PY lacks pydantic or polars and no .gpu_wheels/ wheelhouse was carried (benchmarks/README.md)" >&2
    exit 1
  fi
  deps=$(mktemp -d)
  "$PY" -m pip install -q --no-index --find-links .gpu_wheels --target "$deps" pydantic polars
  export PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}"
fi
# The issue's bound: the whole check in under 5 minutes.
exec timeout 300 "$PY" benchmarks/gpu_check.py
