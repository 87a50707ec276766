"""Architecture boundaries (../shared/ARCHITECTURE.md), checked on the source and in fresh interpreters."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _imports(folder):
    found = set()
    for path in (REPO / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {(path.name, a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add((path.name, ("." * node.level) + node.module))
    return found


@pytest.mark.parametrize("folder,forbidden", [
    ("sandboxes", ("gymnasium", "sopgym.envs", "sopgym.trainers", "torch")),
    ("envs", ("torch", "transformers", "sopgym.trainers")),
    ("sopgym/evaluation", ("sopgym.envs.reward",)),
    ("trainers", ("sopgym.sandboxes",)),
])
def test_module_never_imports(folder, forbidden):
    bad = sorted((f, m) for f, m in _imports(folder) if any(m == x or m.startswith(x + ".") for x in forbidden))
    assert bad == []


def test_import_and_make_need_only_gymnasium_and_numpy():
    code = (
        "import sys, gymnasium as gym, sopgym\n"
        "from sopgym.envs.registration import registered_env_ids\n"
        "for i in registered_env_ids('sopgym'):\n"
        "    e = gym.make(i); e.reset(seed=0); e.step('hello'); e.close()\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'mlflow', 'docker', 'pandas', 'ray') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
