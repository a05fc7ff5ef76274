"""The response's parts change only their own state: whatever else they change, they change
through that part's verbs (ports.py), never by assigning its attributes.

Read from the source (an AST walk), so a new ``self.gw.router.disagg.failed += 1`` or
``session.link = ...`` in a response's part fails here, whichever test would have exercised it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import loopwire.gateway

GATEWAY = Path(loopwire.gateway.__file__).parent
# The parts a response runs through, and the servicer that builds their ports.
PARTS = ("relay.py", "failover.py", "response_output.py", "generation_start.py", "ports.py", "service.py",
         "generate_link.py", "disagg.py", "session.py")


def _owned_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names a function binds to an object it made (a call's result) or iterates over: its own."""
    owned: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            owned |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            owned |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return owned


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        found = [node.target]
    else:
        return []
    flat: list[ast.expr] = []
    for target in found:
        flat.extend(target.elts if isinstance(target, ast.Tuple) else [target])
    return flat


def foreign_writes(source: str) -> list[str]:
    """Attribute assignments whose object is neither ``self`` nor one the function made itself."""
    bad = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        owned = _owned_names(function) | {"self"}
        for node in ast.walk(function):
            if not isinstance(node, ast.stmt):
                continue
            for target in _targets(node):
                if not isinstance(target, ast.Attribute):
                    continue
                if not (isinstance(target.value, ast.Name) and target.value.id in owned):
                    bad.append(f"{function.name}:{node.lineno}: {ast.unparse(target)}")
    return bad


@pytest.mark.parametrize("module", PARTS)
def test_a_part_writes_only_its_own_state(module: str) -> None:
    assert foreign_writes((GATEWAY / module).read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("module", ("relay.py", "failover.py", "response_output.py", "generation_start.py"))
def test_a_response_sees_ports_not_the_gateway(module: str) -> None:
    """No ``.gw`` (the servicer whole) in a response's parts: they are handed ``ResponsePorts``."""
    tree = ast.parse((GATEWAY / module).read_text(encoding="utf-8"))
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "gw"] == []


def test_the_check_sees_the_writes_it_forbids() -> None:
    """The walk itself: writes through another part's attributes or a parameter are found, a
    function's own objects are not."""
    source = '''
class Run:
    def f(self, replica, router):
        self.gw.router.disagg.failed += 1
        replica.in_flight += 1
        router.model_digest = "x"
        link = self.session.link
        link.held_length, link.held_hash = 1, 2
        start = Start()
        start.kv_handle = b""
        self.phase = 1
        for ev in self.events:
            ev.logprobs = []
'''
    assert [w.split(": ")[1] for w in foreign_writes(source)] == [
        "self.gw.router.disagg.failed", "replica.in_flight", "router.model_digest", "link.held_length",
        "link.held_hash"]
