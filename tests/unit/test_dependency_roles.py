"""Each role installs only what it imports: pyproject's extras are checked against the code.

The gateway and the inference service run on the base dependencies; the harness, the api and the
PostgreSQL store add their extras (``harness``, ``api``, ``postgres``), plots add ``bench``.
Two checks, independent of each other:

* every import in a module (at module level or inside a function) names a distribution in the
  dependency closure of its role, read from pyproject.toml and the installed metadata;
* every module of a role imports in a fresh interpreter in which the import system refuses
  every package outside that closure — so an import reaching another role's module (say, the
  gateway importing something of the harness that needs ``mcp``) fails here, not in a pod.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "services" / "loopwire"
# Imported only by the TensorRT-LLM engine, from NVIDIA's index on GPU machines (extra trtllm).
NOT_INSTALLABLE_HERE = {"tensorrt_llm": "tensorrt-llm", "torch": "torch"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


@cache
def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _extra(name: str) -> list[str]:
    return [_name(r) for r in _project()["optional-dependencies"][name] if not _name(r) == "loopwire"]


@cache
def _closure(roots: frozenset[str]) -> frozenset[str]:
    """Distribution names reachable from ``roots`` through installed requirements (no extras)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return frozenset(seen)


def role_of(rel: str) -> tuple[str, ...]:
    """The extras a module of ``services/loopwire`` may use beyond the base dependencies."""
    if rel == "mesh.py":  # `loopwire up` starts every role
        return ("harness", "api", "postgres")
    if rel == "replay.py":  # plots only when asked (checked by find_spec before the run)
        return ("bench",)
    if rel == "harness/store/postgres.py":
        return ("harness", "postgres")
    if rel == "inference/trtllm_engine.py":
        return ("trtllm",)
    top = rel.split("/")[0]
    return {"harness": ("harness",), "api": ("api",)}.get(top, ())


def allowed_distributions(extras: tuple[str, ...]) -> frozenset[str]:
    roots = {_name(r) for r in _project()["dependencies"]}
    for extra in extras:
        roots |= set(_extra(extra))
    return _closure(frozenset(roots))


@cache
def _module_owners() -> dict[str, frozenset[str]]:
    """Import name -> distributions providing it; ``google.x`` resolved one level down."""
    owners: dict[str, set[str]] = {}
    for dist in md.distributions():
        name = _name(dist.metadata["Name"])
        for file in dist.files or []:
            parts = file.parts
            if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] == "..":
                continue
            top = parts[0].removesuffix(".py")
            if top.split(".")[0] != top or not top.isidentifier():
                top = top.split(".")[0]
            key = f"google.{parts[1].removesuffix('.py')}" if top == "google" and len(parts) > 1 else top
            owners.setdefault(key, set()).add(name)
    return {k: frozenset(v) for k, v in owners.items()}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _third_party(module: str) -> str | None:
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in ("loopwire", "__future__"):
        return None
    return ".".join(module.split(".")[:2]) if top == "google" else top


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "v1" not in p.relative_to(PACKAGE).parts)


def test_every_import_is_declared_for_its_role() -> None:
    owners = _module_owners()
    wrong = []
    for path in _modules():
        rel = path.relative_to(PACKAGE).as_posix()
        allowed = allowed_distributions(role_of(rel))
        for module in sorted(_imports(path)):
            key = _third_party(module)
            if key is None:
                continue
            if key in NOT_INSTALLABLE_HERE:
                if "trtllm" not in role_of(rel):
                    wrong.append(f"{rel}: {module} outside the trtllm engine")
                continue
            provided = owners.get(key) or owners.get(key.split(".")[0], frozenset())
            if not provided:
                wrong.append(f"{rel}: {module} is provided by no installed distribution")
            elif not provided & allowed:
                extras = ", ".join(role_of(rel)) or "none"
                wrong.append(f"{rel}: {module} (from {', '.join(sorted(provided))}) is not a dependency of its "
                             f"role (extras: {extras})")
    assert not wrong, "\n".join(wrong)


def test_the_trtllm_extra_is_the_version_the_engine_names() -> None:
    (pin,) = _project()["optional-dependencies"]["trtllm"]
    assert re.fullmatch(r"tensorrt-llm==[0-9][0-9a-z.]+", pin), pin


def test_test_only_packages_are_in_dev_only() -> None:
    base = {_name(r) for r in _project()["dependencies"]}
    roles = base.union(*(_extra(e) for e in ("harness", "api", "postgres", "bench")))
    for name in ("safetensors", "hypothesis", "pytest", "openai", "openai-agents", "ruff", "mypy"):
        assert name in _extra("dev"), name
        assert name not in roles, f"{name} is only used by tests but a role installs it"
    imported = {_third_party(m) for p in _modules() for m in _imports(p)}
    assert "safetensors" not in imported and "hypothesis" not in imported


# A fresh interpreter whose import system refuses every top-level package outside the closure.
_BLOCKED_IMPORT = r'''
import importlib, importlib.abc, importlib.machinery, json, site, sys
allowed, modules = set(json.loads(sys.argv[1])), json.loads(sys.argv[2])
installed = tuple(site.getsitepackages())
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        parts = name.split(".")
        if len(parts) > (2 if parts[0] == "google" else 1) or name in allowed or parts[0] in allowed:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        where = [spec.origin or ""] + list(spec.submodule_search_locations or []) if spec else []
        if any(w.startswith(installed) for w in where) and parts[0] != "loopwire" and name != "google":
            raise ModuleNotFoundError(f"No module named {name!r} (not installed for this role)", name=name)
        return None
sys.meta_path.insert(0, Refuse())
for module in modules:
    importlib.import_module(module)
from loopwire import cli
for service in sys.argv[3:]:
    cli.service_parser(service).format_help()
print("imported", len(modules))
'''


def _importable_names(extras: tuple[str, ...]) -> list[str]:
    allowed = allowed_distributions(extras)
    return sorted(key for key, dists in _module_owners().items() if dists & allowed)


ROLES = {
    "gateway": ((), ("common", "gateway"), ("gateway",)),
    "inference": ((), ("common", "inference"), ("inference",)),
    "harness": (("harness",), ("common", "harness"), ("harness",)),
    "api": (("api",), ("common", "api"), ("api",)),
}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_imports_with_only_its_own_packages(role: str) -> None:
    import json

    extras, packages, services = ROLES[role]
    modules = []
    for package in packages:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            rel = path.relative_to(PACKAGE).as_posix()
            if role_of(rel) != extras and role_of(rel) != ():
                continue  # a module of another extra inside the tree (the trtllm engine, the PostgreSQL store)
            dotted = "loopwire." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            modules.append(dotted)
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, json.dumps(_importable_names(extras)), json.dumps(modules), *services],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"imported {len(modules)}" in done.stdout
