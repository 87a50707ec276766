#!/usr/bin/env bash
# Idempotent Docker setup for the sandbox tests (CI and local): install docker.io and debootstrap
# from Debian if missing, start dockerd if it is not answering, build the sandbox image.
#
#   bash scripts/docker_setup.sh            # as root
#   PYTHON=.venv/bin/python bash scripts/docker_setup.sh
#
# dockerd is started with no default bridge and no iptables rules: sandboxes run with
# network_mode=none and never need a network. Logs go to /var/log/sopgym/dockerd.log.
set -euo pipefail

PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if (( ${#need[@]} )); then
  echo "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q "${need[@]}"
fi

if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd"
  mkdir -p /var/log/sopgym
  # setsid: its own session, so the daemon outlives the shell (and job group) that started it.
  setsid nohup dockerd --bridge=none --iptables=false --ip6tables=false >/var/log/sopgym/dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    echo "dockerd did not answer within 60 s; expected 'docker info' to succeed. Last log lines:" >&2
    tail -20 /var/log/sopgym/dockerd.log >&2
    exit 1
  fi
fi
echo "dockerd: $(docker info --format '{{.ServerVersion}}')"

"$PYTHON" -m sopgym sandbox build
