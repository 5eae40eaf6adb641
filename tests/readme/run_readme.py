#!/usr/bin/env python3
"""Runs the README's Quick start as written and checks what it says each command prints.

What it runs: every ```sh and ```python block between "## Quick start" and the next "## "
heading, in order, as a new user would type them.

- A block whose command is `... up` is the server terminal: it runs in the background, from the
  repository root, until every other block has run; then it gets Ctrl-C (SIGINT) and must stop
  cleanly.
- Every other block runs in one long-lived bash (the second terminal, in an empty directory), so
  what one block exports the next one sees. A command that fails stops the run (`set -e`,
  `pipefail`). Python blocks run in that shell as `python3 -` (`sagemaker` ones with the SDK's
  interpreter, `$SAGEMAKER_SDK_PYTHON`).
- Stated output: comment lines right under a line of code (no blank line between) say what that
  code prints. Each must match a line of the block's output, in order; `…` stands for anything
  and runs of spaces for any spacing. Comments after code on the same line are not checked.

Nothing is substituted: the README's own addresses (127.0.0.1:8080) are used. So that the port
is free and nothing else on the machine is reached, the run happens in a network namespace of its
own (`unshare`), with only loopback; without namespaces it runs only if port 8080 is free.

The environment is the caller's, plus PATH holding `trainyard` (the server block's build in
target/debug, as the README suggests) and the clients (`aws`, `python3` with boto3) from
`--venv`, less every AWS_* variable and TRAINYARD_ENDPOINT: the README exports what it needs.

    tests/readme/run_readme.py --venv VENV [--readme README.md] [--timeout-s 1200]
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Quick start"
PORT = 8080
# How long one client block may take (the longest waits for a job to finish).
BLOCK_TIMEOUT_S = 180
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class Block:
    language: str
    line: int  # 1-based line of the opening fence in the README
    code: str
    stated: list[str] = field(default_factory=list)

    @property
    def is_server(self) -> bool:
        commands = [l for l in self.code.splitlines() if l.strip() and not l.lstrip().startswith("#")]
        return self.language == "sh" and len(commands) == 1 and re.search(r"\bup$", commands[0].strip()) is not None

    def where(self) -> str:
        return f"README.md line {self.line} ({self.language} block)"


def quick_start_blocks(readme: str) -> list[Block]:
    lines = readme.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == SECTION)
    except StopIteration:
        raise SystemExit(f"the README has no {SECTION!r} section")
    blocks: list[Block] = []
    i = start + 1
    while i < len(lines) and not lines[i].startswith("## "):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        language, opened = fence.group(1), i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise SystemExit(f"README.md line {opened + 1}: the code block is never closed")
        i += 1
        if language in ("sh", "python"):
            blocks.append(Block(language, opened + 1, "\n".join(body) + "\n", stated_output(body)))
    if not blocks:
        raise SystemExit(f"the README's {SECTION!r} section has no sh or python blocks")
    return blocks


def stated_output(body: list[str]) -> list[str]:
    """Comment lines directly under a line of code, in order."""
    stated, after_code = [], False
    for line in body:
        text = line.strip()
        if not text:
            after_code = False
        elif text.startswith("#"):
            if after_code:
                stated.append(text[1:].strip())
        else:
            after_code = True
    return stated


def matches(stated: str, line: str) -> bool:
    collapse = lambda s: " ".join(ANSI.sub("", s).split())
    regex = ".*".join(re.escape(part) for part in collapse(stated).split("…"))
    return re.fullmatch(regex, collapse(line)) is not None


def missing(stated: list[str], output: list[str]) -> list[str]:
    """The stated lines not found, in order, in the output (empty when all are)."""
    at = 0
    for n, want in enumerate(stated):
        while at < len(output) and not matches(want, output[at]):
            at += 1
        if at == len(output):
            return stated[n:]
        at += 1
    return []


class Lines:
    """Collects a pipe's lines on a thread, so reads can time out."""

    def __init__(self, pipe):
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.all: list[str] = []
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe):
        for raw in iter(pipe.readline, b""):
            self.queue.put(raw.decode(errors="replace").rstrip("\n"))
        self.queue.put(None)

    def next(self, deadline: float) -> str | None:
        """The next line, None at the end of the stream; TimeoutError past the deadline."""
        try:
            line = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError from None
        if line is not None:
            self.all.append(line)
        return line


def fail(message: str, output: list[str] | None = None) -> None:
    print(f"\nREADME check FAILED: {message}", file=sys.stderr)
    if output:
        print("its output (last 30 lines):", file=sys.stderr)
        for line in output[-30:]:
            print(f"  | {line}", file=sys.stderr)
    raise SystemExit(1)


def start_server(block: Block, env: dict, timeout_s: float) -> tuple[subprocess.Popen, Lines]:
    print(f"--- {block.where()}, in the background:\n{block.code.rstrip()}", flush=True)
    server = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-e", "-c", block.code],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )
    out = Lines(server.stdout)
    deadline = time.monotonic() + timeout_s
    while missing(block.stated, out.all):
        try:
            line = out.next(deadline)
        except TimeoutError:
            stop(server)
            fail(f"{block.where()} did not print {missing(block.stated, out.all)} within {timeout_s:.0f} s", out.all)
        if line is None:
            fail(f"{block.where()} exited with status {server.wait()} before printing "
                 f"{missing(block.stated, out.all)}", out.all)
    print(f"    (printed {block.stated})", flush=True)
    return server, out


def stop(process: subprocess.Popen) -> int:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            return process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    return process.wait()


class Terminal:
    """The second terminal: one bash that every client block is typed into."""

    def __init__(self, cwd: Path, env: dict):
        self.bash = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.out = Lines(self.bash.stdout)
        self.type("set -eo pipefail\n")
        self.count = 0

    def type(self, text: str) -> None:
        self.bash.stdin.write(text.encode())
        self.bash.stdin.flush()

    def run(self, block: Block) -> list[str]:
        self.count += 1
        marker = f"__readme_block_{self.count}_done__"
        code = block.code
        if block.language == "python":
            python = "\"$SAGEMAKER_SDK_PYTHON\"" if re.search(r"^\s*(from|import) sagemaker", code, re.M) else "python3"
            code = f"{python} - <<'__README_PYTHON__'\n{code}__README_PYTHON__\n"
        print(f"--- {block.where()}:\n{block.code.rstrip()}", flush=True)
        # In braces, so exports persist; stdin from /dev/null, so that no command reads the
        # blocks still to come.
        self.type(f"{{\n{code}\n}} </dev/null\necho {marker}\n")
        output: list[str] = []
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while True:
            try:
                line = self.out.next(deadline)
            except TimeoutError:
                stop(self.bash)
                fail(f"{block.where()} did not finish within {BLOCK_TIMEOUT_S} s", output)
            if line is None:
                status = self.bash.wait()
                fail(f"{block.where()} failed: a command exited with status {status}", output)
            if line == marker:
                break
            print(f"  | {line}", flush=True)
            output.append(line)
        if missing(block.stated, output):
            fail(f"{block.where()} did not print what the README says: {missing(block.stated, output)}", output)
        return output

    def close(self) -> None:
        if self.bash.poll() is None:
            self.bash.stdin.close()
            try:
                self.bash.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stop(self.bash)


def run(args) -> None:
    blocks = quick_start_blocks(Path(args.readme).read_text())
    servers = [b for b in blocks if b.is_server]
    if len(servers) != 1:
        fail(f"expected one server block (`... up`) in {SECTION!r}, found {len(servers)}")
    data_dir = ROOT / "trainyard-data"
    if data_dir.exists():
        fail(f"{data_dir} exists: the README starts from a fresh `trainyard up`; move it away first")
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", PORT)) == 0:
            fail(f"something already listens on 127.0.0.1:{PORT}")

    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(target / "debug"), str(Path(args.venv) / "bin"), env["PATH"]])
    env.pop("TRAINYARD_ENDPOINT", None)
    for name in [n for n in env if n.startswith("AWS_")]:
        del env[name]

    server, terminal = None, None
    try:
        server, server_out = start_server(servers[0], env, args.timeout_s)
        with tempfile.TemporaryDirectory(prefix="readme-terminal-") as cwd:
            terminal = Terminal(Path(cwd), env)
            for block in blocks:
                if not block.is_server:
                    terminal.run(block)
            terminal.close()
        if server.poll() is not None:
            fail(f"the server exited with status {server.returncode} during the run", server_out.all)
        status = stop(server)
        try:
            while server_out.next(time.monotonic() + 5) is not None:
                pass
        except TimeoutError:
            pass
        if status != 0:
            fail(f"the server exited with status {status} after Ctrl-C", server_out.all)
    finally:
        if terminal:
            terminal.close()
        if server:
            stop(server)
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"README check passed: {len(blocks)} blocks of {SECTION!r} ran as written.")


def in_own_network(argv: list[str]) -> bool:
    """Re-runs this script in a new network namespace with loopback up; False when impossible."""
    if os.environ.get("TRAINYARD_README_NETNS") == "1":
        return False
    unshare = shutil.which("unshare")
    if not unshare:
        return False
    flags = ["--net"] if os.geteuid() == 0 else ["--net", "--map-root-user"]
    if subprocess.run([unshare, *flags, "true"], capture_output=True).returncode != 0:
        return False
    inner = "ip link set lo up 2>/dev/null || ifconfig lo up; exec \"$@\""
    env = dict(os.environ, TRAINYARD_README_NETNS="1")
    status = subprocess.run([unshare, *flags, "sh", "-c", inner, "sh", sys.executable, *argv], env=env).returncode
    raise SystemExit(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", required=True, help="virtualenv with boto3 and the AWS CLI")
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    parser.add_argument("--timeout-s", type=float, default=1200,
                        help="how long the server block may take to start (it builds first)")
    args = parser.parse_args()
    if not in_own_network([os.path.abspath(__file__), *sys.argv[1:]]):
        if os.environ.get("TRAINYARD_README_NETNS") != "1":
            print("no network namespace available: running on this machine's loopback", flush=True)
        run(args)


if __name__ == "__main__":
    main()
