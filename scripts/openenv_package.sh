#!/usr/bin/env bash
# Prepare deploy/openenv, sopgym's OpenEnv env package: a wheel of this checkout into deploy/openenv/dist/
# (what its Dockerfile installs), then `openenv validate` on the package (docs/integrations.md).
#
#   bash scripts/openenv_package.sh                 # PYTHON: a python with the `server` extra (openenv)
#   docker build -t sopgym-openenv deploy/openenv   # or: openenv build deploy/openenv
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
rm -rf deploy/openenv/dist build  # build/: setuptools' staging folder, which would keep modules deleted since
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir deploy/openenv/dist .
ls deploy/openenv/dist
"$PYTHON" -m openenv.cli validate deploy/openenv "$@"
