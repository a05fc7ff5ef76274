// Runs one task on a loopwire harness and prints every event of the run, one line of proto3
// canonical JSON each (see json.ts), like every other example.
//
// Usage: node dist/example.js [HARNESS_ADDRESS] [TASK]
// The address defaults to $LOOPWIRE_HARNESS, then 127.0.0.1:50051. The tenant API key comes from
// $LOOPWIRE_API_KEY and is sent as `authorization: Bearer <key>` (`loopwire up` prints a
// development key and leaves it in .state/dev-api-key). Without a task it replays a built-in
// two-turn session (a shell call, then an answer), which needs no model weights.
// Exits 0 once the run completes, 1 if it fails, 2 without a key.
import { authMetadata, harnessClient, RunResponse, StartTask, toProto3Json } from "./index";

function builtInReplay(): StartTask {
  return {
    task: "Greet from the shell, then say you are done.",
    maxTurns: 4,
    replay: {
      source: "node client example (built in)",
      tools: [
        {
          name: "bash",
          description: "Run a shell command",
          parameters: '{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}',
        },
      ],
      turns: [
        {
          output: {
            text: "I will greet from the shell.",
            functionCalls: [{ callId: "call_1", name: "bash", arguments: '{"command":"echo hello"}' }],
          },
          followups: [{ functionCallOutput: { callId: "call_1", output: "hello\n" } }],
        },
        { output: { text: "Done: the shell said hello." } },
      ],
    },
  };
}

function main(): void {
  const apiKey = (process.env.LOOPWIRE_API_KEY ?? "").trim();
  if (!apiKey) {
    console.error("LOOPWIRE_API_KEY is not set: export the harness API key (`loopwire up` leaves a development key in .state/dev-api-key)");
    process.exit(2);
  }
  const address = process.argv[2] ?? process.env.LOOPWIRE_HARNESS ?? "127.0.0.1:50051";
  const start: StartTask = process.argv[3] ? { task: process.argv[3], maxTurns: 8 } : builtInReplay();
  const client = harnessClient(address);
  const call = client.Run(authMetadata(apiKey), { deadline: Date.now() + 5 * 60_000 });
  call.on("data", (event: RunResponse) => {
    console.log(toProto3Json("loopwire.v1.RunResponse", event));
    const kind = event.event;
    if (kind === "completed" || kind === "failed") {
      // The harness may keep the stream open for more requests: the run is over, so leave.
      client.close();
      process.exit(kind === "completed" ? 0 : 1);
    }
  });
  call.on("error", (err: Error) => {
    console.error("run:", err.message);
    process.exit(1);
  });
  call.on("close", () => {
    console.error("stream ended before the run completed");
    process.exit(1);
  });
  call.write({ start });
}

main();
