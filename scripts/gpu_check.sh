#!/usr/bin/env bash
# The GPU check (docs/bench.md): learner step tokens/s and MFU in bf16, HF generation tokens/s, peak GPU memory,
# and a short `eppo-train --config tiny` on CUDA, on a bare machine with torch + transformers (Python 3.12 is fine).
#
#   scripts/gpu_check.sh [--cpu] [--skip-train] [--json FILE]
#
# Nothing is installed or downloaded: the repo goes on PYTHONPATH, the model is a random Qwen2 (Qwen2-0.5B's
# shapes). The eppo-train part needs gymnasium and the tiny model: prepare them here with `make gpu-bundle`
# (build/gpu_bundle, ~20 MiB) and carry that folder; EPPO_GPU_BUNDLE points elsewhere.
# --cpu is a dry run with tiny sizes (the test suite runs it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${EPPO_GPU_BUNDLE:-$ROOT/build/gpu_bundle}"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
LIMIT="${GPU_CHECK_TIMEOUT:-470}"  # seconds: the check must finish within 8 minutes

export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [[ -d "$BUNDLE/site" ]]; then
  export PYTHONPATH="$PYTHONPATH:$BUNDLE/site"  # after the repo and anything installed: only fills gaps
fi
CACHE=""
if [[ -d "$BUNDLE/cache" ]]; then
  # A private, writable copy: the run's SFT model is cached next to the tiny model.
  CACHE="$(mktemp -d "${TMPDIR:-/tmp}/eppo-gpu-cache.XXXXXX")"
  cp -r "$BUNDLE/cache/." "$CACHE/"
  export EPPO_CACHE_DIR="$CACHE"
fi
# an `if`, not `[[ ... ]] && rm`: without a bundle the test is false, and as the EXIT trap's last status it
# became the script's exit code (1 after "passed")
cleanup() { if [[ -n "$CACHE" ]]; then rm -rf "$CACHE"; fi; }
trap cleanup EXIT

"$PY" -c 'import torch, transformers' 2>/dev/null || { echo "gpu_check: torch and transformers must be importable by $PY"; exit 2; }
cd "$ROOT"
status=0
timeout "$LIMIT" "$PY" -m eppo_train.benchmarks.gpu_check "$@" || status=$?
if [[ $status -eq 124 ]]; then echo "gpu_check: stopped after ${LIMIT}s"; fi
exit $status
