// Typed loopwire.v1 clients on @grpc/grpc-js. The .proto files ship with the package and are
// loaded at run time by @grpc/proto-loader, so installing needs no protoc download.
import * as path from "path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import type { ProtoGrpcType as HarnessProto } from "./generated/harness";
import type { ProtoGrpcType as GatewayProto } from "./generated/gateway";
import type { ProtoGrpcType as InferenceProto } from "./generated/inference";

export type { HarnessServiceClient } from "./generated/loopwire/v1/HarnessService";
export type { GatewayServiceClient } from "./generated/loopwire/v1/GatewayService";
export type { InferenceServiceClient } from "./generated/loopwire/v1/InferenceService";
export type { RunRequest } from "./generated/loopwire/v1/RunRequest";
export type { RunResponse__Output as RunResponse } from "./generated/loopwire/v1/RunResponse";
export type { StartTask } from "./generated/loopwire/v1/StartTask";
export { toProto3Json } from "./json";

const PROTO_DIR = path.join(__dirname, "..", "protos");

// Same options as the type generator (see package.json "generate"), so the types match.
const LOADER_OPTIONS: protoLoader.Options = {
  includeDirs: [PROTO_DIR],
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

type LoopwireProto = HarnessProto & GatewayProto & InferenceProto;

export function loadLoopwire(): LoopwireProto["loopwire"]["v1"] {
  const definition = protoLoader.loadSync(
    ["loopwire/v1/harness.proto", "loopwire/v1/gateway.proto", "loopwire/v1/inference.proto"],
    LOADER_OPTIONS,
  );
  const loaded = grpc.loadPackageDefinition(definition) as unknown as LoopwireProto;
  return loaded.loopwire.v1;
}

// Call metadata carrying a tenant API key: the harness wants `authorization: Bearer <key>`.
export function authMetadata(apiKey: string): grpc.Metadata {
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${apiKey}`);
  return metadata;
}

export function harnessClient(address: string) {
  const v1 = loadLoopwire();
  return new v1.HarnessService(address, grpc.credentials.createInsecure());
}
