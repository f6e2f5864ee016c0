"""The documentation's own test: scripts/docs-check (links, markers; --run: the commands) and
scripts/docs-regen (rewrites the outputs the docs show). docs/building.md "The docs' own test"
says what the markers mean; in short:

  A *command block* is a fenced block of language sh, bash, shell or console, or any fenced block
  with a line starting `$ `. The last line of prose above each command block must be one of
    <!-- docs-check: run -->             the block is run (below) and must succeed
    <!-- docs-check: run (shape) -->     the same, but a shown output is compared by shape only
    <!-- docs-check: skip (REASON) -->    not runnable in CI, for the reason given (required)
  and a command block with neither is an error, named by file:line, even without --run.

  How a run block runs. Each command (a line; a line ending in `\\` continues on the next; blank
  and `#` lines are skipped) is its own `bash -e -o pipefail -c`, and must exit 0. It runs in a
  scratch folder that holds a symlink to every top-level entry of the repository, except `build`,
  which links to $BUILD_DIR, and `examples`, a copy (`zpipe run` writes beside the job file): so
  `build/client/zpipe`, `examples/...` and `.venv/bin/python` mean what they say, and what a
  command writes lands in the scratch folder or the build tree, never in the sources. PATH
  starts with the build's client/, coordinator/ and worker/ folders (a bare `zpipe` is the built
  one); the caller's ZPIPE_TOKEN and ZPIPE_TLS_* are dropped; HOME and XDG_CONFIG_HOME are
  scratch folders (zpipe's contexts are its own); ZPIPE_COORDINATOR is the address of a local
  cluster the checker starts for the whole run: one zpipe-coordinator on a loopback port with its
  database in a temporary folder and WORKERS (4) zpipe-worker processes (cpu:0..3, one thread
  each), started as the tests of tests/train start theirs and torn down at exit, however the
  checker exits. Before a console block (below) the
  checker waits until every worker is idle, so its output does not depend on the jobs before it.

  Shown outputs. A run block written as a console session — `$ COMMAND` lines, each followed by
  the lines it prints (stdout and stderr together) — has its output checked too: after
  normalising both sides (NORMALISE below: times, durations, job ids, ports, digests, rates), the
  lines shown must equal the lines the command prints. scripts/docs-regen runs the same commands
  and writes what they print (not normalised) into the block in place of each shown output that
  differs (one that matches stays as it is: no churn of timestamps), so a shown output is
  regenerated, never pasted. A command whose output is long is shown through `| sed -n 1,Np` or
  `| grep` (`| head` is refused: under pipefail the writer it leaves behind dies of SIGPIPE).
  Under `run (shape)` every number is volatile too (SHAPE: measured times, losses, bubbles): the
  lines and their words must match, not the values.
"""
import difflib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import ProcessGroup, start_coordinator  # noqa: E402

COMMAND_LANGS = {"sh", "bash", "shell", "console"}
RUN = "<!-- docs-check: run -->"
RUN_SHAPE = "<!-- docs-check: run (shape) -->"
SKIP = re.compile(r"^<!-- docs-check: skip \((?P<reason>[^)]+)\) -->$")
ANY_MARKER = re.compile(r"^<!-- docs-check:.*-->$")
WORKERS = 4
COMMAND_TIMEOUT_S = 300

# Volatile fields, replaced by a placeholder on both sides before shown and actual output are
# compared: what changes from one run to the next of the same command on the same build.
NORMALISE = [
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r"\bjob-[0-9a-f]{8}-\d+\b"), "<job-id>"),
    (re.compile(r"\b(127\.0\.0\.1|localhost):\d+\b"), r"\1:<port>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\b[0-9a-f]{12,40}\b"), "<hex>"),  # commits, digests cut short
    (re.compile(r"\b\d+(\.\d+)? ?(ns|us|µs|ms|s)\b|\b\d+(\.\d+)?[mhd]\b"), "<duration>"),
    (re.compile(r"\b\d+(\.\d+)? tokens/s\b"), "<rate> tokens/s"),
]


# Under `run (shape)`, after NORMALISE: every number.
SHAPE = (re.compile(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?"), "N")


def normalise(line, shape=False):
    for pattern, replacement in NORMALISE + ([SHAPE] if shape else []):
        line = pattern.sub(replacement, line)
    return " ".join(line.split()) if shape else line.rstrip()  # shape: columns may widen


def normalise_lines(lines, shape=False):
    """normalise() on each line; and in a table (a header line, then rows with as many fields,
    up to a blank line) a column whose header ends in `_ms` is a measured time: its values become
    <ms>, and runs of spaces in the rows count as one (a wider value may shift the columns)."""
    out, header, timed = [], 0, []
    for line in lines:
        fields = line.split()
        if not fields:
            header, timed = 0, []
        elif timed and len(fields) == header:
            line = " ".join("<ms>" if i in timed else f for i, f in enumerate(fields))
        elif any(f.endswith("_ms") for f in fields):
            header, timed = len(fields), [i for i, f in enumerate(fields) if f.endswith("_ms")]
            line = " ".join(fields)
        out.append(normalise(line, shape))
    return out


def blocks_and_text(text):
    """The lines outside code fences, and the fenced blocks: (first line number of the fence,
    its language, the last prose line before it, its lines)."""
    prose, blocks, fence, current, before, lang = [], [], None, [], "", ""
    for i, line in enumerate(text.split("\n")):
        if fence is None and line.lstrip().startswith("```"):  # indented: inside a list item
            fence, current, lang = i, [], line.lstrip()[3:].strip()
            indent = line[:len(line) - len(line.lstrip())]
            marker = before
        elif fence is not None and line.lstrip().startswith("```"):
            blocks.append((fence + 1, lang, marker, current))
            fence, before = None, ""  # a marker belongs to the one block below it
        elif fence is not None:
            current.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
        else:
            prose.append((i + 1, line))
            if line.strip():
                before = line.strip()
    return prose, blocks


def is_command_block(lang, lines):
    return lang in COMMAND_LANGS or any(line.startswith("$ ") for line in lines)


def commands_of(first, lines):
    """A run block's commands: (line number, command, shown output lines or None, index range of
    those output lines in `lines`)."""
    console = any(line.startswith("$ ") for line in lines)
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if console and not line.startswith("$ "):
            i += 1  # output of a command before it; never a command
            continue
        text = line[2:] if console else line
        start = i
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + " " + lines[i].strip()
        i += 1
        shown_from = i
        if console:
            while i < len(lines) and not lines[i].startswith("$ "):
                i += 1
        if text.strip() and not text.strip().startswith("#"):
            shown = lines[shown_from:i] if console else None
            out.append((first + 1 + start, text.strip(), shown, (shown_from, i)))
    return out


# ---- the local cluster ---------------------------------------------------------------------------


class Cluster:
    """One zpipe-coordinator and WORKERS zpipe-workers on loopback, in one process group
    (local_cluster.py), like the clusters of tests/train/upload_test.py and errors_test.py."""

    def __init__(self, build, top, env):
        self.env = env
        self.group = ProcessGroup(top, cwd=top, env=env)
        self.zpipe = str(build / "client" / "zpipe")
        self.address = start_coordinator(
            self.group, str(build / "coordinator" / "zpipe-coordinator"),
            ["--db", os.path.join(top, "coordinator.db"),
             "--artifact-dir", os.path.join(top, "artifacts")])
        for i in range(WORKERS):
            self.group.spawn(f"worker-{i}", [
                str(build / "worker" / "zpipe-worker"), "--coordinator", self.address,
                "--name", f"docs-w{i}", "--device", f"cpu:{i}", "--threads", "1",
                "--comm-timeout", "30", "--data-root", top])
        self.wait_idle("register")

    def wait_idle(self, what="go idle"):
        """Until every worker is registered and idle (60 s at most)."""
        deadline = time.monotonic() + 60
        while True:
            r = subprocess.run([self.zpipe, "--coordinator", self.address, "-o", "json", "workers"],
                               capture_output=True, text=True, timeout=30, env=self.env)
            workers = json.loads(r.stdout).get("workers", []) if r.returncode == 0 else []
            if sum(w.get("state") == "idle" for w in workers) == WORKERS:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not {what}:\n{r.stdout}\n{self.group.logs()}")
            time.sleep(0.1)

    def stop(self):
        self.group.stop()


# ---- the checks ----------------------------------------------------------------------------------


def anchors(path):
    seen, out = {}, set()
    prose, _ = blocks_and_text(path.read_text())
    for _, line in prose:
        m = re.match(r"^#{1,6} (.*)$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def check_links(root, docs, problems):
    cache = {}
    for doc in docs:
        prose, _ = blocks_and_text(doc.read_text())
        for lineno, line in prose:
            for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = (doc.parent / path).resolve() if path else doc
                where = f"{doc.relative_to(root)}:{lineno}"
                if not dest.exists():
                    problems.append(f"{where}: link to {target}: no such file")
                    continue
                if anchor and dest.suffix == ".md":
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        problems.append(f"{where}: link to {target}: no such heading")


def check_markers(root, docs, problems):
    """Every command block marked run or skip (with a reason); returns the run blocks as
    (doc, block) and the skip reasons."""
    runs, skips = [], []
    for doc in docs:
        _, blocks = blocks_and_text(doc.read_text())
        for block in blocks:
            lineno, lang, marker, lines = block
            where = f"{doc.relative_to(root)}:{lineno}"
            command = is_command_block(lang, lines)
            if not ANY_MARKER.match(marker):
                if command:
                    problems.append(f"{where}: an unmarked command block: put `{RUN}` or "
                                    "`<!-- docs-check: skip (WHY NOT IN CI) -->` on the line above")
                continue
            if not command:
                problems.append(f"{where}: `{marker}` above a block that is no command block "
                                f"(```sh, ```console or `$ ` lines)")
            elif marker in (RUN, RUN_SHAPE):
                runs.append((doc, block))
            elif m := SKIP.match(marker):
                skips.append(m.group("reason"))
            else:
                problems.append(f"{where}: unknown marker `{marker}`: `{RUN}`, `{RUN_SHAPE}` or "
                                "`<!-- docs-check: skip (REASON) -->`")
    return runs, skips


def scratch_folder(root, build, top):
    work = os.path.join(top, "work")
    os.makedirs(work)
    for entry in root.iterdir():
        if entry.name == "examples":  # a copy: `zpipe run` writes its files beside the job file
            shutil.copytree(entry, os.path.join(work, entry.name), symlinks=True)
        elif entry.name not in ("build", ".git"):
            os.symlink(entry, os.path.join(work, entry.name))
    os.symlink(build, os.path.join(work, "build"))
    return work


def run_blocks(root, build, runs, problems, regen):
    top = tempfile.mkdtemp(prefix="zpipe-docs-")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(str(build / d) for d in ("client", "coordinator", "worker")) \
        + os.pathsep + env.get("PATH", "")
    for var in ("HOME", "XDG_CONFIG_HOME"):
        env[var] = os.path.join(top, var.lower())
        os.makedirs(env[var])
    for var in ("ZPIPE_TOKEN", "ZPIPE_TLS_CA", "ZPIPE_TLS_CERT", "ZPIPE_TLS_KEY",
                "ZPIPE_REQUIRE_TLS"):
        env.pop(var, None)  # the caller's credentials are not the local cluster's
    env["PYTHONUNBUFFERED"] = "1"  # a Python command's lines in the order it printed them
    cluster = None

    def on_signal(signum, _):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        work = scratch_folder(root, build, top)
        t0 = time.monotonic()
        cluster = Cluster(build, top, env)
        env["ZPIPE_COORDINATOR"] = cluster.address
        print(f"docs-check: local cluster at {cluster.address}, {WORKERS} workers "
              f"({time.monotonic() - t0:.1f} s)", flush=True)
        commands, pending = 0, {}  # pending: what docs-regen writes once every command has run
        for doc, (lineno, _, marker, lines) in runs:
            shape = marker == RUN_SHAPE
            if any(line.startswith("$ ") for line in lines):
                cluster.wait_idle()  # a shown output starts from a quiet cluster
            rewrites = []
            for cmd_line, command, shown, span in commands_of(lineno, lines):
                where = f"{doc.relative_to(root)}:{cmd_line}"
                t = time.monotonic()
                stderr = subprocess.STDOUT if shown is not None else subprocess.PIPE
                r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=work,
                                   env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=stderr, text=True, errors="replace",
                                   timeout=COMMAND_TIMEOUT_S)
                commands += 1
                print(f"docs-check: {where}: {command}  ({time.monotonic() - t:.1f} s)", flush=True)
                if r.returncode != 0:
                    err = (r.stderr if shown is None else r.stdout) or ""
                    problems.append(
                        f"{where}: `{command}` exited {r.returncode}: {err.strip()[-800:]}")
                    continue
                if shown is None:
                    continue
                actual = [line.rstrip() for line in r.stdout.rstrip("\n").split("\n")] \
                    if r.stdout.strip() else []
                if normalise_lines(shown, shape) == normalise_lines(actual, shape):
                    continue  # current: docs-regen leaves it as it is (no churn of timestamps)
                if regen:
                    rewrites.append((span, actual))
                else:
                    diff = difflib.unified_diff(shown, actual, "shown", "printed", lineterm="", n=1)
                    problems.append(f"{where}: the output shown for `{command}` is not what it "
                                    "prints (scripts/docs-regen rewrites it):\n    "
                                    + "\n    ".join(list(diff)[:40]))
            if rewrites:
                pending.setdefault(doc, []).append((lineno, lines, rewrites))
        for doc, blocks in pending.items() if not problems else ():
            rewrite(doc, blocks)  # all or nothing: a failed command leaves every page as it was
        return commands
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(top, ignore_errors=True)


def rewrite(doc, blocks):
    """Replaces, in `doc`, the output lines of each block: (line of its fence, its lines as read,
    [((first, end) index range of an output in those lines, the lines printed)])."""
    text = doc.read_text().split("\n")
    for fence_line, lines, rewrites in sorted(blocks, key=lambda b: b[0], reverse=True):
        shown = [line.strip() for line in text[fence_line:fence_line + len(lines)]]
        assert shown == [line.strip() for line in lines], f"{doc} changed while running"
        new = list(lines)
        for (begin, end), actual in sorted(rewrites, key=lambda r: r[0], reverse=True):
            new[begin:end] = actual
        fence = text[fence_line - 1]
        indent = fence[:len(fence) - len(fence.lstrip())]
        new = [indent + line if line else line for line in new]
        text[fence_line:fence_line + len(lines)] = new
        print(f"docs-regen: {doc.name}:{fence_line}: rewrote {len(rewrites)} output(s)", flush=True)
    doc.write_text("\n".join(text))


def main():
    root = pathlib.Path(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    if mode not in ("", "--run", "--regen"):
        sys.exit(f"usage: scripts/docs-check [--run]  (or scripts/docs-regen); not {mode!r}")
    build = pathlib.Path(os.environ.get("BUILD_DIR", root / "build")).resolve()
    docs = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    problems = []

    readme_lines = (root / "README.md").read_text().count("\n")
    if readme_lines >= 300:
        problems.append(
            f"README.md: {readme_lines} lines; keep it under 300 (move detail to docs/)")
    check_links(root, docs, problems)
    runs, skips = check_markers(root, docs, problems)
    for doc, (lineno, _, _, lines) in runs:
        for cmd_line, command, _, _ in commands_of(lineno, lines):
            if re.search(r"\|\s*head\b", command):
                problems.append(f"{doc.relative_to(root)}:{cmd_line}: `| head` in a run block: its "
                                "early exit kills the writer under pipefail; use `| sed -n 1,Np`")
    commands = 0
    if mode and not problems:
        commands = run_blocks(root, build, runs, problems, regen=(mode == "--regen"))

    for p in problems:
        print("docs-check:", p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"docs-check: OK, {len(docs)} files, README.md {readme_lines} lines, "
          f"{len(runs) + len(skips)} command blocks: {len(runs)} run, {len(skips)} skipped"
          + (f"; {commands} commands ran" if mode else ""))


if __name__ == "__main__":
    main()
