"""Architecture boundaries (docs/architecture.md), checked on the source and in fresh interpreters."""

import ast
import os
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


_ABOVE_TASKS = ("sopgym.envs", "sopgym.episodes", "sopgym.authoring", "sopgym.sopbench", "sopgym.evaluation", "sopgym.trainers")


_ADAPTERS = ("sopgym.integrations",)


@pytest.mark.parametrize("folder,forbidden", [
    ("sopgym/sandboxes", ("gymnasium", "sopgym.envs", "sopgym.trainers", "sopgym.sop_tasks", "torch", "sopgym.agents") + _ADAPTERS),
    ("sopgym/envs", ("torch", "transformers", "sopgym.trainers", "sopgym.sopbench", "sopgym.authoring", "sopgym.agents",
                     "sopgym.episodes") + _ADAPTERS),
    # The episode layer sits below its users (the evaluator's suites, the trainer, the agents, the
    # integrations, the commands) and above the envs, which it uses through gymnasium only.
    ("sopgym/episodes", ("torch", "transformers", "sopgym.trainers", "sopgym.agents", "sopgym.authoring", "sopgym.cli",
                         "sopgym.sandboxes") + _ADAPTERS),
    ("sopgym/trainers", ("sopgym.agents",)),
    # The model agents sit beside the trainer, not above it: the batched sampler they share with it is
    # sopgym/policy/, below both (sopgym/agents/hf_local.py once imported it from the trainer).
    ("sopgym/agents", ("sopgym.trainers",)),
    ("sopgym/policy", ("sopgym.trainers", "sopgym.agents", "sopgym.episodes", "sopgym.evaluation", "sopgym.envs") + _ADAPTERS),
    ("sopgym/sop_tasks", ("sopgym.agents",)),
    # Task sources sit below the envs: a pack that imported an env (or the tools that run envs) would
    # bring back the import cycle that lazy imports used to paper over.
    ("sop_tasks", _ABOVE_TASKS + ("gymnasium",) + _ADAPTERS),
    ("sopgym/evaluation", ("sopgym.envs.reward",)),
    # The evaluator scores finished episodes: running them (the episode layer) and running a benchmark
    # (sopgym/bench/: suites, preflight, rescore) sit above it and import it, never the other way.
    ("sopgym/evaluation", ("sopgym.episodes", "sopgym.bench")),
    ("sopgym/trainers", ("sopgym.sandboxes",) + _ADAPTERS),
])
def test_module_never_imports(folder, forbidden):
    bad = sorted((f, m) for f, m in _imports(folder) if any(m == x or m.startswith(x + ".") for x in forbidden))
    assert bad == []


def test_the_trajectory_format_sits_below_its_writers_and_readers():
    """``sopgym/trajectory.py`` is imported by the envs' wrapper (which may not import the episode layer)
    and by the evaluator's readers (which load without the envs), so it imports none of them."""
    tree = ast.parse((REPO / "sopgym" / "trajectory.py").read_text(encoding="utf-8"))
    found = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    found |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert sorted(m for m in found if m.startswith("sopgym")) == ["sopgym.sandboxes.schema"]


def test_the_episode_record_sits_below_its_producers_and_the_evaluator():
    """``sopgym/record.py`` is imported by the envs, the remote env and the evaluator, so of sopgym it
    imports the status classes alone."""
    tree = ast.parse((REPO / "sopgym" / "record.py").read_text(encoding="utf-8"))
    found = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    found |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert sorted(m for m in found if m.startswith("sopgym")) == ["sopgym.status"]


def test_the_episode_layer_takes_only_the_evaluators_score_from_the_evaluation_package():
    """A result's success is ``sopgym.evaluation.metrics.score_record`` (which imports nothing of the
    envs or the episode layer); the suites and the preflight that run episodes through ``sopgym.episodes``
    are ``sopgym.bench``, above both, and the evaluator imports nothing of the episode layer."""
    found = sorted({m for _, m in _imports("sopgym/episodes") if m == "sopgym.evaluation" or m.startswith("sopgym.evaluation.")})
    assert found == ["sopgym.evaluation.metrics"]


def _runtime_nodes(tree):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for annotations never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _package_import_graph(folder):
    """``{module: modules of the same package it imports}`` (lazy imports included, imports under
    ``if TYPE_CHECKING:`` left out), by dotted name."""
    root = REPO / folder
    package = folder.replace("/", ".")
    names = {".".join((package, *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}
    graph = {}
    for name, path in names.items():
        here = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found = set()
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*here.split(".")[: len(here.split(".")) - node.level + 1], *([base] if base else [])])
                found |= {base} | {f"{base}.{a.name}" for a in node.names}
        graph[name] = sorted(m for m in found if m in names and m != name)
    return graph


def _cycles(graph):
    """The import cycles of ``graph`` (``{node: nodes it imports}``), each as a path back to its start."""
    cycles, state = [], {}

    def visit(module, path):
        state[module] = "open"
        for dep in graph.get(module, ()):
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_the_episode_layer_has_no_import_cycle():
    """Its modules import one way (the pools never import the loop that drives them: ``runner`` <->
    ``ray_pool`` was a file cycle), the package ``__init__`` (which re-exports them) included."""
    graph = _package_import_graph("sopgym/episodes")
    assert graph["sopgym.episodes.ray_pool"] and graph["sopgym.episodes.runner"]  # the graph sees imports
    assert _cycles(graph) == []


def _sopgym_package_graph():
    """``{package: packages it imports}`` over sopgym's subpackages and top-level modules (a module
    stands for its package: ``sopgym.trainers.loop`` is ``sopgym.trainers``), lazy imports included."""
    graph = {}
    for module, deps in _package_import_graph("sopgym").items():
        here = ".".join(module.split(".")[:2])
        for dep in deps:
            there = ".".join(dep.split(".")[:2])
            if there != here:
                graph.setdefault(here, set()).add(there)
    return {k: sorted(v) for k, v in graph.items()}


def test_sopgym_has_no_package_cycle():
    """Imports between sopgym's packages run one way (evaluation -> agents -> trainers -> evaluation was a
    cycle while the local model agent imported the trainer's sampler: it is sopgym/policy/ now)."""
    graph = _sopgym_package_graph()
    assert "sopgym.trainers" in graph["sopgym.cli"] and "sopgym.envs" in graph["sopgym.trainers"]  # the graph sees imports
    assert _cycles(graph) == []


@pytest.mark.parametrize("a,b", [("sopgym.episodes.runner", "sopgym.episodes.ray_pool"),
                                 ("sopgym.trainers.config", "sopgym.trainers.modeling")])
def test_file_cycles_once_broken_stay_broken(a, b):
    """Neither module reaches the other and back through imports that run (lazy ones included)."""
    graph = _package_import_graph("sopgym")

    def reaches(start, goal):
        seen, todo = set(), [start]
        while todo:
            for dep in graph[todo.pop()]:
                if dep == goal:
                    return True
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return False

    assert graph[a] and graph[b]  # the graph sees their imports
    assert not (reaches(a, b) and reaches(b, a)), f"{a} and {b} import each other"


# The RL-library adapters use envs through gymnasium and the env's public methods only, never the
# sandboxes or the env's parts. (The remote env, itself an env, renders like one.)
_LIBRARY_ADAPTERS = ("trl.py", "skyrl.py", "verl.py", "_common.py", "_tokens.py")
_ENV_INTERNALS = ("sopgym.sandboxes", "sopgym.envs.env", "sopgym.envs.parsing", "sopgym.envs.rendering", "sopgym.envs.reward")


def test_library_adapters_use_only_the_public_env_api():
    found = _imports("sopgym/integrations")
    assert {f for f, _ in found} >= set(_LIBRARY_ADAPTERS)
    bad = sorted((f, m) for f, m in found if f in _LIBRARY_ADAPTERS and any(m == x or m.startswith(x + ".") for x in _ENV_INTERNALS))
    assert bad == []


def test_import_and_make_need_only_gymnasium_and_numpy():
    code = (
        "import sys, gymnasium as gym, sopgym\n"
        "from sopgym.envs.registration import registered_env_ids\n"
        "for i in registered_env_ids('sopgym'):\n"
        "    e = gym.make(i); e.reset(seed=0); e.step('hello'); e.close()\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'mlflow', 'docker', 'pandas', 'ray', 'trl', 'verl', 'skyrl_gym', 'sopgym.integrations') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("folder", ["sopgym", "tests", "benchmarks", "scripts"])
def test_code_imports_the_sopgym_root_never_a_bare_top_level_folder(folder):
    bare = ("envs", "sandboxes", "sop_tasks", "trainers")
    bad = sorted((f, m) for f, m in _imports(folder) if any(m == b or m.startswith(b + ".") for b in bare))
    assert bad == [], "import sopgym.<folder>, not the folder itself (it would load a second copy of each module)"


def test_sopgym_envs_imports_from_a_plain_checkout_without_installing():
    """With only the repository root on the path (no editable-install hook: ``-S`` skips .pth files),
    plain Python finds ``sopgym.envs`` etc. at their one real path in the checkout."""
    import sysconfig

    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(REPO)!r}]\n"
        f"sys.path.append({sysconfig.get_paths()['purelib']!r})\n"
        "import sopgym.envs, sopgym.sandboxes, sopgym.sop_tasks, sopgym.trainers, sopgym.sopbench, sopgym.authoring\n"
        "print(sopgym.envs.__file__)\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=str(REPO), env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(REPO / "sopgym" / "envs" / "__init__.py")


@pytest.mark.parametrize("folder", ["envs", "sandboxes", "sop_tasks", "trainers"])
def test_the_design_card_names_at_the_root_are_links_into_the_package(folder):
    link = REPO / folder
    assert link.is_symlink(), f"{folder}/ at the root: expected a link to sopgym/{folder}, found a real folder"
    assert link.resolve() == (REPO / "sopgym" / folder).resolve()
    assert not (REPO / "sopgym" / folder).is_symlink(), f"sopgym/{folder} must be the real folder"


def _every_sopgym_module():
    root = REPO / "sopgym"
    for path in sorted(root.rglob("*.py")):
        if path.name == "__main__.py" or "docker_context" in path.parts:
            continue
        parts = path.relative_to(REPO).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def test_every_sopgym_module_reports_its_real_path():
    """``m.__file__`` is the file at its one real location (no link on the way), for every module the
    package has, so tracebacks, coverage and the docs name the same path. Imported in a fresh
    interpreter; a module whose optional dependency is missing is checked through its spec instead."""
    code = (
        "import importlib, importlib.util, json, sys\n"
        "out = {}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        out[name] = importlib.import_module(name).__file__\n"
        "    except ImportError:\n"
        "        out[name] = importlib.util.find_spec(name).origin\n"
        "print(json.dumps(out))\n"
    )
    import json

    modules = dict(_every_sopgym_module())
    assert len(modules) > 100
    out = subprocess.run([sys.executable, "-c", code, json.dumps(sorted(modules))], capture_output=True, text=True,
                         timeout=600, cwd=str(REPO))
    assert out.returncode == 0, out.stderr[-3000:]
    reported = json.loads(out.stdout.strip().splitlines()[-1])
    wrong = {name: f for name, f in reported.items() if f != str(modules[name]) or f != str(Path(f).resolve())}
    assert wrong == {}, "modules reported at another path than their real one"


def _loaded_after(code: str, modules) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported once it ran ``code``. Without ``SOPBENCH_DIR``
    (CI sets it): registering a user's SOP-Bench checkout at ``import sopgym`` loads the adapter and
    pandas, which the user asked for; these checks are about what sopgym loads on its own."""
    code += f"\nimport sys\nprint(sorted(m for m in {tuple(modules)!r} if m in sys.modules))\n"
    env = {k: v for k, v in os.environ.items() if k != "SOPBENCH_DIR"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def test_model_agents_import_their_heavy_packages_only_when_a_model_is_made():
    code = (
        "import sopgym.agents, sopgym.agents.openai_chat, sopgym.agents.hf_local, sopgym.agents.gguf\n"
        "import sopgym.agents.local_server, sopgym.bench.eval_command, sopgym.cli.evaluate, sopgym.evaluation.report\n"
        "import sopgym.bench.preflight\n"
    )
    assert _loaded_after(code, ("openai", "torch", "transformers", "matplotlib", "httpx", "httpx2")) == []


def test_the_one_token_space_agent_loads_no_torch():
    """The RL-library adapters use the trainer's token-space agent (sopgym/trainers/token_agent.py) and its
    token bookkeeping without loading the trainer's numerics: the agent takes a generate callable."""
    code = "import sopgym.integrations._tokens, sopgym.trainers.token_agent, sopgym.policy.end_of_turn\n"
    assert _loaded_after(code, ("torch", "transformers")) == []


def test_no_test_imports_a_conftest_module_by_name():
    """Two folders' ``conftest`` modules share one name, so ``from conftest import x`` breaks as soon as
    both folders are collected in one run; shared helpers live in a named helpers module."""
    found = sorted((f, m) for f, m in _imports("tests") if m.split(".")[-1] == "conftest")
    assert found == []


@pytest.mark.parametrize("module", ["sopgym/sandboxes/sqlite_program.py", "sopgym/sandboxes/docker/server.py"])
def test_the_files_shipped_into_the_sandbox_image_import_the_standard_library_only(module):
    """The container has no sopgym package: what ships into it (the tool server and the stateful
    programs' database code it shares with the in-process backend) imports nothing but the stdlib."""
    tree = ast.parse((REPO / module).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or "").split(".")[0])
    assert sorted(m for m in imported if m not in sys.stdlib_module_names) == []


# -- The command layer (sopgym/cli/) ---------------------------------------------------------------------
def test_the_command_layer_names_the_modules_it_runs_in_import_statements():
    """Static readers (and IDEs, and ``grep``) follow ``from sopgym.x import y``; they cannot follow a
    module named in a string and loaded with importlib."""
    found = _imports("sopgym/cli")
    assert {f for f, _ in found} >= {"__init__.py", "evaluate.py", "show.py", "train.py", "serve.py"}
    bad = sorted(f for f, m in found if m == "importlib" or m.startswith("importlib."))
    assert bad == []


def test_the_command_layer_imports_no_optional_dependency_until_a_command_runs():
    code = (
        "import importlib, pkgutil\n"
        "import sopgym.cli\n"
        "for m in pkgutil.iter_modules(sopgym.cli.__path__):\n"
        "    importlib.import_module('sopgym.cli.' + m.name)\n"
        "try:\n"
        "    sopgym.cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    heavy = ("torch", "transformers", "openai", "docker", "fastapi", "openenv", "uvicorn", "matplotlib", "pandas", "ray",
             "mlflow", "yaml", "httpx")
    assert _loaded_after(code, heavy) == []
