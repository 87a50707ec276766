"""The package as it was at a git revision, for a benchmark's before/after baseline measured in the same run.

``run_at(rev, script, args)`` extracts ``sopgym/`` at ``rev`` (``git archive``) into a temporary folder
and runs ``script`` (this checkout's benchmark) in a subprocess with that folder first on
``PYTHONPATH``, so the whole old package is imported, self-consistent, whatever changed since.
The script must print its figures as one JSON line last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_at(rev: str, script: str, args: list[str]) -> dict:
    """``script args`` run against the package at ``rev``; returns its last output line as JSON.

    Raises:
        subprocess.CalledProcessError: ``rev`` is unknown, or the script failed against it.
    """
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "sopgym"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": tmp}
        out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env, cwd=tmp)
        if out.returncode != 0:
            raise subprocess.CalledProcessError(out.returncode, out.args, out.stdout, out.stderr[-3000:])
        return json.loads(out.stdout.strip().splitlines()[-1])
