"""Run the shell command blocks of README.md and docs/*.md and compare what they print with the page
(issue 52, "docs that run"; tests/test_docs_run.py).

A fenced block is a *command block* when its language is ``sh``, ``bash``, ``shell`` or ``console``, or
it has none and its first command line (after a ``$`` prompt, comments and ``NAME=value`` settings) starts
with a command (``nlqo``, ``curl``, ``scripts/...``, anything on ``PATH``, ...). Every command block
runs, unless the line before its fence is a marker:

- ``<!-- not-run: REASON -->``: the block is not run (an install, a GPU, a cluster, placeholders such as
  ``idx/``, hours of CPU); the reason is shown in the test's listing.
- ``<!-- output-not-compared: REASON -->``: the block runs and must succeed, but the output it shows
  is not compared (abbreviated, or another model's answer).
- ``<!-- run-only: N[,M...] REASON -->``: only the block's commands N, M (1-based) run.

A block whose lines start with ``$ `` is a transcript: each ``$`` line (with its ``\\`` continuations)
is a command and the lines up to the next ``$`` are its output. Otherwise every line is a command and
no output is shown. A command whose shown output starts with ``nlqo: error:`` must exit 2, any other
0. A shown output is compared with the real stdout (or stderr, or both), after :func:`normalise`
(timings, temporary paths and ports masked, ``...`` matching anything as in doctest's ELLIPSIS).

A page's blocks run in order in one session: a fresh working folder that links the repository's files
(``examples/``, ``scripts/``, ``.venv``, ...), the demo index at ``.nlqo/demo-index`` (what ``make demo``
builds), the files of ``tests/docs_run/work`` (files a page names but does not show, such as
``bad.nlqo``), and a fresh ``HOME`` holding ``tests/docs_run/home``. A block after a line
"Write `PATH`:" is written to PATH (``~`` is that HOME). A server (``nlqo serve``,
``scripts/serve-replicas.sh``, ...) runs in the background until its port answers, and stays up for the
rest of the page. Two explicit substitutions:

- the **model**: a command that leaves the model to nlqo's default (``nlqo ask`` etc. without
  ``--model``) runs with ``--model smollm2-135m`` (:data:`TEST_MODEL`), added by an ``nlqo`` shim first on
  ``PATH`` (:func:`with_test_model`), since the default model is too slow for a test; the transcript notes
  each command it changed;
- the **ports**: the pages' ports (8000-8999) are moved to a free range (:class:`Ports`), and moved back
  in the output.
"""

from __future__ import annotations

import difflib
import doctest
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FILES = Path(__file__).with_name("docs_run")
TEST_MODEL = "smollm2-135m"
MODEL_COMMANDS = frozenset({"parse", "ask", "explain", "analyze", "serve", "bench", "bench-plans"})
"""The nlqo commands whose ``--model`` defaults to the default model (``nlqo plan``'s is optional)."""
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
COMMANDS = frozenset(
    {"nlqo", "make", "curl", "python", "python3", "pip", "chromium", "nohup", "dask", "vllm", "jq", "sh", "bash"}
    | {"export", "cd", "mkdir", "openssl", "git", "source", "."}
)
MARKER = re.compile(r"^\s*<!--\s*(not-run|output-not-compared|run-only)\s*:\s*(.*?)\s*-->\s*$")
WRITE = re.compile(r"Write `([^`]+)`:\s*$")
SERVERS = (
    re.compile(r"^(?:\S+=\S+\s+)*nlqo\s+serve\b"),
    re.compile(r"^(?:\S+=\S+\s+)*(?:sh\s+)?scripts/serve-(?:replicas|llama)\.sh\b"),
    re.compile(r"^(?:\S+=\S+\s+)*python3?\s+-m\s+llama_cpp\.server\b"),
)
DEFAULT_PORT = 8080
"""The port of ``nlqo serve`` and the scripts when the command names none."""


@dataclass
class Command:
    text: str
    line: int
    shown: str | None = None
    """The output the page shows, or None when it shows none."""

    @property
    def expected_exit(self) -> int:
        return 2 if self.shown is not None and self.shown.lstrip().startswith("nlqo: error:") else 0

    @property
    def is_server(self) -> bool:
        return any(p.match(self.text) for p in SERVERS)


@dataclass
class Block:
    page: Path
    line: int
    language: str
    body: str
    marker: tuple[str, str] | None = None
    """(kind, reason) of the marker before the fence."""
    writes: str | None = None
    """The path of a "Write `PATH`:" line before the fence."""

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"

    @property
    def is_shell(self) -> bool:
        if self.language in SHELL_LANGUAGES:
            return True
        if self.language:
            return False
        first = first_command(self.body)
        return bool(first) and starts_with_command(first)

    @property
    def runs(self) -> bool:
        return self.is_shell and (self.marker is None or self.marker[0] != "not-run")

    @property
    def compares(self) -> bool:
        return self.runs and (self.marker is None or self.marker[0] != "output-not-compared")

    def commands(self) -> list[Command]:
        """The commands in order, each with its shown output (None when the block shows none)."""
        lines = self.body.splitlines()
        transcript = any(line.startswith("$ ") for line in lines)
        commands: list[Command] = []
        i = 0
        while i < len(lines):
            line, start = lines[i], i
            if transcript and not line.startswith("$ "):
                if commands:
                    prev = commands[-1]
                    prev.shown = line if prev.shown is None else prev.shown + "\n" + line
                i += 1
                continue
            if not transcript and (not line.strip() or line.lstrip().startswith("#")):
                i += 1
                continue
            text = line[2:] if transcript else line
            while text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text.rstrip()[:-1].rstrip() + " " + lines[i].strip()
            commands.append(Command(text.strip(), self.line + 1 + start))
            i += 1
        for command in commands:
            if command.shown is not None:
                command.shown = command.shown.rstrip("\n") or None
        if self.marker and self.marker[0] == "run-only":
            numbers = {int(n) for n in re.findall(r"\d+", self.marker[1].split(" ", 1)[0])}
            commands = [c for n, c in enumerate(commands, 1) if n in numbers]
        return commands


def first_command(body: str) -> str:
    """The first line of ``body`` that is not blank or a comment, with its ``$`` prompt ("" if none)."""
    return next((line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")), "")


def starts_with_command(line: str) -> bool:
    """Whether ``line`` reads as a shell command: a ``$`` prompt, or a first word that is a command.

    >>> [starts_with_command(s) for s in ("$ nlqo plan x", "nlqo ask q", "GGUF=x python -m y", "(umask 077)")]
    [True, True, True, True]
    >>> [starts_with_command(s) for s in ("nlqo: error: x", "q1 = (?a, 'p', ?b)", "cost = depth", "idx/")]
    [False, False, False, False]
    """
    if line.startswith("$ "):
        return True
    words = line.split()
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    if not words:
        return False
    word = words[0]
    if word.startswith("(") or word.startswith(("scripts/", "./", ".venv/")):
        return True
    return word in COMMANDS or (re.fullmatch(r"[\w.+-]+", word) is not None and shutil.which(word) is not None)


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order (a block indented under a list item loses its indent)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = []
    i = 0
    while i < len(lines):
        m = re.match(r"^( *)```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, language = m.groups()
        start = i
        body = []
        i += 1
        while i < len(lines) and not re.match(rf"^{indent}```\s*$", lines[i]):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        write = WRITE.search(before)
        found.append(
            Block(
                page,
                start + 1,
                language,
                "\n".join(body) + "\n",
                (marker.group(1), marker.group(2)) if marker else None,
                write.group(1) if write else None,
            )
        )
        i += 1
    return found


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


# The model and the ports


def with_test_model(argv: list[str]) -> tuple[list[str], bool]:
    """``nlqo``'s arguments with ``--model TEST_MODEL`` added where the command would use the default model.

    >>> with_test_model(["ask", "Q", "--index", "d"])
    (['ask', 'Q', '--index', 'd', '--model', 'smollm2-135m'], True)
    >>> with_test_model(["--verbose", "serve", "--index", "d", "--model=x"])[1], with_test_model(["plan", "f"])[1]
    (False, False)
    """
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in MODEL_COMMANDS or any(a == "--model" or a.startswith("--model=") for a in argv):
        return argv, False
    if "-h" in argv or "--help" in argv:
        return argv, False
    return [*argv, "--model", TEST_MODEL], True


SHIM = """#!{python}
# nlqo for tests/test_docs_run.py: the docs' commands that leave the model to nlqo's default run on the
# test model instead (tests/docs_run.py, with_test_model); everything else goes through unchanged.
import os, sys
sys.path.insert(0, {tests!r})
from docs_run import with_test_model
argv, changed = with_test_model(sys.argv[1:])
if changed and os.environ.get("DOCS_RUN_LOG"):
    with open(os.environ["DOCS_RUN_LOG"], "a", encoding="utf-8") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
os.execv({nlqo!r}, [{nlqo!r}, *argv])
"""


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


PORT_IN_COMMAND = re.compile(r"((?:localhost|127\.0\.0\.1|0\.0\.0\.0):|--port[ =])(8\d{3})\b")
PORT_IN_OUTPUT = re.compile(r"((?:localhost|127\.0\.0\.1|0\.0\.0\.0):|--port[ =])(\d{5})\b")


class Ports:
    """The pages' ports 8000-8999 moved by one offset to a range whose ports in use here are free."""

    def __init__(self, used: set[int]):
        used = {DEFAULT_PORT, *used}
        needed = used | {p + k for p in used for k in (1, 2, 3, 4, 100)}  # replicas at P+i, a model at P+100
        for base in range(20000 + os.getpid() % 200 * 100, 60000, 1000):
            if all(port_free(p - 8000 + base) for p in needed):
                self.offset = base - 8000
                return
        raise RuntimeError("no free range of ports")

    def command(self, text: str) -> str:
        """``text`` with its ports moved; a server without ``--port`` gets the moved default.

        >>> ports = Ports.__new__(Ports); ports.offset = 20000
        >>> ports.command("scripts/serve-llama.sh smollm2-135m"), ports.command("curl -s localhost:8081/v1/stats")
        ('scripts/serve-llama.sh --port 28080 smollm2-135m', 'curl -s localhost:28081/v1/stats')
        >>> ports.command("nlqo serve --index d   # http://127.0.0.1:8080/"), ports.back("on http://127.0.0.1:28080")
        ('nlqo serve --port 28080 --index d   # http://127.0.0.1:28080/', 'on http://127.0.0.1:8080')
        """
        moved = PORT_IN_COMMAND.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + self.offset}", text)
        if any(p.match(text) for p in SERVERS[:2]) and "--port" not in text:
            where = re.compile(r"^(.*?(?:\bnlqo\s+serve|serve-replicas\.sh|serve-llama\.sh))(?=\s|$)")
            moved = where.sub(rf"\1 --port {DEFAULT_PORT + self.offset}", moved, count=1)
        return moved

    def back(self, text: str) -> str:
        """``text`` (a command's output) with the moved ports moved back."""
        return PORT_IN_OUTPUT.sub(lambda m: m.group(1) + self.page_port(int(m.group(2))), text)

    def page_port(self, port: int) -> str:
        return str(port - self.offset) if 8000 <= port - self.offset <= 8999 else str(port)

    def of(self, text: str) -> int:
        """The (moved) port a server command listens on."""
        m = re.search(r"--port[ =](\d+)", text)
        return int(m.group(1)) if m else DEFAULT_PORT + self.offset


# Comparing


TIMING = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?=\s?(?:ms|s|seconds|tok/s|passages/s)\b)")
ESTIMATE = re.compile(r"\b(estimated|actual|q-error) \d+(?:\.\d+)?\b")
JSON_TIMING = re.compile(r'("\w*(?:_ms|_s|seconds)":\s*)-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?')
TMP_PATH = re.compile(r"/tmp/[^\s)\"',:]+")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def normalise(text: str, work: Path | None = None) -> str:
    """``text`` as compared: progress bars (``\\r``) and colours dropped, the working folder and temporary
    paths masked, timings (and EXPLAIN's seconds estimated against actual) masked, trailing blanks dropped.

    >>> normalise('Planning: dp, 0 LLM calls, 0.9 ms\\n{"execution_ms": 697}  \\n(logs in /tmp/nlqo-x-Ab3dEf)')
    'Planning: dp, 0 LLM calls, <N> ms\\n{"execution_ms": <N>}\\n(logs in /tmp/<PATH>)'
    """
    text = ANSI.sub("", text)
    text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))
    if work is not None:
        text = text.replace(str(work / "tmp"), "/tmp").replace(str(work), ".")
    text = TMP_PATH.sub("/tmp/<PATH>", text)
    text = JSON_TIMING.sub(r"\1<N>", text)
    text = TIMING.sub("<N>", text)
    text = ESTIMATE.sub(r"\1 <N>", text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def same(shown: str, real: str) -> bool:
    """Whether the real output matches the shown one (both normalised); ``...`` in the shown one matches anything."""
    return doctest.OutputChecker().check_output(shown + "\n", real + "\n", doctest.ELLIPSIS)


# Running


@dataclass
class Run:
    command: Command
    ran: str
    """The command as run (ports moved)."""
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    model_added: bool = False

    @property
    def printed(self) -> str:
        """What the transcript shows: stdout, else (a server, an error) stderr."""
        return self.stdout if self.stdout.strip() else self.stderr


@dataclass
class Session:
    """One page's run: its working folder, environment and running servers."""

    work: Path
    index: Path
    ports: Ports
    env: dict[str, str] = field(default_factory=dict)
    servers: dict[int, tuple[subprocess.Popen, Path, Path]] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)

    def __post_init__(self) -> None:
        for entry in ROOT.iterdir():  # the checkout as it is, but for its own demo index
            if entry.name not in (".git", ".nlqo", "tests"):
                (self.work / entry.name).symlink_to(entry)
        (self.work / ".nlqo").mkdir()
        shutil.copytree(self.index, self.work / ".nlqo" / "demo-index")
        if (FILES / "work").is_dir():
            shutil.copytree(FILES / "work", self.work, dirs_exist_ok=True)
        home = self.work / "home"
        if (FILES / "home").is_dir():
            shutil.copytree(FILES / "home", home)
        else:
            home.mkdir()
        (self.work / "tmp").mkdir()
        bin_dir = self.work / "bin"
        bin_dir.mkdir()
        venv_bin = Path(sys.executable).parent
        shim = bin_dir / "nlqo"
        shim.write_text(
            SHIM.format(python=sys.executable, tests=str(Path(__file__).parent), nlqo=str(venv_bin / "nlqo")),
            encoding="utf-8",
        )
        shim.chmod(0o755)
        real_home = Path(os.environ.get("HOME", str(Path.home())))
        cache = os.environ.get("NLQO_CACHE") or str(real_home / ".cache" / "nlqo")
        self.env = {
            **os.environ,
            "PATH": os.pathsep.join([str(bin_dir), str(venv_bin), os.environ.get("PATH", "")]),
            "HOME": str(home),
            "TMPDIR": str(self.work / "tmp"),
            "NLQO_CACHE": cache,
            # where scripts/build-llama-server.sh put llama-server (under the real HOME)
            "NLQO_LLAMA_SERVER_DIR": os.environ.get(
                "NLQO_LLAMA_SERVER_DIR", str(real_home / ".cache" / "nlqo" / "llama-server")
            ),
            "PYTHON": sys.executable,
            "DOCS_RUN_LOG": str(self.work / "model-added.log"),
        }
        self.env.pop("NLQO_PATH", None)
        self.env.setdefault("HF_HOME", str(real_home / ".cache" / "huggingface"))  # caches stay where they are

    def write(self, block: Block) -> None:
        """Write ``block`` where the page says (its "Write `PATH`:" line)."""
        assert block.writes
        home = Path(self.env["HOME"])
        path = home / block.writes[2:] if block.writes.startswith("~/") else self.work / block.writes
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.body, encoding="utf-8")

    def run(self, command: Command) -> Run:
        ran = self.ports.command(command.text)
        log = Path(self.env["DOCS_RUN_LOG"])
        before = log.read_text(encoding="utf-8").count("\n") if log.exists() else 0
        start = time.monotonic()
        if command.is_server:
            run = self.serve(command, ran)
        else:
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", ran],
                cwd=self.work,
                env=self.env,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=900,
                stdin=subprocess.DEVNULL,
            )
            run = Run(command, ran, done.returncode, done.stdout, done.stderr, time.monotonic() - start)
        run.model_added = (log.read_text(encoding="utf-8").count("\n") if log.exists() else 0) > before
        run.stdout, run.stderr = self.ports.back(run.stdout), self.ports.back(run.stderr)
        self.runs.append(run)
        return run

    def serve(self, command: Command, ran: str, timeout: float = 300.0) -> Run:
        """Start a server in the background; wait until its port answers (``code`` None: it did not)."""
        port = self.ports.of(ran)
        if port in self.servers:
            self.stop(port)
        n = len(self.runs)
        out, err = self.work / f"server-{n}.out", self.work / f"server-{n}.err"
        with out.open("wb") as o, err.open("wb") as e:
            process = subprocess.Popen(
                ["bash", "-c", ran],
                cwd=self.work,
                env=self.env,
                stdout=o,
                stderr=e,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.servers[port] = (process, out, err)
        start = time.monotonic()
        code: int | None = None
        while time.monotonic() - start < timeout:
            if process.poll() is not None:
                code = process.returncode
                break
            if healthy(port):
                code = 0
                deadline = time.monotonic() + 3
                while not err.read_text(errors="replace").strip() and time.monotonic() < deadline:
                    time.sleep(0.1)
                break
            time.sleep(0.5)
        return Run(
            command,
            ran,
            code,
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
            time.monotonic() - start,
        )

    def stop(self, port: int) -> None:
        """Stop the server on ``port``: SIGTERM to it (its own clean-up runs), then to its process group."""
        process, _, _ = self.servers.pop(port)
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if process.poll() is not None:
                break
            try:
                if wait == 30:
                    process.send_signal(sig)
                else:
                    os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        try:  # what the server started in the same group (replicas), once it has gone
            os.killpg(process.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        for pid_file in (self.work / "tmp").glob("nlqo-replicas-*/nginx.pid"):  # nginx leaves the group
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (ValueError, ProcessLookupError, OSError):
                pass

    def close(self) -> None:
        for port in list(self.servers):
            self.stop(port)


def healthy(port: int) -> bool:
    for path in ("/v1/health", "/health"):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            continue
    return False


def check(run: Run, work: Path, compare: bool) -> list[str]:
    """What is wrong with ``run`` (empty when nothing is)."""
    command = run.command
    where = f"line {command.line}: $ {command.text}" + (f" (run as: {run.ran})" if run.ran != command.text else "")
    if run.code is None:
        return [f"{where}: the server did not answer on its port\n{tail(run.stderr)}"]
    if run.code != command.expected_exit:
        return [f"{where}: exit {run.code}, the page implies {command.expected_exit}\n{tail(run.stderr)}"]
    if not compare or command.shown is None:
        return []
    shown = normalise(command.shown, work)
    candidates = [run.stdout, run.stderr, run.stderr + run.stdout]
    if any(same(shown, normalise(c, work)) for c in candidates):
        return []
    real = normalise(run.printed, work)
    diff = "\n".join(difflib.unified_diff(shown.split("\n"), real.split("\n"), "page", "real", lineterm=""))
    return [f"{where}: the output differs from the page's (normalised):\n{diff}"]


def tail(text: str, lines: int = 15) -> str:
    return textwrap.indent("\n".join(text.strip().split("\n")[-lines:]), "    ")


def transcript(block: Block, runs: list[Run]) -> str:
    """The real transcript of ``block``, in the page's form (a ``$`` line, then what it printed)."""
    out = [f"<!-- {block.where} -->", "```"]
    for run in runs:
        out.append(f"$ {run.command.text}")
        if run.model_added:
            out.append(f"# (run with --model {TEST_MODEL} added by the test's nlqo shim)")
        printed = run.printed.rstrip("\n")
        if printed:
            out.append(printed)
        if run.code != 0:
            out.append(f"# exit {run.code}")
    out.append("```")
    return "\n".join(out)


@dataclass
class PageRun:
    problems: list[str]
    """What is wrong, one entry a command."""
    transcript: str
    """The real transcript of every block run, in the page's form."""
    runs: list[Run]


def run_page(page: Path, work: Path, index: Path) -> PageRun:
    """Run every command block of ``page`` in order, in one session in ``work`` with a copy of ``index``."""
    page_blocks = blocks(page)
    used = {int(p) for b in page_blocks if b.runs for p in re.findall(r"\b(8\d{3})\b", b.body)}
    session = Session(work, index, Ports(used))
    problems: list[str] = []
    parts: list[str] = []
    try:
        for block in page_blocks:
            if block.writes and not block.is_shell:
                session.write(block)
                continue
            if not block.runs:
                continue
            runs = []
            for command in block.commands():
                run = session.run(command)
                runs.append(run)
                problems += [f"{block.where}, {p}" for p in check(run, work, block.compares)]
            parts.append(transcript(block, runs))
    finally:
        session.close()
    return PageRun(problems, "\n\n".join(parts) + "\n", session.runs)


def requirements(page: Path) -> list[str]:
    """The programs ``page``'s run blocks need that are not installed here."""
    text = "\n".join(c.text for b in blocks(page) if b.runs for c in b.commands())
    needed = {"jq": r"\|\s*jq\b", "nginx": r"serve-replicas\.sh", "curl": r"\bcurl\b", "chromium": r"^chromium\b"}
    return [name for name, pattern in needed.items() if re.search(pattern, text, re.M) and not shutil.which(name)]
