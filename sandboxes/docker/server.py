"""The tool server that runs *inside* a sandbox container (standard library only).

It is the container's main process (under the container's init) and speaks newline-delimited JSON
on stdin/stdout, which the host reaches over one Docker attach stream: one request line in, one
response line out, so a tool call costs no process start. Requests (``op``):

* ``hello``                                   -> ``{"pid", "python"}``
* ``program`` ``{sha, module, source}``       cache a stateful program's module, compiled from source
* ``load``    ``{sha, state}``                discard the database, build a fresh one (episode reset)
* ``call``    ``{name, args}``                run one tool in a SAVEPOINT -> ``{outcome, content, error}``
* ``snapshot``                                the program's ``snapshot(db)``
* ``run_python`` ``{code, stdin, timeout, cap}`` run agent code in a child process, hard deadline
* ``run_sql`` ``{sha, state, query, timeout, cap}`` a read-only query on a fresh database, in a child
* ``echo``    ``{payload}``                   benchmark floor: answers with the payload

The database is built exactly like :func:`sopgym.sandboxes.inprocess.build_database` (the parity
test holds both to the same results). The server never receives a task's expected answer: only the
program source and the initial state.

What it protects against: a child (agent code, SQL job) outliving its deadline: at the deadline the
child's session is SIGKILLed and then every process in the container except init and this server
(``kill(-1, SIGKILL)``), so SIGTERM traps, daemonised grandchildren and fork bombs all die; output
beyond ``cap`` bytes is dropped; ``/tmp`` is emptied after each run. What it does not protect
against: agent code runs as the same uid as this server, so it could signal or inspect the server
while it runs; containment of the host is the container's job (see ``policy.py``), not this file's.

Run directly for local tests: ``python3 server.py`` (serve on stdin/stdout) or
``python3 server.py --sql-job`` (one SQL job read from stdin; used by the children above).
"""

import json
import os
import selectors
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import types

PROTOCOL = 1
SCRATCH = os.environ.get("SOPGYM_SCRATCH", "/tmp")


def compile_program(module_name, source):
    module = types.ModuleType(module_name)
    module.__file__ = "<sopgym:" + module_name + ">"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    for attr in ("SCHEMA", "TOOLS", "snapshot"):
        if not hasattr(module, attr):
            raise ValueError(f"stateful program {module_name!r} lacks {attr!r}; expected SCHEMA, TOOLS, snapshot")
    return module


def build_database(module, initial_state):
    # Keep identical to sandboxes/inprocess.py::build_database.
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.executescript(module.SCHEMA)
    for table, rows in initial_state.items():
        for row in rows:
            cols = list(row)
            db.execute(
                'INSERT INTO "{}" ({}) VALUES ({})'.format(table, ", ".join(str(c) for c in cols), ", ".join("?" * len(cols))),
                [row[c] for c in cols],
            )
    return db


def call_tool(module, db, name, args):
    fn = module.TOOLS.get(name)
    if fn is None:
        return {"outcome": "unknown_tool", "content": None, "error": f"unknown stateful tool {name!r}"}
    db.execute("SAVEPOINT tool_call")
    try:
        content = fn(db, dict(args))
    except Exception as exc:  # a tool's exception is the agent-visible error
        db.execute("ROLLBACK TO tool_call")
        db.execute("RELEASE tool_call")
        return {"outcome": "tool_error", "content": None, "error": str(exc) or type(exc).__name__}
    db.execute("RELEASE tool_call")
    return {"outcome": "ok", "content": content, "error": ""}


def sql_job(payload):
    """Run one read-only query on a fresh database; print the JSON list of row lists."""
    module = compile_program(payload["module"], payload["source"])
    db = build_database(module, payload["state"])
    db.execute("PRAGMA query_only = ON")
    rows = [list(row) for row in db.execute(payload["query"]).fetchall()]
    sys.stdout.write(json.dumps(rows))
    sys.stdout.flush()


def other_pids(me):
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            if pid not in (1, me):
                pids.append(pid)
    return pids


def sweep(container_mode, child):
    """Kill the child's session; in a container also everything but init and us."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if not container_mode:
        return
    me = os.getpid()
    for _ in range(200):  # a fork bomb may still be forking between passes
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        remaining = [p for p in other_pids(me) if p != child.pid and not _is_zombie(p)]
        if not remaining:
            return
        time.sleep(0.005)


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def run_child(argv, stdin_bytes, timeout, cap, container_mode, env=None, cwd=None):
    """Run argv with a hard wall-clock deadline; capture stdout/stderr up to ``cap`` bytes each."""
    start = time.monotonic()
    deadline = start + float(timeout)
    child = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        start_new_session=True,
        cwd=cwd or SCRATCH,
        env=env,
    )
    try:
        child.stdin.write(stdin_bytes)
    except BrokenPipeError:
        pass
    child.stdin.close()
    out_fd, err_fd = child.stdout.fileno(), child.stderr.fileno()
    out = {out_fd: bytearray(), err_fd: bytearray()}
    truncated = False
    timed_out = False
    sel = selectors.DefaultSelector()
    sel.register(child.stdout, selectors.EVENT_READ)
    sel.register(child.stderr, selectors.EVENT_READ)
    open_streams = 2
    exited_at = None
    while open_streams:
        now = time.monotonic()
        if now >= deadline and child.poll() is None:
            timed_out = True
            sweep(container_mode, child)
        if exited_at is None and child.poll() is not None:
            exited_at = now
            sweep(container_mode, child)  # daemonised leftovers must not hold the pipes open
        if exited_at is not None and now - exited_at > 0.5:
            break  # leftovers outside our reach (local mode) still hold a pipe: stop reading
        for key, _ in sel.select(timeout=0.02):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            buf = out[key.fd]
            room = cap - len(buf)
            if room > 0:
                buf += data[:room]
            if len(data) > room:
                truncated = True
    sel.close()
    if child.poll() is None:
        sweep(container_mode, child)
    code = child.wait()
    child.stdout.close()
    child.stderr.close()
    if container_mode:
        clean_scratch()
    return {
        "exit_code": None if timed_out else code,
        "stdout": out[out_fd].decode("utf-8", "replace"),
        "stderr": out[err_fd].decode("utf-8", "replace"),
        "timed_out": timed_out,
        "truncated": truncated,
        "elapsed": time.monotonic() - start,
    }


def clean_scratch():
    for entry in os.listdir(SCRATCH):
        path = os.path.join(SCRATCH, entry)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


class Server:
    def __init__(self, container_mode):
        self.container_mode = container_mode
        self.modules = {}  # sha -> (module name, source, module)
        self.module = None
        self.db = None

    def handle(self, req):
        op = req.get("op")
        if op == "hello":
            return {"pid": os.getpid(), "python": sys.version.split()[0], "protocol": PROTOCOL}
        if op == "echo":
            return {"payload": req.get("payload")}
        if op == "program":
            if req["sha"] not in self.modules:
                self.modules[req["sha"]] = (req["module"], req["source"], compile_program(req["module"], req["source"]))
            return {}
        if op == "load":
            if self.db is not None:
                self.db.close()
                self.db = None
            self.module = self.modules[req["sha"]][2]
            self.db = build_database(self.module, req["state"])
            return {}
        if op == "call":
            if self.db is None:
                raise RuntimeError("call before load")
            return call_tool(self.module, self.db, req["name"], req["args"])
        if op == "snapshot":
            if self.db is None:
                raise RuntimeError("snapshot before load")
            return {"snapshot": self.module.snapshot(self.db)}
        if op == "unload":
            if self.db is not None:
                self.db.close()
            self.db = None
            self.module = None
            return {}
        if op == "run_python":
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": SCRATCH, "LANG": "C.UTF-8"}
            return run_child(
                [sys.executable, "-I", "-c", req["code"]],
                req.get("stdin", "").encode(),
                req["timeout"],
                req["cap"],
                self.container_mode,
                env,
            )
        if op == "run_sql":
            name, source, _ = self.modules[req["sha"]]
            payload = {"module": name, "source": source, "state": req["state"], "query": req["query"]}
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
            return run_child(
                [sys.executable, "-I", os.path.abspath(__file__), "--sql-job"],
                json.dumps(payload).encode(),
                req["timeout"],
                req["cap"],
                self.container_mode,
                env,
            )
        raise ValueError(f"unknown op {op!r}")

    def serve(self, stdin, stdout):
        for line in stdin:
            if not line.strip():
                continue
            req_id = None
            try:
                req = json.loads(line)
                req_id = req.get("id")
                body = self.handle(req)
                body["id"] = req_id
                body["ok"] = True
                text = json.dumps(body, ensure_ascii=True)
            except Exception as exc:  # reported to the host as an infrastructure/program fault
                text = json.dumps({"id": req_id, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            stdout.write(text + "\n")
            stdout.flush()


def main(argv):
    if "--sql-job" in argv:
        sql_job(json.loads(sys.stdin.read()))
        return 0
    container_mode = "--container" in argv
    if container_mode:
        # Let a stray SIGPIPE/SIGTERM to us be visible as exit, not ignored.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    stdin = open(sys.stdin.fileno(), encoding="utf-8", closefd=False)
    stdout = open(sys.stdout.fileno(), "w", encoding="utf-8", closefd=False)
    Server(container_mode).serve(stdin, stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
