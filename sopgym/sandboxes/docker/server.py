"""The tool server that runs *inside* a sandbox container (standard library only).

It speaks newline-delimited JSON on stdin/stdout, which the host reaches over one Docker attach
stream: one request line in, one response line out, so a tool call costs no process start.
Requests (``op``):

* ``hello``                                   -> ``{"pid", "python", "protocol", "uid", "agent_uid"}``
* ``program`` ``{sha, module, source}``       cache a stateful program's module, compiled from source
* ``load``    ``{sha, state}``                discard the database, build a fresh one (episode reset)
* ``call``    ``{name, args}``                run one tool in a SAVEPOINT -> ``{outcome, content, error}``
* ``snapshot``                                the program's ``snapshot(db)``
* ``run_python`` ``{code, stdin, timeout, cap}`` run agent code in a child process, hard deadline
* ``run_sql`` ``{sha, state, query, timeout, cap}`` a read-only query on a fresh database, in a child
* ``echo``    ``{payload}``                   benchmark floor: answers with the payload
* ``worker_start`` ``{code}``                 start a persistent child (``python3 -I -c code``), see :class:`Worker`
* ``worker_call`` ``{line, timeout, cap}``    one line to the worker, its next output line back, hard deadline
* ``worker_clean``                            empty the agent's writable places, the worker kept (between episodes)
* ``worker_stop``                             stop the worker, then sweep and clean as after a run

Process layout. A *stateful* container runs this server as its main process (under the container's
init), as the unprivileged server uid, with no capabilities; no agent code ever runs there. A
*runner* container (``SOPGYM_AGENT_USER`` set) starts as root with a handful of capabilities
(``hardening.SUPERVISOR_CAPS``) and splits at once into

* the **supervisor** (root, never runs tool or agent code, never touches the channel): it starts
  each run's child as the agent uid, enforces the deadline, SIGKILLs every process of the agent uid
  afterwards and empties every place the agent uid can write (:data:`WRITABLE`, System V IPC);
* the **server** (``SOPGYM_SERVER_USER``, every capability dropped, bounding set included): it owns
  the channel and forwards ``run_*`` requests to the supervisor over a socket pair.

What it protects against: agent code reaching the server (another uid: it cannot signal, ptrace, or
read the memory or file descriptors of the server, the supervisor or init, so it can neither kill
the channel nor read an earlier episode's data held there); a child outliving its deadline (every
process of the agent uid is SIGKILLed, so SIGTERM traps, daemonised grandchildren and fork bombs
all die); one run's files, shared memory, message queues and System V objects reaching the next
run (all emptied after every run; a run after which something could not be emptied is reported
``tainted`` and the host replaces the container); output beyond ``cap`` bytes (dropped); agent
code that cannot be passed as an argument (NUL bytes, larger than the kernel's argument limit: it
reaches the child through a pipe). Agent processes start with ``oom_score_adj=1000`` and nice 19,
so a memory or CPU bomb hurts them first; the agent can lower its own ``oom_score_adj`` (that needs
CAP_SYS_RESOURCE to pin, which not every daemon grants), so the host still attributes an OOM during a
run to the run (``pool.memory_events``), as it does a server that stops answering while the run holds
the container's memory or processes at their limit (``pool.resource_use``). What it does not protect against: kernel exploits
(containment of the host is the container's job, see ``hardening.py``).

Run directly for local tests: ``python3 server.py`` (serve on stdin/stdout; agent code runs as your
user) or ``python3 server.py --sql-job`` (one SQL job read from stdin; used by the children above).
"""

import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import types

PROTOCOL = 2
SCRATCH = os.environ.get("SOPGYM_SCRATCH", "/tmp")
#: Every place the agent uid can write in a runner container (the root filesystem is read-only;
#: /dev is root-owned): emptied after every run. tests/docker checks that the list is complete.
WRITABLE = ("/tmp", "/dev/shm", "/dev/mqueue")
SYSV_IPC = ("shm", "sem", "msg")
#: The child reads its program from this pipe instead of argv (no NUL or size limit there).
BOOTSTRAP = 'exec(compile(open({fd}, "rb").read(), "<string>", "exec"))'
AGENT_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": SCRATCH, "LANG": "C.UTF-8"}
_PR_CAPBSET_DROP = 24


def _load_sqlite_program():
    """``sqlite_program.py``: beside this file in the image, one folder up in the source tree
    (``sopgym/sandboxes/``). Loaded by path: ``-I`` children have no script folder on sys.path."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(folder, "sqlite_program.py") for folder in (here, os.path.dirname(here))]
    path = next((c for c in candidates if os.path.exists(c)), candidates[0])
    spec = importlib.util.spec_from_file_location("sopgym_sqlite_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_programs = _load_sqlite_program()
build_database, call_tool, check_program = _programs.build_database, _programs.call_tool, _programs.check_program


def compile_program(module_name, source):
    module = types.ModuleType(module_name)
    module.__file__ = "<sopgym:" + module_name + ">"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return check_program(module, module_name)


def sql_job(payload):
    """Run one read-only query on a fresh database; print the JSON list of row lists."""
    module = compile_program(payload["module"], payload["source"])
    db = build_database(module, payload["state"])
    db.execute("PRAGMA query_only = ON")
    rows = [list(row) for row in db.execute(payload["query"]).fetchall()]
    sys.stdout.write(json.dumps(rows))
    sys.stdout.flush()


# -- running one child with a hard deadline ----------------------------------------------------------
class _ChildPipes:
    """The child's pipes, pumped without blocking: inputs written as the child reads them, stdout and
    stderr read up to ``cap`` bytes each (the rest is drained and dropped, ``truncated`` set)."""

    def __init__(self, child, code_w, inputs, cap):
        self.child, self.code_w, self.cap = child, code_w, cap
        self.sel = selectors.DefaultSelector()
        self.pending = {}  # fd -> bytes still to write
        for fd, data in inputs:
            if fd is None:
                continue
            if data:
                os.set_blocking(fd, False)
                self.pending[fd] = memoryview(data)
                self.sel.register(fd, selectors.EVENT_WRITE)
            else:
                self._close_input(fd)
        self.out_fd, self.err_fd = child.stdout.fileno(), child.stderr.fileno()
        self.out = {self.out_fd: bytearray(), self.err_fd: bytearray()}
        self.sel.register(self.out_fd, selectors.EVENT_READ)
        self.sel.register(self.err_fd, selectors.EVENT_READ)
        self.open_streams = 2
        self.truncated = False

    def _close_input(self, fd):
        if fd == self.code_w:
            os.close(fd)
        else:
            self.child.stdin.close()

    def _stop_writing(self, fd):
        self.sel.unregister(fd)
        del self.pending[fd]
        self._close_input(fd)

    def _write(self, fd):
        try:
            written = os.write(fd, self.pending[fd][:65536])
        except BlockingIOError:
            return
        except OSError:  # the child closed its end: the rest of its input is not needed
            self._stop_writing(fd)
            return
        self.pending[fd] = self.pending[fd][written:]
        if not self.pending[fd]:
            self._stop_writing(fd)

    def _read(self, fd):
        data = os.read(fd, 65536)
        if not data:
            self.sel.unregister(fd)
            self.open_streams -= 1
            return
        buf = self.out[fd]
        room = self.cap - len(buf)
        if room > 0:
            buf += data[:room]
        if len(data) > room:
            self.truncated = True

    def pump(self, timeout):
        """One round: write to and read from every pipe that is ready within ``timeout`` seconds."""
        for key, _ in self.sel.select(timeout=timeout):
            if key.fd in self.pending:
                self._write(key.fd)
            else:
                self._read(key.fd)

    def close(self):
        for fd in list(self.pending):
            self._stop_writing(fd)
        self.sel.close()

    def text(self, fd):
        return self.out[fd].decode("utf-8", "replace")


def _spawn(argv, code, env, cwd, preexec_fn):
    """Start the child in its own session; returns ``(child, write end of the code pipe or None)``."""
    code_r = code_w = None
    if code is not None:
        code_r, code_w = os.pipe()
        argv = [a.replace("{code_fd}", str(code_r)) for a in argv]
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
            pass_fds=() if code_r is None else (code_r,),
            start_new_session=True,
            cwd=cwd or SCRATCH,
            env=env,
            preexec_fn=preexec_fn,
        )
    finally:
        if code_r is not None:
            os.close(code_r)
    return child, code_w


def run_child(argv, stdin_bytes, timeout, cap, sweep, env=None, cwd=None, *, code=None, preexec_fn=None):
    """Run argv with a hard wall-clock deadline; capture stdout/stderr up to ``cap`` bytes each.

    Args:
        sweep: ``sweep(child)`` kills the child and everything it left behind; called at the deadline
            and once the child has exited (daemonised leftovers must not hold the pipes open).
        code: bytes the child reads from a pipe; the literal ``{code_fd}`` in argv is replaced by the
            pipe's descriptor number. Inputs are written without blocking, so a child that never reads
            them cannot stall the deadline.
        preexec_fn: run in the child before exec (the supervisor switches uid there).

    Returns:
        ``{exit_code (None when killed at the deadline), stdout, stderr, timed_out, truncated, elapsed}``.
    """
    start = time.monotonic()
    deadline = start + float(timeout)
    child, code_w = _spawn(argv, code, env, cwd, preexec_fn)
    pipes = _ChildPipes(child, code_w, ((child.stdin.fileno(), stdin_bytes), (code_w, code)), cap)
    timed_out = False
    exited_at = None
    while pipes.open_streams:
        now = time.monotonic()
        if now >= deadline and child.poll() is None:
            timed_out = True
            sweep(child)
        if exited_at is None and child.poll() is not None:
            exited_at = now
            sweep(child)
        if exited_at is not None and now - exited_at > 0.5:
            break  # leftovers outside our reach (local mode) still hold a pipe: stop reading
        pipes.pump(0.02)
    pipes.close()
    if child.poll() is None:
        sweep(child)
    code_exit = child.wait()
    child.stdout.close()
    child.stderr.close()
    return {
        "exit_code": None if timed_out else code_exit,
        "stdout": pipes.text(pipes.out_fd),
        "stderr": pipes.text(pipes.err_fd),
        "timed_out": timed_out,
        "truncated": pipes.truncated,
        "elapsed": time.monotonic() - start,
    }


def kill_session(child):
    """Local mode's sweep: the child's session only (anything else is outside our reach)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def child_argv(kind):
    """How a run's child starts: Python reading its program from the code pipe, or a SQL job."""
    if kind == "python":
        return [sys.executable, "-I", "-c", BOOTSTRAP.replace("{fd}", "{code_fd}")]
    return [sys.executable, "-I", os.path.abspath(__file__), "--sql-job"]


def encode(text):
    """Agent text as bytes; lone surrogates (valid in JSON) pass through for the child to reject."""
    return text.encode("utf-8", "surrogatepass")


# -- a persistent child: the warm worker ------------------------------------------------------------
WORKER_OPS = ("worker_start", "worker_call", "worker_clean", "worker_stop")


class Worker:
    """A persistent child speaking lines on stdin/stdout (the ``worker_*`` ops).

    It holds a warm third-party tools process (SOP-Bench's ``tools.py`` with pandas imported; see
    sopgym/sopbench/tool_server.py), so a call costs a line over a pipe, not a process start. In a
    runner container the supervisor starts it as the agent uid, like a run's child, and
    ``worker_clean`` empties the agent's writable places between episodes while it idles.

    What it protects against: a worker that does not answer by the deadline, or whose line exceeds
    ``cap`` bytes, is killed (``kill``: in a container every process of the agent uid); its stderr
    is drained while it works (the last 8 KiB kept), so it can never block on it. What it does not:
    between calls the worker idles untimed (it holds no deadline until the next ``worker_call``).
    """

    STDERR_KEEP = 8192

    def __init__(self, code, kill, preexec_fn=None):
        self.kill = kill
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,
            cwd=SCRATCH,
            env=dict(AGENT_ENV),
            preexec_fn=preexec_fn,
        )
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            os.set_blocking(stream.fileno(), False)
        self.out = bytearray()
        self.err = bytearray()

    def alive(self):
        return self.proc.poll() is None

    def call(self, line, timeout, cap):
        """Send ``line`` and wait for the worker's next output line.

        Returns:
            ``{line (None when there is none), timed_out, truncated, exit_code[, stderr]}``; without
            a line the worker has been stopped.
        """
        deadline = time.monotonic() + float(timeout)
        pending = (line + "\n").encode("utf-8")
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        sel.register(self.proc.stderr, selectors.EVENT_READ)
        sel.register(self.proc.stdin, selectors.EVENT_WRITE)
        # A worker that dies while we write must give EPIPE, not kill this process.
        previous = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        try:
            while True:
                nl = self.out.find(b"\n")
                if nl >= 0:
                    text = self.out[:nl].decode("utf-8", "replace")
                    del self.out[: nl + 1]
                    return self._answer(text)
                if len(self.out) > cap:
                    self.stop()
                    return self._answer(None, truncated=True)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.stop()
                    return self._answer(None, timed_out=True)
                for key, _ in sel.select(timeout=remaining):
                    if key.fileobj is self.proc.stdin:
                        try:
                            pending = pending[os.write(key.fd, pending[:65536]):]
                        except BlockingIOError:
                            continue
                        except OSError:  # the worker is gone; its stdout's EOF says so
                            pending = b""
                        if not pending:
                            sel.unregister(key.fileobj)
                        continue
                    data = os.read(key.fd, 65536)
                    if key.fileobj is self.proc.stderr:
                        self.err += data
                        del self.err[: -self.STDERR_KEEP]
                        if not data:
                            sel.unregister(key.fileobj)
                    elif not data:  # stdout closed: the worker exited
                        code = self.proc.wait()
                        self.stop()
                        return self._answer(None, exit_code=code)
                    else:
                        self.out += data
        finally:
            sel.close()
            signal.signal(signal.SIGPIPE, previous)

    def _answer(self, line, *, timed_out=False, truncated=False, exit_code=None):
        body = {"line": line, "timed_out": timed_out, "truncated": truncated, "exit_code": exit_code}
        if line is None:
            body["stderr"] = self.err.decode("utf-8", "replace")
        return body

    def stop(self):
        """Kill the worker and everything it started. Safe to call twice."""
        if self.proc.returncode is None:
            self.kill(self.proc)
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


class LocalRunner:
    """Runs children as this process's user (``python3 server.py`` outside a container)."""

    agent_uid = None

    def __init__(self):
        self.worker = None

    def run(self, kind, data, stdin, timeout, cap):
        env = dict(AGENT_ENV)
        code, stdin_bytes = (encode(data), encode(stdin)) if kind == "python" else (None, encode(data))
        return run_child(child_argv(kind), stdin_bytes, timeout, cap, kill_session, env, code=code)

    def worker_op(self, op, req):
        """The ``worker_*`` ops as this process's user (no uid switch, nothing to clean here)."""
        if op == "worker_start":
            if self.worker is not None:
                self.worker.stop()
            self.worker = Worker(req["code"], kill_session)
            return {"pid": self.worker.proc.pid, "tainted": False}
        if op == "worker_call":
            if self.worker is None or not self.worker.alive():
                raise RuntimeError("worker_call without a running worker; expected worker_start first")
            return self.worker.call(req["line"], req["timeout"], req["cap"])
        if op == "worker_clean":
            return {"tainted": False}
        if self.worker is not None:  # worker_stop
            self.worker.stop()
            self.worker = None
        return {"tainted": False}


# -- the root supervisor of a runner container --------------------------------------------------------
def _libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def drop_privileges(uid, gid, libc=None):
    """Become ``uid:gid`` with no supplementary groups and no capabilities, bounding set included."""
    ctypes, libc = libc or _libc()
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)):
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(err)}")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def processes_of(uid):
    """Pids whose real, effective, saved or filesystem uid is ``uid`` and that still run code: a
    zombie counts only while its thread group has live threads (a main thread that called
    ``pthread_exit`` leaves a zombie leader whose other threads go on)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        if str(uid) not in fields.get("Uid", "").split():
            continue
        if fields.get("State", "").strip().startswith("Z") and fields.get("Threads", "1").strip() == "1":
            continue
        pids.append(int(entry))
    return pids


def _empty(top):
    """Remove everything under ``top`` (run as the agent uid, which owns all of it)."""
    for entry in os.listdir(top):
        path = os.path.join(top, entry)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
                for parent, dirs, _ in os.walk(path):
                    for name in dirs:
                        sub = os.path.join(parent, name)
                        if not os.path.islink(sub):
                            os.chmod(sub, 0o700)
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def _sysv_ids(kind):
    try:
        with open(f"/proc/sysvipc/{kind}") as fh:
            return [int(line.split()[1]) for line in fh.read().splitlines()[1:] if line.strip()]
    except OSError:
        return []


def _remove_sysv(libc):
    ctypes, libc = libc
    for shmid in _sysv_ids("shm"):
        libc.shmctl(shmid, 0, None)  # IPC_RMID
    for semid in _sysv_ids("sem"):
        libc.semctl(semid, 0, 0)
    for msqid in _sysv_ids("msg"):
        libc.msgctl(msqid, 0, None)


def leftovers():
    """What a run left in places the agent can write ([] = clean)."""
    found = []
    for top in WRITABLE:
        try:
            found += [os.path.join(top, e) for e in os.listdir(top)]
        except OSError:
            pass
    for kind in SYSV_IPC:
        found += [f"sysv-{kind}:{i}" for i in _sysv_ids(kind)]
    return found


class Supervisor:
    """Starts each run's child as the agent uid and leaves nothing of it behind (see the module doc)."""

    def __init__(self, agent_uid, agent_gid):
        self.agent_uid, self.agent_gid = agent_uid, agent_gid
        self.libc = _libc()
        self.worker = None

    def _agent_preexec(self):
        # In the forked child, still root: make it the OOM killer's and the scheduler's first victim,
        # then drop every privilege. Errors here fail the Popen in the parent (never run as root).
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
        os.setpriority(os.PRIO_PROCESS, 0, 19)
        drop_privileges(self.agent_uid, self.agent_gid, self.libc)

    def sweep(self, child=None):
        """SIGKILL every process of the agent uid until none is left. True when none is."""
        for _ in range(500):
            pids = processes_of(self.agent_uid)
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.002)
        return not processes_of(self.agent_uid)

    def clean(self):
        """Empty every writable place as the agent uid (its owner). Returns what is left ([] = clean)."""
        if not leftovers():
            return []
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                drop_privileges(self.agent_uid, self.agent_gid, self.libc)
                for top in WRITABLE:
                    if os.path.isdir(top):
                        _empty(top)
                _remove_sysv(self.libc)
                status = 0
            finally:
                os._exit(status)
        deadline = time.monotonic() + 10.0
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.002)
        return leftovers()

    def worker_op(self, op, req):
        """The ``worker_*`` ops: the worker runs as the agent uid, like a run's child; stopping it
        sweeps and cleans as after a run; ``worker_clean`` empties the writable places while it idles."""
        worker = self.worker
        if op == "worker_start":
            self._stop_worker()
            tainted = not self.sweep() or bool(self.clean())
            self.worker = Worker(req["code"], self.sweep, preexec_fn=self._agent_preexec)
            return {"pid": self.worker.proc.pid, "tainted": tainted}
        if op == "worker_call":
            if worker is None or not worker.alive():
                raise RuntimeError("worker_call without a running worker; expected worker_start first")
            result = worker.call(req["line"], req["timeout"], req["cap"])
            if result["line"] is None:  # the worker was stopped: leave nothing of it
                self.worker = None
                result["tainted"] = not self.sweep() or bool(self.clean())
            return result
        if op == "worker_clean":
            left = self.clean()
            return {"tainted": bool(left), "left": left[:5]}
        self._stop_worker()  # worker_stop
        return {"tainted": not self.sweep() or bool(self.clean())}

    def _stop_worker(self):
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.stop()

    def run(self, req):
        self._stop_worker()  # a run never shares the container with a warm worker
        # Defensive: the previous run ended clean, but a run must never start on anything left.
        tainted = not self.sweep() or bool(self.clean())
        kind = req["kind"]
        code, stdin = (encode(req["data"]), encode(req["stdin"])) if kind == "python" else (None, encode(req["data"]))
        result = run_child(child_argv(kind), stdin, req["timeout"], req["cap"], self.sweep, dict(AGENT_ENV),
                           code=code, preexec_fn=self._agent_preexec)
        swept = self.sweep()
        left = self.clean()
        result["tainted"] = tainted or not swept or bool(left)
        if left:
            result["stderr"] += f"\n[sandbox: could not empty {left[:5]}]"
        return result

    def serve(self, sock):
        reader = sock.makefile("rb")
        for line in reader:
            try:
                req = json.loads(line)
                body = self.worker_op(req["kind"], req) if req["kind"] in WORKER_OPS else self.run(req)
            except Exception as exc:  # reported to the server, which reports it to the host
                body = {"error": f"{type(exc).__name__}: {exc}"}
            sock.sendall(json.dumps(body).encode() + b"\n")


class SupervisorClient:
    """The server's side of the socket pair to the supervisor."""

    def __init__(self, sock, agent_uid):
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.agent_uid = agent_uid

    def run(self, kind, data, stdin, timeout, cap):
        return self._ask({"kind": kind, "data": data, "stdin": stdin, "timeout": timeout, "cap": cap})

    def worker_op(self, op, req):
        return self._ask({"kind": op, **{k: req[k] for k in ("code", "line", "timeout", "cap") if k in req}})

    def _ask(self, request):
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        line = self.reader.readline()
        if not line:
            raise RuntimeError("the sandbox supervisor is gone (its socket closed)")
        body = json.loads(line)
        if "error" in body:
            raise RuntimeError(f"the sandbox supervisor failed: {body['error']}")
        return body


def supervise(server_ids, agent_ids):
    """Split a runner container's root main process into the supervisor and the server."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            ours.close()
            drop_privileges(*server_ids)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            stdin = open(0, encoding="utf-8", closefd=False)
            stdout = open(1, "w", encoding="utf-8", closefd=False)
            Server(SupervisorClient(theirs, agent_ids[0])).serve(stdin, stdout)
            status = 0
        finally:
            os._exit(status)
    theirs.close()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # the supervisor never reads or writes the channel
    os.dup2(devnull, 1)
    os.close(devnull)
    supervisor = Supervisor(*agent_ids)
    try:
        supervisor.serve(ours)  # until the server exits (its end of the pair closes)
    finally:
        supervisor.sweep()
        os.waitpid(pid, 0)
    return 0


# -- the server ---------------------------------------------------------------------------------------
class Server:
    """Answers the host's requests. ``runner`` runs agent code (None: this container runs none)."""

    def __init__(self, runner):
        self.runner = runner
        self.modules = {}  # sha -> (module name, source, module)
        self.module = None
        self.db = None

    def _run(self, kind, data, stdin, req):
        if self.runner is None:
            raise ValueError(f"{req['op']}: this is a stateful container, it runs no agent code; expected a runner container")
        return self.runner.run(kind, data, stdin, req["timeout"], req["cap"])

    def handle(self, req):
        op = req.get("op")
        if op in WORKER_OPS:
            if self.runner is None:
                raise ValueError(f"{op}: this is a stateful container, it runs no third-party code; expected a runner container")
            return self.runner.worker_op(op, req)
        ops = {"hello": self._hello, "echo": self._echo, "program": self._program, "load": self._load,
               "call": self._call, "snapshot": self._snapshot, "unload": self._unload, "run_python": self._run_python,
               "run_sql": self._run_sql}
        handler = ops.get(op) if isinstance(op, str) else None
        if handler is None:
            raise ValueError(f"unknown op {op!r}")
        return handler(req)

    def _hello(self, req):
        agent_uid = self.runner.agent_uid if self.runner is not None else None
        return {"pid": os.getpid(), "python": sys.version.split()[0], "protocol": PROTOCOL, "uid": os.getuid(),
                "agent_uid": agent_uid}

    def _echo(self, req):
        return {"payload": req.get("payload")}

    def _program(self, req):
        if req["sha"] not in self.modules:
            self.modules[req["sha"]] = (req["module"], req["source"], compile_program(req["module"], req["source"]))
        return {}

    def _load(self, req):
        if self.db is not None:
            self.db.close()
            self.db = None
        self.module = self.modules[req["sha"]][2]
        self.db = build_database(self.module, req["state"])
        return {}

    def _call(self, req):
        if self.db is None:
            raise RuntimeError("call before load")
        return call_tool(self.module, self.db, req["name"], req["args"])

    def _snapshot(self, req):
        if self.db is None:
            raise RuntimeError("snapshot before load")
        return {"snapshot": self.module.snapshot(self.db)}

    def _unload(self, req):
        if self.db is not None:
            self.db.close()
        self.db = None
        self.module = None
        return {}

    def _run_python(self, req):
        return self._run("python", req["code"], req.get("stdin", ""), req)

    def _run_sql(self, req):
        name, source, _ = self.modules[req["sha"]]
        payload = {"module": name, "source": source, "state": req["state"], "query": req["query"]}
        return self._run("sql", json.dumps(payload), "", req)

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


def _ids(text):
    uid, gid = text.split(":")
    return int(uid), int(gid)


def main(argv):
    if "--sql-job" in argv:
        sql_job(json.loads(sys.stdin.read()))
        return 0
    if "--container" in argv and "SOPGYM_AGENT_USER" in os.environ:
        if os.geteuid() != 0:
            sys.stderr.write(f"server.py: a runner container must start as root to drop privileges; euid is {os.geteuid()}\n")
            return 2
        return supervise(_ids(os.environ["SOPGYM_SERVER_USER"]), _ids(os.environ["SOPGYM_AGENT_USER"]))
    if "--container" in argv:
        # A stateful container: started as the server's uid, with no capabilities; runs no agent code.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        runner = None
    else:
        runner = LocalRunner()
    stdin = open(sys.stdin.fileno(), encoding="utf-8", closefd=False)
    stdout = open(sys.stdout.fileno(), "w", encoding="utf-8", closefd=False)
    Server(runner).serve(stdin, stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
