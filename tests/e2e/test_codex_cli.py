"""Codex CLI out of the box: the profile the docs give (examples/codex/config.toml and
instructions.md, copied unchanged into a fresh CODEX_HOME) against `loopwire up` as a user starts
it: the bundled SmolLM2-135M-Instruct on the reference engine, with its 8,192-token window.

Codex asks for a shell command, runs it in its own sandbox, sends the output back, and finishes.
The model's words are recorded turns (a 135M model cannot drive Codex reliably): the api that
`loopwire up` starts reads them from LOOPWIRE_REPLAY, and `--allow-replay` lets the gateway take
them. Everything else is real: Codex's prompts are rendered with the model's template, tokenized,
checked against the window and prefilled by the engine. The only change to the profile is the
api's port (`-c model_providers.loopwire.base_url=...`): port 8080 may be taken here."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from required import missing

from loopwire.mesh import free_port, wait_http_healthy

# The real model prefills Codex's prompts on the CPU: minutes on a busy machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
CODEX = ROOT / "tests" / "codex" / "node_modules" / ".bin" / "codex"
PROFILE = ROOT / "examples" / "codex"
WINDOW = 8192  # SmolLM2-135M-Instruct's trained context
# The profile's first prompt leaves two thirds of the window to the session (Codex's own is ~9,200).
FIRST_PROMPT_BUDGET = WINDOW // 3
NOTE = "hello from codex\n"
COMMAND = "printf 'hello from codex\\n' > note.txt && cat note.txt"
FINAL = "Wrote note.txt."
REPLAY = [
    {"function_calls": [{"call_id": "call_note", "name": "exec_command", "arguments": json.dumps({"cmd": COMMAND})}]},
    {"text": FINAL},
]
# The api's line for each finished response, as `loopwire up` prints it.
RESPONSE_LINE = re.compile(r"POST /v1/responses tenant=dev id=\S+ status=(\w+) .*? in=(\d+)")


@dataclass
class Up:
    api: str
    key: str
    log: Path

    def responses(self) -> list[tuple[str, int]]:
        return [(m[1], int(m[2])) for m in RESPONSE_LINE.finditer(self.log.read_text(errors="replace"))]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    if not CODEX.exists():
        missing("Codex CLI not installed: scripts/install_tools.sh runs npm ci in tests/codex")
    base = tmp_path_factory.mktemp("codex-up")
    replay = base / "replay.json"
    replay.write_text(json.dumps(REPLAY))
    ports = {name: free_port() for name in ("harness", "gateway", "inference", "api")}
    log = base / "up.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loopwire.cli", "up", "--state-dir", str(base / "state"), "--allow-replay",
             *(arg for name, port in ports.items() for arg in (f"--{name}-port", str(port)))],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "LOOPWIRE_REPLAY": str(replay), "COLUMNS": "400"})
    try:
        api = f"127.0.0.1:{ports['api']}"
        wait_http_healthy(api, timeout=300, proc=proc)  # the default model loads first
        yield Up(api, (base / "state" / "dev-api-key").read_text().strip(), log)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def codex_exec(up: Up, home: Path, work: Path, task: str) -> subprocess.CompletedProcess[str]:
    """``codex exec`` in ``work`` with the config in ``home``: sandboxed writes to ``work`` only."""
    tmp = home.parent / "tmp"  # Codex links its sandbox helper only where CODEX_HOME is outside TMPDIR
    tmp.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home.parent), "CODEX_HOME": str(home), "TMPDIR": str(tmp),
           "LOOPWIRE_API_KEY": up.key}
    return subprocess.run(
        [str(CODEX), "exec", "--skip-git-repo-check", "--sandbox", "workspace-write", "--json",
         "--output-last-message", str(home.parent / "last-message.txt"),
         "-c", f'model_providers.loopwire.base_url="http://{up.api}/v1"', task],
        cwd=work, env=env, capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL)


def wait_for_log(up: Up, done: Callable[[str], bool]) -> str:
    """The api logs a response once its stream has closed, which may be just after Codex exits."""
    deadline = time.monotonic() + 30
    while not done(text := up.log.read_text(errors="replace")) and time.monotonic() < deadline:
        time.sleep(0.1)
    return text


def test_codex_runs_a_command_with_the_documented_profile(up: Up, tmp_path: Path) -> None:
    home, work = tmp_path / "codex-home", tmp_path / "work"
    work.mkdir()
    shutil.copytree(PROFILE, home)
    out = codex_exec(up, home, work, "Write 'hello from codex' into note.txt.")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:] + up.log.read_text(errors="replace")[-3000:]
    # What Codex did: the command ran (in Codex's sandbox) and wrote the file; the turn ended
    # with the model's final message once the command's output had gone back to it.
    assert (work / "note.txt").read_text() == NOTE
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    commands = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    assert [(c["exit_code"], c["aggregated_output"]) for c in commands] == [(0, NOTE)], commands
    assert (tmp_path / "last-message.txt").read_text().strip() == FINAL
    assert events[-1]["type"] == "turn.completed", events[-1]
    # Two responses, both served by the real window: the call, then the answer to its output.
    wait_for_log(up, lambda log: len(RESPONSE_LINE.findall(log)) >= 2)
    responses = up.responses()
    assert [status for status, _ in responses] == ["completed", "completed"], up.log.read_text()[-3000:]
    first, second = (tokens for _, tokens in responses)
    assert first <= FIRST_PROMPT_BUDGET, f"Codex's first prompt grew to {first} tokens"
    assert second > first  # the call and the command's output came back in the second prompt

    # Codex's own defaults (the configuration without this profile) do not fit the window, and
    # are told so plainly (the api's 400 context_length_exceeded), not cut.
    bare = tmp_path / "bare-home"
    bare.mkdir()
    (bare / "config.toml").write_text(
        "\n".join(line for line in (home / "config.toml").read_text().splitlines()
                  if line.startswith(("model =", "model_provider =", "[model_providers", "name =", "base_url =",
                                      "env_key =", "wire_api =")))
        + "\nrequest_max_retries = 0\nstream_max_retries = 0\n")
    refused = codex_exec(up, bare, work, "Say hello.")
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert "ran out of room in the model's context window" in refused.stdout, refused.stdout[-3000:]
    refusal = "POST /v1/responses tenant=dev -> 400 context_length_exceeded"
    assert refusal in wait_for_log(up, lambda log: refusal in log), up.log.read_text(errors="replace")[-3000:]
