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

The warm worker (``python3 tool_server.py worker``; in the sandbox this source runs with ``-c``)
is one process per domain and runner that keeps pandas and ``tools.py`` imported, and runs each
episode in a fork of itself, so a live call costs a line over a pipe instead of a process start
and pandas' import. JSON lines in, one marked JSON line out per request:

1. ``{"domain", "files", "tool_names"}``: the domain's files (base64) are written to
   ``<working dir>/<domain>``, which becomes the working directory (the starting working directory
   must be the worker's own: it is emptied before every episode); pandas and ``tools.py`` are
   imported -> ``{"ready": true, "pandas": <version>, "python": <version>}`` or
   ``{"ready": false, "error"}``.
2. ``{"op": "begin"}``: the worker puts its folder back as shipped, then forks an episode process,
   which instantiates the manager -> ``{"ready": true}`` (or ``{"ready": false, "error"}``, after
   which it exits).
3. ``{"op": "call", "name", "args"}`` (answered by the episode process) -> ``{"kind", "text", "exc_type"}``.
4. ``{"op": "end"}``: the episode process exits -> ``{"ended": true, "exit_code": 0}``. If the
   episode process dies during a call (a tool called ``sys.exit``, crashed, or was killed), this
   ``ended`` line with its exit code is what the host reads instead of the call's answer.

Hermetic episodes: everything an episode does in memory (the manager, module globals, caches,
pandas options, random state) lives in its forked process and dies with it; before each episode the
worker puts its working root back exactly as shipped: only ``<domain>/`` with the shipped files
(files written, changed, replaced or deleted, folders made read-only, anything beside the domain
folder: all undone). Random generators are reseeded in each episode process, as in a fresh process:
Python's ``random`` by itself at fork, numpy's global generator here. What the worker does not undo:
writes outside its working root. In the Docker sandbox the only other writable places (``/dev/shm``,
``/dev/mqueue``, System V IPC) are emptied between episodes by the container's supervisor
(``worker_clean``); the unsandboxed subprocess runner cannot stop them. Every episode also receives
the import-time state of ``tools.py``, identical each time (as every upstream run does).

Whatever a tool prints goes to stderr (file descriptor 1 itself is pointed at stderr, so output of
C code and child processes too), so it can never be mistaken for a result.

What it does not protect against: anything ``tools.py`` does (it is third-party code run with this
process's rights). Containment is the caller's job: the Docker sandbox by default.
"""

import base64
import gc
import importlib.util
import io
import json
import os
import platform
import shutil
import stat
import sys
import traceback

MARKER = "@@SOPGYM-TOOLS@@"
#: Thread pools of numeric libraries are kept to one thread: the worker forks, and a pool started
#: before a fork does not exist in the child. Set before numpy loads; an explicit setting wins.
_SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def load_module(domain_dir):
    """Import ``DOMAIN_DIR/tools.py`` (as upstream's loader does)."""
    path = os.path.join(domain_dir, "tools.py")
    module_name = "benchmark_tools_" + os.path.basename(os.path.normpath(domain_dir))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"Could not load module spec from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def manager_class(module):
    """Upstream's rule: the first public name of ``dir(module)`` ending in ``Manager``."""
    for attr in dir(module):
        if attr.endswith("Manager") and not attr.startswith("_"):
            return getattr(module, attr)
    raise ImportError(f"No Manager class found in {module.__file__}")


def load_manager(domain_dir):
    """Import ``DOMAIN_DIR/tools.py`` and instantiate its manager class (upstream's rule)."""
    return manager_class(load_module(domain_dir))()


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


class _Lines:
    """Unbuffered line reader over a file descriptor. The host sends one request and waits for its
    answer, so nothing is buffered here when the worker forks and the episode process takes over."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray()

    def readline(self):
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                return line.decode("utf-8")
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk


def _emit(fd, obj):
    data = (MARKER + json.dumps(obj) + "\n").encode("utf-8")
    while data:
        data = data[os.write(fd, data):]


def _remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            for dirpath, dirnames, _ in os.walk(path):  # a tool may have made folders read-only
                for name in dirnames:
                    os.chmod(os.path.join(dirpath, name), 0o700)
            os.chmod(path, 0o700)
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _signature(path):
    st = os.lstat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), stat.S_IFMT(st.st_mode))


class _Folder:
    """The worker's working root: exactly ``<root>/<domain>/<shipped files>`` at every episode's start."""

    def __init__(self, root, domain, files):
        self.root = root
        self.domain_dir = os.path.join(root, domain)
        self.files = files
        self.signatures = {}
        _remove(self.domain_dir)
        os.mkdir(self.domain_dir, 0o755)
        for name in files:
            self._write(name)

    def _write(self, name):
        path = os.path.join(self.domain_dir, name)
        with open(path, "wb") as fh:
            fh.write(self.files[name])
        os.chmod(path, 0o644)
        self.signatures[name] = _signature(path)

    def restore(self):
        """Undo whatever the last episode (or a cleaner outside) did under the root."""
        for entry in os.listdir(self.root):
            if os.path.join(self.root, entry) != self.domain_dir:
                _remove(os.path.join(self.root, entry))
        if not os.path.isdir(self.domain_dir) or os.path.islink(self.domain_dir):
            _remove(self.domain_dir)
            os.mkdir(self.domain_dir, 0o755)
            self.signatures.clear()
        os.chmod(self.domain_dir, 0o755)
        for entry in os.listdir(self.domain_dir):
            if entry not in self.files:
                _remove(os.path.join(self.domain_dir, entry))
        for name in self.files:
            path = os.path.join(self.domain_dir, name)
            try:
                unchanged = _signature(path) == self.signatures.get(name)
            except FileNotFoundError:
                unchanged = False
            if not unchanged:
                _remove(path)
                self._write(name)


def _episode(reader, out, cls, tool_names):
    """The forked episode process: one manager, the episode's calls, then ``os._exit``."""
    code = 0
    try:
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed()  # a fresh process's entropy, not the worker's generator state
        try:
            manager = cls()
        except Exception as exc:
            _emit(out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
            code = 1
            return
        _emit(out, {"ready": True})
        while True:
            line = reader.readline()
            if line is None:
                return
            req = json.loads(line)
            if req.get("op") == "end":
                return
            if req.get("op") != "call":
                _emit(out, {"error": f"expected op 'call' or 'end' in an episode, got {req.get('op')!r}"})
                continue
            _emit(out, call_tool(manager, tool_names, req["name"], req["args"]))
    except BaseException:  # SystemExit from a tool included: the host sees the exit code
        traceback.print_exc()
        code = 70
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: S110 - nothing left to report to
                pass
        os._exit(code)


def _warm_up(pandas):
    """Read a small in-memory CSV and compare a string column once, so that every episode process
    does not import the reader's and the string dtype's lazily loaded parts again (pyarrow's compute
    kernels, when pyarrow is installed, cost tens of milliseconds). Touches no file of the domain."""
    frame = pandas.read_csv(io.StringIO("key,text,number\nk1,None,1.5\nk2,,\n"))
    frame[frame["key"] == "k1"].iloc[0].to_dict()


def worker_main():
    """The warm worker (protocol in the module docstring). Returns the exit code."""
    for name in _SINGLE_THREADED:
        os.environ.setdefault(name, "1")
    out = os.dup(1)
    os.dup2(2, 1)  # tools' output, from Python, C or children, goes to stderr
    reader = _Lines(0)
    line = reader.readline()
    if line is None:
        return 0
    init = json.loads(line)
    tool_names = init["tool_names"]
    try:
        files = {name: base64.b64decode(data) for name, data in init["files"].items()}
        folder = _Folder(os.getcwd(), init["domain"], files)
        os.chdir(folder.domain_dir)
        import pandas

        _warm_up(pandas)
        cls = manager_class(load_module(folder.domain_dir))
    except Exception as exc:
        _emit(out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    gc.freeze()  # the imports' objects: episode processes' collections then leave their pages shared
    _emit(out, {"ready": True, "pandas": pandas.__version__, "python": platform.python_version()})
    while True:
        line = reader.readline()
        if line is None:
            return 0
        req = json.loads(line)
        if req.get("op") != "begin":
            _emit(out, {"error": f"expected op 'begin' between episodes, got {req.get('op')!r}"})
            continue
        try:
            folder.restore()
            os.chdir(folder.domain_dir)  # it may have been removed and remade since the last episode
        except OSError as exc:
            _emit(out, {"ready": False, "error": f"restoring the domain folder failed: {type(exc).__name__}: {exc}"})
            return 1
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _episode(reader, out, cls, tool_names)  # never returns
        _, status = os.waitpid(pid, 0)
        _emit(out, {"ended": True, "exit_code": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__" and sys.argv[1:] == ["worker"]:
    sys.exit(worker_main())
