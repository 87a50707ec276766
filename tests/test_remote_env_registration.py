"""``sopgym/Remote-v0`` and ``sopgym serve`` from the main environment, where neither OpenEnv nor websockets
is installed: they register and list without loading their dependencies, and say what to install.
(The server and the remote env themselves are tested in tests/openenv, under ``tox -e openenv``.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

REPO = Path(__file__).resolve().parents[1]
SERVER_DEPS = ("websockets", "openenv", "fastapi", "fastmcp", "uvicorn", "gradio", "httpx")


def test_import_registers_the_remote_env_without_loading_server_or_client_dependencies():
    code = (
        "import sys, gymnasium as gym, sopgym\n"
        "assert 'sopgym/Remote-v0' in gym.registry, sorted(gym.registry)\n"
        f"print(sorted(m for m in {SERVER_DEPS!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("folder", ["envs", "sandboxes", "trainers", "sop_tasks", "sopgym/evaluation"])
def test_nothing_below_the_integrations_imports_them(folder):
    found = []
    for path in (REPO / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [(path.name, n) for n in names if n.startswith("sopgym.integrations")]
    assert found == []


def _hide(monkeypatch, package: str) -> None:
    """Make ``package`` (and its submodules, even if already imported) fail to import."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")] + [package]:
        monkeypatch.setitem(sys.modules, name, None)


def test_remote_env_without_websockets_names_the_extra(monkeypatch):
    _hide(monkeypatch, "websockets")
    with pytest.raises(ImportError, match=r"pip install 'sopgym\[remote\]'"):
        gym.make("sopgym/Remote-v0", url="http://127.0.0.1:9")


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://127.0.0.1:8000", "http://"])
def test_remote_env_refuses_a_url_that_is_not_a_server(url):
    with pytest.raises(ValueError, match=r"url must be http\(s\)://HOST:PORT or ws\(s\)://HOST:PORT"):
        gym.make("sopgym/Remote-v0", url=url)


def test_serve_without_openenv_names_the_extra(monkeypatch, capsys):
    from sopgym.cli import main

    _hide(monkeypatch, "openenv")
    monkeypatch.delitem(sys.modules, "sopgym.integrations.openenv_server", raising=False)
    # An unknown env: were openenv importable after all, serve would stop at the env id, never listen.
    assert main(["serve", "--env", "sopgym/Nope-v0"]) == 1
    assert "pip install 'sopgym[server]'" in capsys.readouterr().err


def test_help_lists_serve(capsys):
    from sopgym.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "serve one env over OpenEnv's protocol" in capsys.readouterr().out


def test_a_lost_episodes_record_has_the_envs_fields(env_id):
    """The fields a remote env writes into the record of an episode lost with its server (read from the
    submit schema) are the fields the env's own records carry."""
    from sopgym.integrations.remote_env import _fields

    env = gym.make(env_id)
    _, info = env.reset(seed=0)
    record = env.unwrapped.end_episode("stopped")[4]["episode"]
    env.close()
    assert _fields(info["tools"]) == record["fields"]
