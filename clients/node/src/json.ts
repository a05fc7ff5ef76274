// The proto3 JSON mapping of the messages @grpc/proto-loader hands out, so the TypeScript client
// prints events exactly as protojson, JsonFormat and json_format do: lowerCamelCase names, enums
// by name, 64-bit integers as strings, fields at their default value left out, bytes in base64.
// proto-loader's objects (defaults filled in, virtual oneof fields) say nothing of presence on
// their own, so the walk follows the protobufjs reflection of the same .proto files.
import * as path from "path";
import * as protobuf from "protobufjs";

const PROTO_DIR = path.join(__dirname, "..", "protos");
const FILES = ["loopwire/v1/harness.proto", "loopwire/v1/gateway.proto", "loopwire/v1/inference.proto"];
const LONGS = new Set(["int64", "uint64", "sint64", "fixed64", "sfixed64"]);

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

let root: protobuf.Root | undefined;

function loopwireRoot(): protobuf.Root {
  if (!root) {
    // keepCase: the reflection keeps the .proto names, from which both spellings are derived.
    root = new protobuf.Root();
    root.resolvePath = (_origin, target) => path.join(PROTO_DIR, target);
    root.loadSync(FILES, { keepCase: true });
    root.resolveAll();
  }
  return root;
}

/** protoc's json_name: underscores dropped, the letter after each one upper-cased. */
export function jsonName(protoName: string): string {
  return protoName.replace(/_+([^_])?/g, (_m, c?: string) => (c ? c.toUpperCase() : ""));
}

/** The key proto-loader uses for a field (protobufjs camelCase). */
function objectKey(protoName: string): string {
  return protoName.substring(0, 1) + protoName.substring(1).replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
}

/** Shortest decimal that reads back as the same float32 (what the other runtimes print). */
function float32(value: number): number {
  for (let digits = 1; digits < 10; digits++) {
    const shortest = Number(value.toPrecision(digits));
    if (Math.fround(shortest) === Math.fround(value)) return shortest;
  }
  return value;
}

function isDefault(field: protobuf.Field, value: unknown): boolean {
  if (field.resolvedType instanceof protobuf.Enum) {
    return value === 0 || value === field.resolvedType.valuesById[0];
  }
  if (LONGS.has(field.type)) return String(value) === "0";
  if (field.type === "bytes") return (value as Uint8Array).length === 0;
  return value === 0 || value === "" || value === false;
}

function scalar(field: protobuf.Field, value: unknown): Json {
  if (field.resolvedType instanceof protobuf.Enum) {
    return typeof value === "number" ? (field.resolvedType.valuesById[value] ?? value) : (value as string);
  }
  if (LONGS.has(field.type)) return String(value);
  if (field.type === "bytes") return Buffer.from(value as Uint8Array).toString("base64");
  if (field.type === "float" || field.type === "double") {
    const n = Number(value);
    if (Number.isNaN(n)) return "NaN";
    if (!Number.isFinite(n)) return n > 0 ? "Infinity" : "-Infinity";
    return field.type === "float" ? float32(n) : n;
  }
  return value as Json;
}

function element(field: protobuf.Field, value: unknown): Json {
  return field.resolvedType instanceof protobuf.Type
    ? message(field.resolvedType, value as Record<string, unknown>)
    : scalar(field, value);
}

function message(type: protobuf.Type, object: Record<string, unknown>): Json {
  const out: { [key: string]: Json } = {};
  for (const field of type.fieldsArray) {
    const value = object[objectKey(field.name)];
    if (value === undefined || value === null) continue;
    const key = jsonName(field.name);
    if (field.map) {
      const entries = Object.entries(value as Record<string, unknown>);
      if (entries.length) out[key] = Object.fromEntries(entries.map(([k, v]) => [k, element(field, v)]));
    } else if (field.repeated) {
      const items = value as unknown[];
      if (items.length) out[key] = items.map((v) => element(field, v));
    } else if (field.resolvedType instanceof protobuf.Type) {
      out[key] = message(field.resolvedType, value as Record<string, unknown>);
    } else if (field.partOf || !isDefault(field, value)) {
      // Oneof members (and proto3 `optional` fields) are present even at their default value.
      out[key] = scalar(field, value);
    }
  }
  return out;
}

/** One line of proto3 canonical JSON for a loopwire.v1 message as proto-loader decoded it. */
export function toProto3Json(typeName: string, object: object): string {
  const type = loopwireRoot().lookupType(typeName.startsWith(".") ? typeName : `.${typeName}`);
  return JSON.stringify(message(type, object as Record<string, unknown>));
}
