#!/usr/bin/env bash
# The test command (README, .ci/run): every test suite of the project, after scripts/setup.sh.
#
#   0. the type check: mypy on the package (`.venv/bin/python -m mypy`, configured in mypy.ini); a
#      finding fails this script, after the suites have run;
#   1. the main suite, in .venv (`.venv/bin/python -m pytest`; arguments of this script go to it);
#   2. the suites whose dependencies conflict with the main environment's, each in its own tox
#      environment (docs/integrations.md): `openenv` (the OpenEnv server and the remote env), `trl`,
#      `skyrl` (Python 3.12) and `verl` (the RL-library adapters, each against the library itself).
#
# The tox environments are installed in the background while the main suite runs (installing them
# is most of their cost; their log is printed if it fails), then their tests run one after the other.
# tox.ini makes a library that failed to install an error there, never a skip.
# SOPGYM_TEST_TOX=0 runs the main suite only.
set -euo pipefail
cd "$(dirname "$0")/.."

TOX_ENVS=openenv,trl,skyrl,verl
# SkyRL's env runs on Python 3.12: SOPGYM_PYTHON312 (scripts/python312.sh).
source scripts/python312.sh
run_tox=${SOPGYM_TEST_TOX:-1}
install_log=.tox-install.log
install_pid=
if [ "$run_tox" = 1 ]; then
  echo "test: installing the tox environments ($TOX_ENVS) in the background (log: $install_log)"
  .venv/bin/python -m tox run --notest -e "$TOX_ENVS" >"$install_log" 2>&1 &
  install_pid=$!
fi

status=0
echo "test: mypy (mypy.ini)"
.venv/bin/python -m mypy || status=$?
.venv/bin/python -m pytest "$@" || status=$?

if [ "$run_tox" = 1 ]; then
  if ! wait "$install_pid"; then
    echo "test: installing the tox environments failed; the end of $install_log:" >&2
    tail -n 60 "$install_log" >&2
    exit 1
  fi
  .venv/bin/python -m tox run -e "$TOX_ENVS" || status=$?
fi
exit "$status"
