"""Every runnable example of README.md and docs/*.md, run as written against a live `make demo` stack.

A runnable example is a fenced block whose info string says so: ```` ```sh example token=support-agent ````
(or `python example …`); `token=` names the demo agent whose token the example finds in `$TOKEN`,
`exit=` the exit status the docs give it when it is not 0.
The next fenced block, ```` ```text output ````, is what the docs say it shows: the example's
output must match it whole, `…` standing for anything.

The stack is `python -m demo.run` — what `make demo` runs — as from a fresh clone: its own
GATEHOUSE_VAR_DIR (SQLite file, embedded broker, tokens file) and a free GATEHOUSE_DEMO_PORT,
none of the test suite's PostgreSQL/Redis settings, and stopped at the end as Ctrl-C stops it.
The examples run from a view of the checkout (links to its files) whose `var/` is the stack's;
what differs from a reader's terminal is only the address (`http://127.0.0.1:8000` becomes
this stack's) and GATEHOUSE_VAR_DIR, which tells the code resolving the real checkout where that `var/` is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from approvals.api import api
from approvals.errors import ERROR_STATUS
from tests.processes import free_port, wait_until

BASE_DIR = Path(__file__).resolve().parent.parent
DOCUMENTS = [BASE_DIR / "README.md", *sorted((BASE_DIR / "docs").glob("*.md"))]
DEMO_URL = "http://127.0.0.1:8000"  # the address the docs give; the test stack has its own port
FENCE = re.compile(r"^```(?P<info>[^`\n]*)\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
# A busy two-core machine migrates, seeds and starts four processes slowly; these are bounds, not expectations.
START_TIMEOUT = 300.0
EXAMPLE_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0
# The suite's own settings (PostgreSQL, Redis, DEBUG=0, …) would make the stack something `make demo` is not.
SUITE_ONLY = {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DJANGO_SETTINGS_MODULE"}


@dataclasses.dataclass(frozen=True)
class Example:
    """A runnable block of the docs and the output they say it shows."""

    document: str
    line: int
    language: str
    code: str
    agent: str | None
    expected: str
    exit_status: int

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"


def examples_of(path: Path) -> list[Example]:
    """Return the runnable examples of one Markdown file, each with the output block that follows it."""
    text = path.read_text()
    blocks = list(FENCE.finditer(text))
    found = []
    for index, block in enumerate(blocks):
        words = block["info"].split()
        if "example" not in words:
            continue
        line = text.count("\n", 0, block.start()) + 1
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        assert following is not None and following["info"].split() == ["text", "output"], (
            f"{path.name}:{line}: an example needs a ```text output block after it"
        )
        options = dict(word.split("=", 1) for word in words if "=" in word)
        found.append(
            Example(
                document=str(path.relative_to(BASE_DIR)),
                line=line,
                language=words[0],
                code=block["body"],
                agent=options.get("token"),
                expected=following["body"],
                exit_status=int(options.get("exit", 0)),
            )
        )
    return found


EXAMPLES = [example for path in DOCUMENTS for example in examples_of(path)]


def shows(expected: str, output: str) -> bool:
    """Return whether `output` is what `expected` says, `…` in it standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in expected.strip().split("…"))
    return re.fullmatch(pattern, output.strip(), re.DOTALL) is not None


def reader_environment() -> dict[str, str]:
    """Return this environment without the suite's settings: a reader's shell in the checkout."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in SUITE_ONLY and not name.startswith(("GATEHOUSE_", "DJANGO_", "PYTEST_"))
    }


class DemoStack:
    """`python -m demo.run` in a subprocess, on its own folder and port."""

    def __init__(self, folder: Path) -> None:
        self.checkout = checkout_view(folder)
        self.var_dir = folder / "var"
        self.folder = folder
        self.log_path = folder / "demo.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.runs: list[tuple[subprocess.Popen[bytes], Path]] = []  # every start: the process and its log

    def start(self, log_name: str = "demo.log") -> DemoStack:
        """Start the demo and return once the site answers and the worker consumes."""
        assert self.process is None or self.process.poll() is not None, "one demo at a time on one port"
        self.log_path = self.folder / log_name
        env = {**reader_environment(), "GATEHOUSE_VAR_DIR": str(self.var_dir), "GATEHOUSE_DEMO_PORT": str(self.port)}
        with self.log_path.open("wb") as log:
            # Its own session: only this test decides when it gets the Ctrl-C.
            self.process = subprocess.Popen(
                [sys.executable, "-m", "demo.run"],
                cwd=BASE_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.runs.append((self.process, self.log_path))
        wait_until(self.ready, timeout=START_TIMEOUT, interval=0.5)
        return self

    def ready(self) -> bool:
        assert self.process is not None and self.process.poll() is None, f"make demo exited:\n{self.log()[-3000:]}"
        return " ready." in self.log() and self.answers()

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as response:  # noqa: S310 — our own URL
                return response.status == 200
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def token(self, agent: str) -> str:
        return json.loads((self.var_dir / "demo-tokens.json").read_text())[agent]

    def reader_env(self, agent: str | None) -> dict[str, str]:
        """Return a reader's environment for the examples, `$TOKEN` holding `agent`'s token."""
        env = {
            **reader_environment(),
            # `var/` of this stack: what seed_demo and the agent loop read by default.
            "GATEHOUSE_VAR_DIR": str(self.var_dir),
            # The agent loop's default --url is the docs' address, which this stack replaces.
            "GATEHOUSE_MCP_URL": f"{self.url}/mcp",
        }
        if agent is not None:
            env["TOKEN"] = self.token(agent)
        return env

    def children(self, log: str | None = None) -> list[int]:
        """Return the pids of the processes honcho started (each leads its own process group)."""
        return [int(pid) for pid in re.findall(r"\| \w+ started \(pid=(\d+)\)", self.log() if log is None else log)]

    def interrupt(self) -> int:
        """Stop the demo as Ctrl-C does (SIGINT to demo.run); return its exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=STOP_TIMEOUT)

    def kill(self) -> None:
        """Kill whatever is left of every start (after a failure), each process group by its leader's pid."""
        for process, log in self.runs:
            for pid in [*self.children(log.read_text(errors="replace")), process.pid]:
                if self.started(pid):  # a pid of a process that ended may be someone else's by now
                    os.killpg(pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT)

    def started(self, pid: int) -> bool:
        """Return whether `pid` is a live process of this stack (its environment names this stack's folder)."""
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False
        return f"GATEHOUSE_VAR_DIR={self.var_dir}".encode() in environ and running(pid)


def checkout_view(folder: Path) -> Path:
    """Return `folder` made to look like the checkout (a link to each of its entries), but with no `var/`."""
    for entry in BASE_DIR.iterdir():
        if entry.name not in {"var", ".git"}:
            (folder / entry.name).symlink_to(entry)
    return folder


def running(pid: int) -> bool:
    """Return whether a process with this pid still runs (a zombie does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.fixture(scope="module")
def demo_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoStack]:
    stack = DemoStack(tmp_path_factory.mktemp("demo"))
    try:
        yield stack.start()
    finally:
        stack.kill()


def run(example: Example, stack: DemoStack) -> subprocess.CompletedProcess[str]:
    """Run one example in the checkout, as a reader would paste it, against `stack`."""
    code = example.code.replace(DEMO_URL, stack.url)
    args = ["bash", "-eo", "pipefail", "-c", code] if example.language == "sh" else [sys.executable, "-c", code]
    return subprocess.run(
        args,
        cwd=stack.checkout,
        env=stack.reader_env(example.agent),
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT,
        check=False,
    )


def readme_error_table() -> dict[str, int]:
    """Return the README's table of API error codes: code → HTTP status."""
    rows = re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \|", (BASE_DIR / "README.md").read_text(), re.MULTILINE)
    return {code: int(status) for code, status in rows}


def test_the_docs_mark_runnable_examples_in_the_readme_and_the_mcp_guide() -> None:
    documents = {example.document for example in EXAMPLES}
    assert {"README.md", "docs/mcp.md"} <= documents
    assert {example.language for example in EXAMPLES} == {"sh", "python"}


def test_an_ellipsis_in_a_documented_output_stands_for_any_text_and_the_rest_must_match() -> None:
    assert shows(
        '{"id": "…", "status": "succeeded", …}\nHTTP 201', '{"id": "7c", "status": "succeeded", "x": 1}\nHTTP 201\n'
    )
    assert not shows('{"id": "…", "status": "succeeded", …}', '{"id": "7c", "status": "failed", "x": "succeeded"}')
    assert not shows("HTTP 201", "HTTP 201\nand more")


def test_the_readme_error_table_is_the_api_error_catalogue() -> None:
    documented = readme_error_table()
    wanted = "\n".join(f"| `{code}` | {status} | … |" for code, status in ERROR_STATUS.items())
    assert documented == ERROR_STATUS, f"The README's error table should list exactly:\n{wanted}"
    # The OpenAPI document lists its codes from the same catalogue: "A stable machine-readable code: a, b, …".
    error_schema = api.get_openapi_schema()["components"]["schemas"]["ErrorOut"]["properties"]["error"]
    assert set(error_schema["description"].split(": ", 1)[1].split(", ")) == set(documented)


def test_the_readme_shows_a_live_refund_without_a_key_refused_as_invalid_arguments() -> None:
    refusal = [
        example for example in EXAMPLES if '"field": "idempotency_key", "problem": "is required"' in example.expected
    ]
    assert refusal and "emitir_estorno" in refusal[0].code and refusal[0].expected.strip().endswith("HTTP 422")


@pytest.mark.worker
@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_the_example_shows_what_the_docs_say(example: Example, demo_stack: DemoStack) -> None:
    result = run(example, demo_stack)

    assert result.returncode == example.exit_status, (
        f"{example} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    assert shows(example.expected, result.stdout), (
        f"{example} shows:\n{result.stdout}\nthe docs say:\n{example.expected}\n{result.stderr}"
    )


@pytest.mark.worker
def test_the_readme_mcp_example_with_an_agent_not_granted_the_tool_prints_the_refusal(demo_stack: DemoStack) -> None:
    mcp_example = next(example for example in EXAMPLES if example.document == "README.md" and "/mcp" in example.code)

    result = run(dataclasses.replace(mcp_example, agent="support-agent"), demo_stack)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "error: unknown_or_not_permitted_tool"


@pytest.mark.worker
def test_make_demo_prints_each_demo_agents_token(demo_stack: DemoStack) -> None:
    tokens = json.loads((demo_stack.var_dir / "demo-tokens.json").read_text())

    assert set(tokens) == {"support-agent", "box-office-agent", "visitor", "box-office-upstream"}
    assert all(f"{name:<17} {token}  " in demo_stack.log() for name, token in tokens.items())


@pytest.mark.worker
def test_ctrl_c_stops_the_whole_demo_stack_cleanly(demo_stack: DemoStack) -> None:
    children = demo_stack.children()
    assert len(children) >= 3  # web, worker, beat (and the demo agent)

    status = demo_stack.interrupt()

    assert status == 0, demo_stack.log()[-3000:]
    assert not [pid for pid in children if running(pid)]
    assert "SIGKILL" not in demo_stack.log(), demo_stack.log()[-3000:]


@pytest.mark.worker
def test_a_second_make_demo_keeps_and_prints_the_same_tokens(demo_stack: DemoStack) -> None:
    tokens = json.loads((demo_stack.var_dir / "demo-tokens.json").read_text())
    if demo_stack.process is not None and demo_stack.process.poll() is None:  # run without the Ctrl-C test
        demo_stack.interrupt()

    demo_stack.start(log_name="demo-again.log")

    assert json.loads((demo_stack.var_dir / "demo-tokens.json").read_text()) == tokens
    assert all(f"{name:<17} {token}  " in demo_stack.log() for name, token in tokens.items())
    assert "password: gatehouse" in demo_stack.log()
    assert demo_stack.interrupt() == 0
