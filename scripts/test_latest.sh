#!/usr/bin/env bash
# The RL-library adapters' suites against each library's newest release (tox envs trl-latest,
# skyrl-latest, verl-latest; the pinned versions are tested by scripts/test.sh). Reports which pass
# and the versions installed, and always exits 0: a new release that breaks an adapter is reported,
# never a failure of the main CI. Needs .venv (scripts/setup.sh) and, for SkyRL, Python 3.12.
set -uo pipefail
cd "$(dirname "$0")/.."

source scripts/python312.sh

# The served-env tests start `sopgym serve` with the openenv env's interpreter (SOPGYM_SERVE_PYTHON).
.venv/bin/python -m tox run --notest -e openenv >.tox-openenv-install.log 2>&1 || echo "test_latest: installing the openenv env failed (log: .tox-openenv-install.log)"
declare -A library=([trl-latest]=trl [skyrl-latest]=skyrl [verl-latest]=verl)
report=()
for env in trl-latest skyrl-latest verl-latest; do
  log=".tox-$env.log"
  if .venv/bin/python -m tox run -r -e "$env" >"$log" 2>&1; then verdict=PASS; else verdict="FAIL (log: $log)"; fi
  version=$(".tox/$env/bin/python" -c "import importlib.metadata as m; print(m.version('${library[$env]}'))" 2>/dev/null || echo "not installed")
  report+=("$env: ${library[$env]} $version: $verdict")
done
echo "== the adapters against the libraries' newest releases"
printf '%s\n' "${report[@]}"
exit 0
