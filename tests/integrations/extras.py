"""Is an extra complete on its own? Every distribution that importing an adapter loads must be declared.

``pip install sopgym[verl]`` in a fresh venv must give a venv where ``import sopgym.integrations.verl``
works. A library that imports packages it does not declare (verl 0.9.1: cachetools, fastapi, uvicorn)
only works where something else happened to install them, so the check is on declarations, not on
what this environment holds: the adapter is imported in a clean subprocess, each module it loaded is
mapped to its distribution, and each such distribution must be in the dependency closure of sopgym's
extra (its ``Requires-Dist`` lines followed through every installed distribution's own, markers and
extras evaluated), unless the import also runs with that distribution's modules blocked (an optional
import, taken only where the package happens to be installed). A test environment that installed more (pytest, the tests' tokenizer stack) cannot
hide a missing declaration this way.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from collections.abc import Iterable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def _requirements(dist: md.Distribution, extras: Iterable[str]) -> list[Requirement]:
    out = []
    for line in dist.requires or ():
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            out.append(req)
    return out


def dependency_closure(roots: Iterable[str]) -> set[str]:
    """Canonical names of the installed distributions that ``roots`` (requirement strings) pull in."""
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue  # not installed: then nothing imported can come from it
        names.add(key[0])
        todo += _requirements(dist, req.extras)
    return names


def extra_requirements(extra: str) -> list[str]:
    """sopgym's own requirements with ``extra`` (as the installed metadata declares them)."""
    return [str(r) for r in _requirements(md.distribution("sopgym"), [extra])]


_IMPORTED = """
import json, sys
{statement}
print(json.dumps({{name: getattr(module, "__file__", None) for name, module in list(sys.modules.items()) if "." not in name}}))
"""


def imported_distributions(statement: str) -> dict[str, list[str]]:
    """``top-level module -> its distribution`` for every non-stdlib module that running the import
    ``statement`` loads (in a fresh interpreter, so nothing the tests imported counts). A module is
    attributed by its file: the installed distribution whose RECORD lists it (a library's vendored
    copy of another, e.g. ray's colorama, belongs to the library)."""
    out = subprocess.run([sys.executable, "-c", _IMPORTED.format(statement=statement)], capture_output=True, text=True, check=True)
    files = json.loads(out.stdout.strip().splitlines()[-1])
    owner: dict[str, str] = {}
    for dist in md.distributions():
        for f in dist.files or ():
            owner[os.path.realpath(dist.locate_file(f))] = canonicalize_name(dist.metadata["Name"])
    found = {}
    for top, path in files.items():
        if top in sys.stdlib_module_names or path is None:
            continue
        dist = owner.get(os.path.realpath(path))
        if dist is not None:
            found[top] = [dist]
    return found


def runs_without(statement: str, modules: Iterable[str]) -> bool:
    """Whether ``statement`` still runs when ``modules`` cannot be imported (an optional import, such as
    pandas' of pyarrow, is taken when present and skipped when not)."""
    code = f"import sys\nfor name in {sorted(modules)!r}:\n    sys.modules[name] = None\n{statement}\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def undeclared(statement: str, roots: Iterable[str]) -> dict[str, list[str]]:
    """The modules ``statement`` imports whose distributions are outside the closure of ``roots`` and
    that it cannot do without."""
    closure = dependency_closure(roots) | {"sopgym"}
    outside = {top: dists for top, dists in imported_distributions(statement).items() if not set(dists) & closure}
    by_dist: dict[str, list[str]] = {}
    for top, dists in outside.items():
        by_dist.setdefault(dists[0], []).append(top)
    needed = {d for d, tops in by_dist.items() if not runs_without(statement, tops)}
    return {top: dists for top, dists in outside.items() if dists[0] in needed}


def assert_extra_complete(extra: str, statement: str) -> None:
    """Every distribution the import ``statement`` loads is pulled in by ``sopgym[extra]``."""
    missing = undeclared(statement, extra_requirements(extra))
    assert not missing, (
        f"{statement!r} loads modules of distributions that sopgym[{extra}] does not pull in: {missing}; "
        f"expected every one declared (add them to the extra in setup.cfg)"
    )
