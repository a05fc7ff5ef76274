#!/usr/bin/env python3
"""Writes docs/configuration.md, docs/metrics.md and docs/protocol.md from the code itself.

The CLI reference comes from the argparse parsers, the metrics reference from the instruments
the services declare and record (through an SDK MeterProvider with in-memory and Prometheus
readers), the protocol reference from the protos' descriptors with their comments. Nothing is
kept by hand, so a doc that disagrees with the code is stale: ``--check`` says which, and
``tests/unit/test_generated_docs.py`` fails on it.

    python scripts/gen_docs.py            # write the three files into docs/
    python scripts/gen_docs.py --check    # exit 1, naming each stale file
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "services" / "loopwire"
PROTOS = ROOT / "protos"
HOW = "edit the code, not this file, then run `python scripts/gen_docs.py`"
# Read while the parsers are built: a value set in the caller's environment must not become a
# documented default.
ENV_PREFIXES = ("LOOPWIRE_", "OTEL_")


def _clean_environment() -> None:
    for key in [k for k in os.environ if k.startswith(ENV_PREFIXES)]:
        del os.environ[key]


# -- markdown ---------------------------------------------------------------------------------


def _md(text: str, cell: bool = False) -> str:
    """Text as markdown: code spans kept, ``< > *`` outside them escaped; in a table cell on one
    line."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()) if cell else text)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            part = part.replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*")
        out.append(part)
    return "".join(out)


def _code(value: str) -> str:
    return f"`{value}`" if "`" not in value else f"`` {value} ``"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return re.sub(r"(?<!\\)\|", r"\\|", text)  # a bar in a cell (in a code span too) ends it otherwise

    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(map(cell, row)) + " |" for row in rows), ""]


# -- configuration.md -------------------------------------------------------------------------


def _commands() -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of every subcommand; a service's parser is its own full one."""
    from loopwire import cli

    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    out = [("", top.description or "", top)]
    for name, parser in sub.choices.items():
        out.append((name, helps[name], cli.service_parser(name) if name in cli.SERVICE_MODULES else parser))
    return out


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)]


def _env_name(action: argparse.Action) -> str:
    flag = next((s for s in action.option_strings if s.startswith("--")), "")
    return "LOOPWIRE_" + flag[2:].upper().replace("-", "_") if flag else ""


def _probes(action: argparse.Action) -> tuple[str, str]:
    """Two values for the flag's variable, one of which its default would not already be
    (a switch's variable may say "1" or "0" for on)."""
    d = action.default
    if action.nargs == 0 or isinstance(d, bool):
        return "1", "0"
    if action.choices:
        other = next(str(c) for c in action.choices if c != d)
        return other, other
    if isinstance(d, int) or action.type is int:
        return str((d or 0) + 7), str((d or 0) + 7)
    if isinstance(d, float) or action.type is float:
        return str((d or 0) + 1.5), str((d or 0) + 1.5)
    return "probe-value", "probe-value"


def _reads_env(name: str, actions: list[argparse.Action]) -> dict[str, str]:
    """The variable each flag's default reads, found by setting it and building the parser again."""
    found: dict[str, str] = {}
    for i in (0, 1):
        probes = {_env_name(a): _probes(a)[i] for a in actions if _env_name(a)}
        os.environ.update(probes)
        try:
            again = {a.dest: a.default for a in _options(next(p for n, _, p in _commands() if n == name))}
        finally:
            for key in probes:
                del os.environ[key]
        found |= {a.dest: _code(_env_name(a)) for a in actions if _env_name(a) and again.get(a.dest) != a.default}
    from loopwire import cli

    if name in cli.SERVICE_MODULES:  # a service may read a variable when it starts instead of in the default
        source = Path(inspect.getfile(importlib.import_module(cli.SERVICE_MODULES[name]))).read_text(encoding="utf-8")
        late = {"LOOPWIRE_" + m.upper().replace("-", "_")
                for m in re.findall(r"\b_?env(?:_int)?\(\s*[\"']([\w-]+)[\"']", source)}
        late |= set(re.findall(r"environ\.get\(\s*[\"'](LOOPWIRE_\w+)[\"']", source))
        found |= {a.dest: _code(_env_name(a)) + " (read at start)" for a in actions
                  if a.dest not in found and _env_name(a) in late}
    return found


def _kind(action: argparse.Action) -> str:
    if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):
        return "switch"
    if isinstance(action, argparse._AppendAction):
        return "repeatable"
    if action.choices:
        return "one of " + ", ".join(_code(str(c)) for c in action.choices)
    value = action.default
    if callable(action.type) and isinstance(value, str):
        value = action.type(value)  # as argparse converts a string default: the type's own result
    kind = action.type if action.type in (int, float, str) else type(value)
    name = {int: "int", float: "float", list: "list"}.get(kind, "text")  # type: ignore[call-overload]
    return {"+": f"{name}, one or more", "?": f"{name}, optional", "*": f"{name}, any number"}.get(
        str(action.nargs), name)


def _default(action: argparse.Action) -> str:
    d = action.default
    if isinstance(action, argparse.BooleanOptionalAction):
        return "on" if d else "off"
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return "on" if bool(d) != isinstance(action, argparse._StoreFalseAction) else "off"
    if d is None or d == [] or d == "" or d == argparse.SUPPRESS:
        return "(none)"
    if isinstance(d, bool):
        return _code(str(d).lower())
    if isinstance(d, list):
        return ", ".join(_code(str(v)) for v in d)
    return _code(str(d))


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return _code(str(action.metavar or action.dest)) + " (positional)"
    metavar = " " + str(action.metavar) if action.metavar and action.nargs != 0 else ""
    return ", ".join(_code(s + (metavar if s.startswith("--") else "")) for s in action.option_strings)


def configuration() -> str:
    from loopwire.common import auth, telemetry

    lines = ["# Configuration reference", "", f"<!-- Generated by scripts/gen_docs.py: {HOW}. -->", "",
             "Every `loopwire` subcommand with every flag, as its argparse parser defines it. **Env** is the "
             "variable the flag's default reads (found by setting it); a flag given on the command line wins. "
             "Service subcommands take their flags after the name (`loopwire gateway --help`).", ""]
    for name, help_text, parser in _commands():
        title = f"loopwire {name}".strip()
        lines += [f"## `{title}`", "", _md(help_text) + ("." if help_text and not help_text.endswith(".") else ""), ""]
        if parser.epilog:
            lines += [_md(parser.epilog), ""]
        env = _reads_env(name, _options(parser))
        untitled = [g for g in parser._action_groups if g.title in ("positional arguments", "options")]
        groups = [("", [a for g in untitled for a in g._group_actions])]
        groups += [(g.title or "", g._group_actions) for g in parser._action_groups if g not in untitled]
        formatter = argparse.HelpFormatter(parser.prog)  # the help as written, without "(default: ...)"
        for title, group in groups:
            actions = [a for a in group if a in _options(parser)]
            if not actions:
                continue
            if title:
                lines += [f"**{_md(title)}**", ""]
            rows = [[_flag(a), _kind(a), _default(a), env.get(a.dest, ""),
                     _md(formatter._expand_help(a) if a.help else "", cell=True)] for a in actions]
            lines += _table(["Flag", "Type", "Default", "Env", "Help"], rows)
    lines += ["## Environment read outside the flags", "",
              f"`{telemetry.ENDPOINT_ENV}`: when set, every service exports its traces over OTLP (gRPC) to it; "
              "unset, no tracer provider is built.", ""]
    lines += _auth_config(auth)
    return "\n".join(lines)


def _auth_config(auth: Any) -> list[str]:
    """The ``--auth-config`` file: the keys ``Authenticator.from_file`` reads from a tenant's table,
    with the type and default its code gives them."""
    tree = ast.parse(inspect.getsource(auth))
    casts = {id(n.args[0]): n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
             and isinstance(n.func, ast.Name) and n.func.id in ("int", "float", "str")}
    reads = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call) and _spec_get(n)),
                   key=lambda n: (n.lineno, n.col_offset))
    holders = {f.name: cls for cls in (auth.Limits, auth.Policy) for f in dataclasses.fields(cls)}
    rows = []
    for node in reads:
        key, default = ast.literal_eval(node.args[0]), ast.unparse(node.args[1])
        kind = {"int": "int", "float": "number", "str": "text"}.get(
            casts.get(id(node), ""), "list of text" if default == "[]" else "text")
        holder = holders.get(key)
        rows.append([_code(key), kind, _code(default), _code(holder.__name__) if holder else "API key hashes"])
    doc = inspect.getdoc(auth) or ""
    return ["## The `--auth-config` file", "",
            "Read by `loopwire gateway`, `loopwire harness` and `loopwire api` (`Authenticator.from_file` in "
            "`services/loopwire/common/auth.py`). Its module documentation:", "",
            "```text", *doc.splitlines(), "```", "",
            f"Keys of a tenant's table (`tenants.<name>`); safety modes: "
            f"{', '.join(_code(m) for m in auth.SAFETY_MODE_NAMES)}.", "",
            *_table(["Key", "Type", "Default", "Held in"], rows),
            *(f"`{cls.__name__}`: {_md(inspect.getdoc(cls) or '')}\n" for cls in (auth.Limits, auth.Policy))]


def _spec_get(node: ast.AST | None) -> bool:
    """``spec.get("<key>", <default>)``: how the loader reads a tenant's key."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "spec" and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant))


# -- metrics.md -------------------------------------------------------------------------------


@dataclasses.dataclass
class Instrument:
    name: str
    kind: str
    unit: str
    description: str


class _RecordingMeter:
    """A real SDK meter that also notes each instrument declared on it."""

    def __init__(self, meter: Any) -> None:
        self._meter = meter
        self.declared: dict[str, Instrument] = {}

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._meter, attr)
        if not attr.startswith("create_"):
            return target

        def create(name: str, *args: Any, **kwargs: Any) -> Any:
            kind = attr.removeprefix("create_").replace("_", " ")
            self.declared[name] = Instrument(name, kind, kwargs.get("unit", ""), kwargs.get("description", ""))
            return target(name, *args, **kwargs)
        return create


def _calls_in(service: str, method: str) -> bool:
    """Whether a module of the service's package calls ``.<method>(``."""
    return any(f".{method}(" in p.read_text(encoding="utf-8") for p in (PACKAGE / service).rglob("*.py"))


def _shared_recorders() -> dict[str, Callable[[Any], None]]:
    """A call of each recorder of ``telemetry.Metrics`` (the instruments every service declares)."""
    from loopwire.common.telemetry import Metrics
    from loopwire.v1 import common_pb2

    calls: dict[str, Callable[[Any], None]] = {
        "record_generation": lambda m: m.record_generation(
            common_pb2.Usage(input_tokens=100, cached_input_tokens=60, output_tokens=20, verification_steps=8),
            common_pb2.Timings(ttft_us=20_000, decode_us=200_000), "model", common_pb2.FINISH_REASON_STOP),
        "record_response": lambda m: m.record_response(
            common_pb2.Timings(tokens_tokenized=40, bytes_received=900), "model"),
        "set_queue_depth": lambda m: m.set_queue_depth(2, "replica-0"),
    }
    public = {n for n, _ in inspect.getmembers(Metrics, inspect.isfunction) if not n.startswith("_")}
    if public != calls.keys():
        raise SystemExit(f"gen_docs: give scripts/gen_docs.py a sample call of telemetry.Metrics."
                         f"{', '.join(sorted(public ^ calls.keys()))} (or drop it)")
    return calls


def _exercise(service: str, meter: _RecordingMeter) -> None:
    """Declare and record what ``service`` does: the shared recorders its code calls, its own instruments."""
    from loopwire.common.telemetry import Metrics

    shared = Metrics(meter)  # type: ignore[arg-type]
    for method, call in _shared_recorders().items():
        if _calls_in(service, method):
            call(shared)
    if service == "gateway":
        from loopwire.gateway.metrics import GatewayMetrics

        gw = GatewayMetrics()
        for f in dataclasses.fields(gw):
            if not f.name.startswith("_"):
                gw.add(f.name, "model")
    if service == "harness":
        from loopwire.common.errors import Code
        from loopwire.harness import metrics as harness_metrics
        from loopwire.v1 import harness_pb2

        hm = harness_metrics.metrics()
        turn = harness_pb2.RunResponse()
        turn.turn_completed.profile.wall_us = 1_500_000
        turn.turn_completed.profile.harness_ttft_us = 30_000
        turn.turn_completed.profile.usage.input_tokens = 500
        failed = harness_pb2.RunResponse()
        failed.failed.error.code = Code.Value(Code.keys()[-1])
        completed, approval = harness_pb2.RunResponse(), harness_pb2.RunResponse()
        completed.completed.SetInParent()
        approval.approval_requested.SetInParent()
        for event in (turn, completed, failed, approval):
            hm.observe(event, "model")
        hm.tool_finished("shell", 0.2, False)
        harness_metrics.watch(lambda: 1, lambda: 0)


@contextmanager
def _meter_for(service: str) -> Iterator[tuple[_RecordingMeter, Any, Any]]:
    """A MeterProvider as a service's (the same histogram views), its meter as the process's."""
    import prometheus_client
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from loopwire.common.telemetry import INSTRUMENTATION_NAME, histogram_views, meters

    registry = prometheus_client.CollectorRegistry()
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory, PrometheusMetricReader(registry=registry)],
                             views=histogram_views())
    meter = _RecordingMeter(provider.get_meter(INSTRUMENTATION_NAME))
    meters.STATE.meter = meter  # type: ignore[assignment]
    try:
        yield meter, memory, registry
    finally:
        meters.STATE.reset()
        provider.shutdown()


def metrics() -> str:
    from loopwire import cli

    lines = ["# Metrics reference", "", f"<!-- Generated by scripts/gen_docs.py: {HOW}. -->", "",
             "Every OpenTelemetry instrument each service records, with the name a Prometheus scrape of "
             "`--metrics-port` shows. Found by running the services' own recorders on an SDK MeterProvider "
             "with the services' histogram views.", ""]
    declared: dict[str, Instrument] = {}
    recorded: set[str] = set()
    scope_labels: set[str] = set()
    target_labels: set[str] = set()
    for service in cli.SERVICE_MODULES:
        with _meter_for(service) as (meter, memory, registry):
            _exercise(service, meter)
            data = memory.get_metrics_data()
            points = {m.name: m for rm in (data.resource_metrics if data else [])
                      for sm in rm.scope_metrics for m in sm.metrics}
            families = list(registry.collect())
        declared |= meter.declared
        recorded |= points.keys()
        lines += [f"## {service}", ""]
        if not points:
            lines += [f"`loopwire {service}` records no instruments of its own (its endpoint serves only "
                      "`target_info`).", ""]
            continue
        rows, buckets = [], []
        for name in sorted(points):
            inst, data = meter.declared[name], points[name].data
            attrs = sorted({k for p in data.data_points for k in p.attributes})
            family = _family(name, inst.description, families)
            attr_labels = {re.sub(r"[^A-Za-z0-9_]", "_", a) for a in attrs}
            for s in family.samples:
                (target_labels if family.name == "target" else scope_labels).update(set(s.labels) - attr_labels - {"le"})
            samples = sorted({s.name for s in family.samples})
            prom = _code(samples[0]) if len(samples) == 1 else _code(
                family.name + "_{" + ",".join(s.removeprefix(family.name + "_") for s in samples) + "}")
            rows.append([_code(name), inst.kind, _code(inst.unit), ", ".join(map(_code, attrs)) or "(none)",
                         prom, _md(inst.description, cell=True)])
            if inst.kind == "histogram":
                bounds = data.data_points[0].explicit_bounds
                buckets.append([_code(name), ", ".join(str(int(b)) if b == int(b) else f"{b:g}" for b in bounds)])
        lines += _table(["Instrument", "Kind", "Unit", "Attributes", "Prometheus", "Description"], rows)
        if buckets:
            lines += ["Histogram bucket boundaries (upper bounds; `+Inf` follows):", "",
                      *_table(["Instrument", "Boundaries"], buckets)]
    silent = sorted(set(declared) - recorded)
    if silent:
        raise SystemExit(f"gen_docs: no service recorded {', '.join(silent)}: make scripts/gen_docs.py "
                         "exercise the code that records it")
    scope_labels.discard("service_name")
    lines += ["## Labels on every sample", "",
              "Attributes become labels with dots as underscores. The exporter adds "
              f"{', '.join(map(_code, sorted(scope_labels)))} to every sample.", ""]
    return "\n".join(lines)


def _family(name: str, description: str, families: list[Any]) -> Any:
    """The Prometheus family the exporter made of one instrument (its name plus a unit suffix)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", name)
    found = [f for f in families if (f.name == base or f.name.startswith(base + "_")) and f.documentation == description]
    if len(found) != 1:
        raise SystemExit(f"gen_docs: {len(found)} Prometheus families for {name}")
    return found[0]


# -- protocol.md ------------------------------------------------------------------------------

# FileDescriptorProto / DescriptorProto / ServiceDescriptorProto / EnumDescriptorProto field numbers
# of the paths in SourceCodeInfo.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MESSAGE_FIELD, MESSAGE_NESTED, MESSAGE_ENUM, MESSAGE_ONEOF = 2, 3, 4, 8
SERVICE_METHOD, ENUM_VALUE = 2, 2


def _descriptors() -> Any:
    from google.protobuf import descriptor_pb2

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        files = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / "loopwire" / "v1").glob("*.proto"))
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTOS}", "--include_source_info",
                        f"--descriptor_set_out={out}", *files], check=True, cwd=PROTOS)
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return fds


def _comment(comments: dict[tuple[int, ...], str], path: tuple[int, ...]) -> str:
    return comments.get(path, "")


def _type_name(field: Any, messages: dict[str, Any]) -> str:
    from google.protobuf import descriptor_pb2

    f = descriptor_pb2.FieldDescriptorProto
    if field.type in (f.TYPE_MESSAGE, f.TYPE_ENUM):
        full = field.type_name.lstrip(".")
        entry = messages.get(full)
        if entry is not None and entry.options.map_entry:
            return f"map&lt;{_type_name(entry.field[0], messages)}, {_type_name(entry.field[1], messages)}&gt;"
        return _link(full)
    return f.Type.Name(field.type).removeprefix("TYPE_").lower()


def _link(full: str) -> str:
    if full.startswith("loopwire."):
        return f"[`{full.removeprefix('loopwire.v1.')}`](#{full.replace('.', '-').lower()})"
    return _code(full)


def _anchor(full: str) -> str:
    return f'<a id="{full.replace(".", "-").lower()}"></a>'


def protocol() -> str:
    fds = _descriptors()
    messages: dict[str, Any] = {}

    def collect(prefix: str, msgs: Any) -> None:
        for m in msgs:
            messages[f"{prefix}.{m.name}"] = m
            collect(f"{prefix}.{m.name}", m.nested_type)

    for fd in fds.file:
        collect(fd.package, fd.message_type)
    lines = ["# Protocol reference", "", f"<!-- Generated by scripts/gen_docs.py from protos/loopwire/v1/: {HOW}. -->",
             "", "Every service, RPC, message, field and enum of the `loopwire.v1` contracts, with the comments "
             "the protos carry (read from their descriptors).", ""]
    for fd in sorted(fds.file, key=lambda f: f.name):
        # A comment block apart from any element, before the file's first declaration, speaks of the file.
        locations = fd.source_code_info.location
        first = min((loc for loc in locations if len(loc.path) == 2 and loc.path[0] in (FILE_MESSAGE, FILE_ENUM,
                     FILE_SERVICE)), key=lambda loc: tuple(loc.span), default=None)
        comments: dict[tuple[int, ...], str] = {}
        header = ""
        for loc in locations:
            detached = [c.strip() for c in loc.leading_detached_comments if c.strip()]
            if loc is first:
                header, detached = "\n\n".join(detached), []
            text = "\n\n".join(c.strip() for c in (*detached, loc.leading_comments, loc.trailing_comments)
                                if c.strip())
            if text:
                comments[tuple(loc.path)] = "\n".join(line.strip() for line in text.splitlines())
        header = "\n".join(line.strip() for line in header.splitlines())
        lines += [f"## protos/{fd.name}", ""]
        syntax = (fd.syntax or "proto2")
        lines += [f"Package `{fd.package}`, {syntax}" + (
            f"; imports {', '.join(_code('protos/' + d) for d in fd.dependency)}" if fd.dependency else "") + ".", ""]
        if header:
            lines += [_md(header), ""]
        for i, svc in enumerate(fd.service):
            lines += _service(fd.package, svc, comments, (FILE_SERVICE, i))
        for i, msg in enumerate(fd.message_type):
            lines += _message(fd.package, msg, comments, (FILE_MESSAGE, i), messages)
        for i, enum in enumerate(fd.enum_type):
            lines += _enum(fd.package, enum, comments, (FILE_ENUM, i))
    return "\n".join(lines)


def _service(package: str, svc: Any, comments: dict, path: tuple[int, ...]) -> list[str]:
    full = f"{package}.{svc.name}"
    lines = [_anchor(full), f"### service `{svc.name}`", ""]
    if _comment(comments, path):
        lines += [_md(_comment(comments, path)), ""]
    rows = []
    for i, m in enumerate(svc.method):
        req = ("stream " if m.client_streaming else "") + _link(m.input_type.lstrip("."))
        resp = ("stream " if m.server_streaming else "") + _link(m.output_type.lstrip("."))
        rows.append([_code(m.name), req, resp, _md(_comment(comments, (*path, SERVICE_METHOD, i)), cell=True)])
    return lines + _table(["RPC", "Request", "Response", "Description"], rows)


def _message(prefix: str, msg: Any, comments: dict, path: tuple[int, ...], messages: dict) -> list[str]:
    if msg.options.map_entry:
        return []
    full = f"{prefix}.{msg.name}"
    lines = [_anchor(full), f"### message `{full.removeprefix('loopwire.v1.')}`", ""]
    if _comment(comments, path):
        lines += [_md(_comment(comments, path)), ""]
    rows = []
    for i, f in enumerate(msg.field):
        label = "repeated" if f.label == f.LABEL_REPEATED else ""
        if f.HasField("oneof_index"):
            oneof = msg.oneof_decl[f.oneof_index]
            label = "optional" if f.proto3_optional else f"oneof `{oneof.name}`"
        if f.label == f.LABEL_REPEATED and messages.get(f.type_name.lstrip("."), msg).options.map_entry:
            label = ""
        if f.options.deprecated:
            label = (label + ", deprecated").lstrip(", ")
        rows.append([_code(f.name), str(f.number), _type_name(f, messages), label,
                     _md(_comment(comments, (*path, MESSAGE_FIELD, i)), cell=True)])
    if rows:
        lines += _table(["Field", "Number", "Type", "Label", "Description"], rows)
    else:
        lines += ["No fields.", ""]
    for i, o in enumerate(msg.oneof_decl):
        text = _comment(comments, (*path, MESSAGE_ONEOF, i))
        if text and not o.name.startswith("_"):
            lines += [f"oneof `{o.name}`: {_md(text, cell=True)}", ""]
    for i, nested in enumerate(msg.nested_type):
        lines += _message(full, nested, comments, (*path, MESSAGE_NESTED, i), messages)
    for i, enum in enumerate(msg.enum_type):
        lines += _enum(full, enum, comments, (*path, MESSAGE_ENUM, i))
    return lines


def _enum(prefix: str, enum: Any, comments: dict, path: tuple[int, ...]) -> list[str]:
    full = f"{prefix}.{enum.name}"
    lines = [_anchor(full), f"### enum `{full.removeprefix('loopwire.v1.')}`", ""]
    if _comment(comments, path):
        lines += [_md(_comment(comments, path)), ""]
    rows = [[_code(v.name), str(v.number), _md(_comment(comments, (*path, ENUM_VALUE, i)), cell=True)]
            for i, v in enumerate(enum.value)]
    return lines + _table(["Value", "Number", "Description"], rows)


# -- main -------------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[], str]] = {
    "configuration.md": configuration, "metrics.md": metrics, "protocol.md": protocol}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="directory to write (or check) them in")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale file")
    args = parser.parse_args(argv)
    _clean_environment()
    sys.path.insert(0, str(ROOT / "services"))  # the package, also when it is not installed
    stale = []
    for name, generate in GENERATORS.items():
        text = generate().rstrip("\n") + "\n"
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{path} is stale: run `python scripts/gen_docs.py` and commit it", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
