"""Real ZeroPipe processes on loopback for tests and checks: a process group whose members die
with the caller, each logging to a file, and a coordinator started on a free port.

Used by scripts/lib/docs_check.py (the docs' local cluster), tests/train/errors_test.py and
tests/train/upload_test.py (they put scripts/lib on sys.path).
"""
import ctypes
import os
import re
import signal
import subprocess
import time


def set_pdeathsig():
    """In the child before exec: die with the caller, even if it is killed outright."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class ProcessGroup:
    """Child processes in one process group (the first founds it), each writing stdout and stderr
    to LOG_DIR/NAME.log. stop() ends them: the later ones first (workers), then the first (the
    coordinator), each batch SIGTERM and `grace` seconds, then SIGKILL to what is left."""

    def __init__(self, log_dir, cwd=None, env=None):
        self.log_dir, self.cwd, self.env = log_dir, cwd, env
        self.procs, self.pgid = [], None

    def spawn(self, name, argv):
        log = open(os.path.join(self.log_dir, name + ".log"), "wb")
        group = self.pgid

        def setup():
            os.setpgid(0, group or 0)
            set_pdeathsig()

        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=setup, cwd=self.cwd, env=self.env)
        log.close()
        p.log_name = name
        self.procs.append(p)
        self.pgid = self.pgid or p.pid
        return p

    def log(self, name, tail=None):
        """NAME's log, or its last `tail` lines; "" before it exists."""
        try:
            with open(os.path.join(self.log_dir, name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-tail:]) if tail else f.read()
        except OSError:
            return ""

    def logs(self, tail=40):
        """Every member's exit status and last lines, for a failure message."""
        return "\n".join(f"--- {p.log_name} (exit {p.poll()}):\n{self.log(p.log_name, tail)}"
                         for p in self.procs)

    def stop(self, grace=10):
        """Idempotent."""
        procs, self.procs = self.procs, []
        for batch in (procs[1:], procs[:1]):
            for p in batch:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            for p in batch:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        if self.pgid is not None and any(p.poll() is None for p in procs):
            # The group cannot have been recycled: a member is still unreaped.
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()
        self.pgid = None


def start_coordinator(group, binary, args, name="coordinator", timeout=60):
    """Spawns zpipe-coordinator listening on a free loopback port (with `args` after --listen and
    --metrics-listen) and returns its address once it serves; RuntimeError with the logs if it
    exits or does not serve within `timeout` seconds."""
    proc = group.spawn(name, [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "", *args])
    deadline = time.monotonic() + timeout
    while not (m := re.search(r"serving on port ([0-9]+)", group.log(name))):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"the coordinator did not start serving:\n{group.logs()}")
        time.sleep(0.05)
    return f"127.0.0.1:{m.group(1)}"
