"""Each role installs only what it imports: pyproject's extras are checked against the code.

The gateway runs on the base dependencies; the inference service adds ``engine`` (the reference
engine's numba kernels, GGUF files), the harness, the api and the PostgreSQL store add theirs
(``harness``, ``api``, ``postgres``), plots add ``bench``. Three checks, independent of each other:

* every import in a module (at module level or inside a function) names a distribution in the
  dependency closure of its role, read from pyproject.toml and the installed metadata;
* every module of a role imports in a fresh interpreter in which the import system refuses
  every package outside that closure — so an import reaching another role's module (say, the
  gateway importing something of the harness that needs ``mcp``) fails here, not in a pod;
* the base set is minimal: what only the engine needs is not in it, and no role but inference
  loads numba or llvmlite (208 MB) or gguf when it starts.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
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
# Imports inside a function that only the inference role reaches: reading a GGUF model file (the
# other roles get a model's tokenizer from a replica's ModelInfo, never from the file).
LOAD_ONLY = {"common/model_def.py": ("engine",)}
# What only the reference engine and GGUF loading need: never in the base set.
ENGINE_ONLY = ("numba", "llvmlite", "gguf", "threadpoolctl")


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
        return ("engine", "harness", "api", "postgres")
    if rel == "replay.py":  # plots only when asked (checked by find_spec before the run)
        return ("bench",)
    if rel == "harness/store/postgres.py":
        return ("harness", "postgres")
    if rel in ("inference/trtllm_engine.py", "inference/trtllm_requests.py"):  # the engine, and its requests' mapping
        return ("trtllm",)
    top = rel.split("/")[0]
    return {"harness": ("harness",), "api": ("api",), "inference": ("engine",)}.get(top, ())


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
        allowed = allowed_distributions(role_of(rel) + LOAD_ONLY.get(rel, ()))
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
    "inference": (("engine",), ("common", "inference"), ("inference",)),
    "harness": (("harness",), ("common", "harness"), ("harness",)),
    "api": (("api",), ("common", "api"), ("api",)),
}


def _role_modules(extras: tuple[str, ...], packages: tuple[str, ...]) -> list[str]:
    modules = []
    for package in packages:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            rel = path.relative_to(PACKAGE).as_posix()
            if role_of(rel) != extras and role_of(rel) != ():
                continue  # a module of another extra inside the tree (the trtllm engine, the PostgreSQL store)
            modules.append("loopwire." + rel.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
    return modules


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_imports_with_only_its_own_packages(role: str) -> None:
    import json

    extras, packages, services = ROLES[role]
    modules = _role_modules(extras, packages)
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, json.dumps(_importable_names(extras)), json.dumps(modules), *services],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"imported {len(modules)}" in done.stdout


def test_the_base_set_leaves_out_what_only_the_engine_needs() -> None:
    base = {_name(r) for r in _project()["dependencies"]}
    assert not base & set(ENGINE_ONLY), sorted(base & set(ENGINE_ONLY))
    assert not _closure(frozenset(base)) & {"numba", "llvmlite"}, "a base dependency pulls in numba"
    assert set(_extra("engine")) | {"llvmlite"} >= set(ENGINE_ONLY)
    assert "engine" in _project()["optional-dependencies"]["all"][0]  # `loopwire up` runs inference
    # `make setup` installs requirements.lock, which must hold the engine (CI's tests run it).
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK_EXTRAS :=.*\bengine\b", makefile, re.M)
    lock = (ROOT / "requirements.lock").read_text()
    assert "--extra=engine" in lock and all(re.search(rf"^{name}==", lock, re.M) for name in ENGINE_ONLY)


_LOADED = r"""
import importlib, json, sys
for module in json.loads(sys.argv[1]):
    importlib.import_module(module)
from loopwire import cli
for service in sys.argv[2:]:
    cli.service_parser(service).format_help()
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


@pytest.mark.parametrize("role", ["gateway", "harness", "api"])
def test_a_role_without_the_engine_loads_none_of_it(role: str) -> None:
    """Every module of the role imported, and its server's flags built: numba, llvmlite, gguf and
    threadpoolctl are still absent from sys.modules (installed here or not)."""
    import json

    extras, packages, services = ROLES[role]
    modules = _role_modules(extras, packages)
    done = subprocess.run([sys.executable, "-c", _LOADED, json.dumps(modules), *services],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert not loaded & set(ENGINE_ONLY), sorted(loaded & set(ENGINE_ONLY))


def test_inference_without_the_engine_extra_says_which_extra_to_install(monkeypatch):
    """Started without numba/gguf/threadpoolctl, the inference service names the extra in one line."""
    from loopwire.inference import server

    assert server.ENGINE_EXTRA == set(ENGINE_ONLY)

    def missing(options):
        raise ModuleNotFoundError("No module named 'threadpoolctl'", name="threadpoolctl")

    monkeypatch.setattr(server, "build_engine", missing)
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    args = parser.parse_args([])
    with pytest.raises(SystemExit) as exit_:
        asyncio.run(server.serve_from_args(args))
    message = str(exit_.value)
    assert "loopwire[engine]" in message and "threadpoolctl" in message and "\n" not in message
