# Sourced by scripts/test.sh and scripts/test_latest.sh: SkyRL's tox envs run on Python 3.12 (skyrl
# 0.3.0's generator does not import on 3.11). Exports SOPGYM_PYTHON312 (read by tox.ini) as the first
# of: its current value, a python3.12 on PATH that runs, pyenv's 3.12.x.
if [ -z "${SOPGYM_PYTHON312:-}" ]; then
  for candidate in "$(command -v python3.12 || true)" "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      export SOPGYM_PYTHON312=$candidate
      break
    fi
  done
fi
