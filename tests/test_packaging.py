"""The package installs non-editable, imports from site-packages, and registers every env."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("installed")
    wheels, site, source = tmp / "wheels", tmp / "site", tmp / "source"
    # Build from a clean copy: an in-tree build reuses a stale build/lib and can ship deleted modules.
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".tox", "build", "dist", "*.egg-info", "__pycache__", "runs", ".hypothesis"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("sopgym-*.whl")
    inst = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert inst.returncode == 0, inst.stderr
    return site


def _run(site, code):
    env = {k: v for k, v in os.environ.items() if k != "SOPBENCH_DIR"}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(site.parent), env=env)


def test_installed_package_imports_from_site_packages_not_the_checkout(installed):
    out = _run(installed, "import sopgym, sopgym.envs, sopgym.sandboxes, sopgym.sop_tasks; print(sopgym.__file__)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(installed))


def test_no_bare_top_level_modules_are_installed(installed):
    top = sorted(p.name for p in installed.iterdir() if not p.name.endswith((".dist-info", ".egg-info")) and p.name != "bin")
    assert top == ["sopgym"]


def test_installed_package_registers_and_runs_every_authored_env(installed):
    from sopgym.envs.registration import registered_env_ids

    AUTHORED_ENV_IDS = registered_env_ids("sopgym")

    code = (
        "import gymnasium as gym, sopgym\n"
        "from sopgym.envs.registration import registered_env_ids\n"
        "from sopgym.envs.policies import make_policy\n"
        "ids = registered_env_ids('sopgym')\n"
        "for i in ids:\n"
        "    e = gym.make(i, code_runner='inprocess') if sopgym.sop_tasks.get_pack(i.rsplit('-v', 1)[0]).verifiable else gym.make(i)\n"
        "    p = make_policy('oracle'); o, info = e.reset(options={'split': 'test', 'task_index': 0}); p.reset(info); done = False\n"
        "    while not done:\n"
        "        o, r, t, tr, info = e.step(p.act(o, info)); done = t or tr\n"
        "    assert r == 1.0, (i, info['status'])\n"
        "print(' '.join(ids))\n"
    )
    out = _run(installed, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == AUTHORED_ENV_IDS


def test_the_installed_package_writes_the_viewer_with_its_script_and_style(installed):
    code = ("from sopgym.evaluation.viewer import viewer_data, viewer_html\n"
            "page = viewer_html(viewer_data([]))\n"
            "print(page.count('<script>'), page.count('<style>'), len(page))\n")
    out = _run(installed, code)
    assert out.returncode == 0, out.stderr
    scripts, styles, size = map(int, out.stdout.split())
    assert (scripts, styles) == (1, 1) and size > 10_000  # viewer.js and viewer.css are package data


def test_the_wheel_holds_each_module_once_at_its_real_path(installed):
    """Every ``.py`` under ``sopgym/`` in the checkout is in the installed tree exactly once, at the
    same relative path, and the installed tree has no module the checkout lacks."""
    def modules(root):
        return sorted(str(p.relative_to(root)) for p in (root / "sopgym").rglob("*.py") if "__pycache__" not in p.parts)

    installed_modules, source_modules = modules(installed), modules(REPO)
    assert len(installed_modules) == len(set(installed_modules))
    assert installed_modules == source_modules


def test_the_all_extra_that_ci_installs_holds_every_optional_dependency_the_tests_run():
    import configparser

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "setup.cfg")
    extras = cfg["options.extras_require"]
    for name in ("train", "mlflow", "docker", "ray", "sopbench", "test"):
        assert f"%({name})s" in extras["all"], f"the 'all' extra (scripts/setup.sh, CI) misses {name!r}"
