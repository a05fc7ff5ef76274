"""The references in docs/ that scripts/gen_docs.py writes from the code: committed ones match a
fresh run, a stale one is named by ``--check``, and each names everything its source has."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loopwire import cli
from loopwire.v1 import common_pb2, gateway_pb2, harness_pb2, inference_pb2

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_docs.py"
GENERATED = ("configuration.md", "metrics.md", "protocol.md")


def _generate(*args: str) -> subprocess.CompletedProcess[str]:
    # A variable the parsers read, set here on purpose: the generator must not document it as a default.
    env = {**os.environ, "LOOPWIRE_LISTEN": "10.9.9.9:1", "LOOPWIRE_HARNESS_PORT": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    done = _generate("--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("name", GENERATED)
def test_the_committed_reference_is_what_the_code_says(fresh: Path, name: str) -> None:
    committed = (ROOT / "docs" / name).read_text(encoding="utf-8")
    regenerated = (fresh / name).read_text(encoding="utf-8")
    if committed != regenerated:
        diff = "".join(difflib.unified_diff(committed.splitlines(True), regenerated.splitlines(True),
                                            f"docs/{name}", "regenerated", n=1))
        pytest.fail(f"docs/{name} is stale: run `python scripts/gen_docs.py` and commit it\n{diff[:4000]}")


def test_check_names_the_stale_file_only(fresh: Path, tmp_path: Path) -> None:
    for name in GENERATED:
        shutil.copy(fresh / name, tmp_path / name)
    stale = tmp_path / "metrics.md"
    stale.write_text(stale.read_text(encoding="utf-8").replace("loopwire.gateway.failovers", "gone"),
                     encoding="utf-8")
    done = _generate("--check", "--out", str(tmp_path))
    assert done.returncode == 1
    assert "metrics.md is stale" in done.stderr
    assert "configuration.md" not in done.stderr and "protocol.md" not in done.stderr
    assert "gone" in stale.read_text(encoding="utf-8")  # --check writes nothing


def _sections(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^## `([^`]+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S)}


def test_every_subcommand_and_flag_is_in_the_configuration(fresh: Path) -> None:
    sections = _sections((fresh / "configuration.md").read_text(encoding="utf-8"))
    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sections) == {"loopwire"} | {f"loopwire {name}" for name in sub.choices}
    for name, parser in sub.choices.items():
        parser = cli.service_parser(name) if name in cli.SERVICE_MODULES else parser
        flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
        first_cells = [re.split(r"(?<!\\)\|", row)[1] for row in sections[f"loopwire {name}"].splitlines()
                       if row.startswith("| `")]
        listed = {flag for cell in first_cells for flag in re.findall(r"`(--[\w-]+)", cell)}
        assert flags == listed, name
    # A default read from the environment is the code's own default, not the caller's.
    gateway = sections["loopwire gateway"]
    assert "| `--listen` | text | `127.0.0.1:50052` | `LOOPWIRE_LISTEN` |" in gateway
    assert "| `--harness-port` | int | `50051` |" in sections["loopwire up"]


def test_every_tenant_key_the_loader_reads_is_in_the_configuration(fresh: Path) -> None:
    text = (fresh / "configuration.md").read_text(encoding="utf-8")
    source = (ROOT / "services" / "loopwire" / "common" / "auth.py").read_text(encoding="utf-8")
    keys = set(re.findall(r"spec\.get\(\"(\w+)\"", source))
    assert keys and keys == set(re.findall(r"^\| `(\w+)` \|", text.split("## The `--auth-config` file")[1], re.M))


def test_every_declared_instrument_is_in_the_metrics(fresh: Path) -> None:
    text = (fresh / "metrics.md").read_text(encoding="utf-8")
    package = ROOT / "services" / "loopwire"
    declared = set()
    for path in package.rglob("*.py"):
        declared |= set(re.findall(r"create_\w+\(\s*\"([\w.]+)\"", path.read_text(encoding="utf-8")))
    from loopwire.gateway.metrics import COUNTERS

    declared |= {otel for otel, _, _ in COUNTERS.values()}
    listed = set(re.findall(r"^\| `([\w.]+)` \| (?:counter|histogram|gauge|observable gauge|up down counter)",
                            text, re.M))
    assert len(declared) > 20 and declared == listed
    # Names as a scrape shows them (tests/e2e/test_metrics_scrape.py reads these).
    assert "`loopwire_harness_turns_total`" in text
    assert "`gen_ai_server_time_to_first_token_seconds_{bucket,count,sum}`" in text


def test_every_service_message_field_and_enum_value_is_in_the_protocol(fresh: Path) -> None:
    text = (fresh / "protocol.md").read_text(encoding="utf-8")
    for module in (common_pb2, gateway_pb2, harness_pb2, inference_pb2):
        file = module.DESCRIPTOR
        for service in file.services_by_name.values():
            assert f"### service `{service.name}`" in text
            for method in service.methods:
                assert f"| `{method.name}` |" in text
        messages = list(file.message_types_by_name.values())
        while messages:
            message = messages.pop()
            messages += [m for m in message.nested_types if not m.GetOptions().map_entry]
            section = text.split(f"### message `{message.full_name.removeprefix('loopwire.v1.')}`\n")[1]
            section = section.split("\n### ")[0]
            for field in message.fields:
                assert f"| `{field.name}` | {field.number} |" in section, (message.full_name, field.name)
        for enum in file.enum_types_by_name.values():
            section = text.split(f"### enum `{enum.name}`\n")[1].split("\n### ")[0]
            for value in enum.values:
                assert f"| `{value.name}` | {value.number} |" in section
