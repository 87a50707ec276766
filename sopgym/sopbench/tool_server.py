"""Runs a SOP-Bench domain's own ``tools.py``: standard library only (it also runs in the sandbox image).

This file is sopgym's own code; the tools it runs are the user's checkout's. It reproduces what
upstream's loader and agent do around a tool call (facts in ../shared/sop-bench/README.md):

* the manager is the first name of ``dir(module)`` that ends in ``Manager`` and does not start with
  ``_``, instantiated with no arguments;
* a tool name missing from ``toolspecs.json`` fails before any call, with upstream's message
  ``Tool '<name>' not found. Available tools: <a, b, ...>``;
* a call goes to ``process_tool_call(name, params)`` (or, when the manager has none, the method of
  that name with ``**params``); an exception becomes ``Error: <str(exc)>``; a success becomes
  ``json.dumps(result)`` (so NaN is ``NaN``, None is ``null``, non-ASCII is escaped).

Two modes:

* ``python3 tool_server.py serve DOMAIN_DIR TOOL_NAMES_JSON``: a persistent worker speaking JSON
  lines (``{"name", "args"}`` in, one result object out). Used by the trusted local runner.
* ``batch_main()``: reads one JSON payload (domain files, tool names, calls) from stdin, writes the
  files into a fresh folder under the working directory, runs the calls in order in one process and
  prints one marked JSON line. Used inside the Docker sandbox, where nothing is mounted.

Whatever a tool prints goes to stderr, so it can never be mistaken for a result.

What it does not protect against: anything ``tools.py`` does (it is third-party code run with this
process's rights). Containment is the caller's job: the Docker sandbox by default.
"""

import base64
import contextlib
import importlib.util
import json
import os
import sys
import tempfile

MARKER = "@@SOPGYM-TOOLS@@"


def load_manager(domain_dir):
    """Import ``DOMAIN_DIR/tools.py`` and instantiate its manager class (upstream's rule)."""
    path = os.path.join(domain_dir, "tools.py")
    module_name = "benchmark_tools_" + os.path.basename(os.path.normpath(domain_dir))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"Could not load module spec from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    for attr in dir(module):
        if attr.endswith("Manager") and not attr.startswith("_"):
            return getattr(module, attr)()
    raise ImportError(f"No Manager class found in {path}")


def call_tool(manager, tool_names, name, params):
    """One call -> ``{"kind", "text", "exc_type"}``; ``text`` is exactly what the agent sees.

    kind: ``ok``, ``error`` (the tool raised), ``unknown_tool`` (not in toolspecs), or
    ``unserialisable`` (the result is not JSON: upstream's agent would crash here).
    """
    if name not in tool_names:
        return {
            "kind": "unknown_tool",
            "exc_type": "ValueError",
            "text": "Error: Tool '{}' not found. Available tools: {}".format(name, ", ".join(tool_names)),
        }
    try:
        if hasattr(manager, "process_tool_call"):
            result = manager.process_tool_call(name, params)
        elif hasattr(manager, name):
            result = getattr(manager, name)(**params)
        else:
            raise AttributeError(f"Tool '{name}' not found in tools instance")
    except Exception as exc:  # the tool's own failure is the agent-visible error
        return {"kind": "error", "exc_type": type(exc).__name__, "text": f"Error: {exc}"}
    try:
        return {"kind": "ok", "exc_type": "", "text": json.dumps(result)}
    except Exception as exc:
        return {"kind": "unserialisable", "exc_type": type(exc).__name__, "text": f"Error: {exc}"}


def _emit(stream, obj):
    stream.write(MARKER + json.dumps(obj) + "\n")
    stream.flush()


def serve(domain_dir, tool_names):
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        try:
            manager = load_manager(domain_dir)
        except Exception as exc:
            _emit(out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
            return 1
    _emit(out, {"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        with contextlib.redirect_stdout(sys.stderr):
            res = call_tool(manager, tool_names, req["name"], req["args"])
        _emit(out, res)
    return 0


def batch_main():
    payload = json.loads(sys.stdin.read())
    out = sys.stdout
    root = tempfile.mkdtemp(prefix="sopbench-", dir=os.getcwd())
    domain_dir = os.path.join(root, payload["domain"])
    os.mkdir(domain_dir)
    for name, data in payload["files"].items():
        with open(os.path.join(domain_dir, name), "wb") as fh:
            fh.write(base64.b64decode(data))
    results = []
    with contextlib.redirect_stdout(sys.stderr):
        try:
            manager = load_manager(domain_dir)
        except Exception as exc:
            _emit(out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
            return 1
        for req in payload["calls"]:
            results.append(call_tool(manager, payload["tool_names"], req["name"], req["args"]))
    _emit(out, {"ready": True, "results": results})
    return 0


if __name__ == "__main__" and len(sys.argv) >= 4 and sys.argv[1] == "serve":
    sys.exit(serve(sys.argv[2], json.loads(sys.argv[3])))
