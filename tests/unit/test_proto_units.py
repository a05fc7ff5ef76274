"""Times in the contract are plain integers with their unit in the name (the contract's choice
over google.protobuf.Duration/Timestamp: one varint on the per-token path, no message to build):
every numeric field that holds a duration or a point in time says its unit in its name, and a
point in time says in its comment that it counts from the Unix epoch."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from loopwire.v1 import common_pb2, gateway_pb2, harness_pb2, inference_pb2

MODULES = (common_pb2, gateway_pb2, harness_pb2, inference_pb2)
NUMERIC = {
    FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT,
}
TIME_WORDS = re.compile(r"(^|_)(time|deadline|timeout|latency|ttl|duration|delay|retention|lease|interval|"
                        r"elapsed|wait|at|age|ttft|wall|overhead|us|ms|seconds)(_|$)")
UNIT = re.compile(r"_(ns|us|ms|s|seconds)$")
PROTOS = Path(__file__).resolve().parents[2] / "protos" / "loopwire" / "v1"


def _fields(message: Descriptor):
    yield from ((message, f) for f in message.fields)
    for nested in message.nested_types:
        yield from _fields(nested)


def _time_fields() -> list[tuple[Descriptor, FieldDescriptor]]:
    found = []
    for module in MODULES:
        for message in module.DESCRIPTOR.message_types_by_name.values():
            found += [(m, f) for m, f in _fields(message) if f.type in NUMERIC and TIME_WORDS.search(f.name)]
    return found


def test_the_contract_has_time_fields_to_check() -> None:
    assert len(_time_fields()) >= 20


def test_every_time_field_names_its_unit() -> None:
    missing = [f"{m.full_name}.{f.name}" for m, f in _time_fields() if not UNIT.search(f.name)]
    assert not missing, f"say the unit in the name (_us, _ms, _s/_seconds): {missing}"


def _comment(message: Descriptor, field: FieldDescriptor) -> str:
    """The field's leading comment, read from the .proto source (the compiled descriptors carry none)."""
    text = (PROTOS / Path(message.file.name).name).read_text()
    for match in re.finditer(rf"((?:\s*//[^\n]*\n)+)\s*[\w.]+ {field.name} = {field.number};", text):
        return " ".join(line.strip().removeprefix("//").strip() for line in match.group(1).strip().splitlines())
    raise AssertionError(f"no comment found for {message.full_name}.{field.name}")


def test_points_in_time_count_from_the_epoch() -> None:
    points = [(m, f) for m, f in _time_fields() if re.search(r"(^|_)at_", f.name)]
    assert points, "the contract has timestamps (ToolCallBegan.started_at_us, Session.created_at_ms)"
    wrong = [f"{m.full_name}.{f.name}" for m, f in points if "Unix epoch" not in _comment(m, f)]
    assert not wrong, f"say 'since the Unix epoch' in the comment of {wrong}"


def test_the_descriptor_set_needs_no_well_known_time_types() -> None:
    """If Duration/Timestamp are ever adopted, this test goes with the convention above."""
    for module in MODULES:
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        assert not {"google/protobuf/duration.proto", "google/protobuf/timestamp.proto"} & set(proto.dependency)
