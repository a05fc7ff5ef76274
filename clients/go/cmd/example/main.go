// Command example runs one task on a loopwire harness and prints every event of the run, one
// line of proto3 canonical JSON each (protojson, compacted: protojson's own whitespace is
// deliberately unstable), like every other example.
//
// Usage: example [HARNESS_ADDRESS] [TASK]
//
// The address defaults to $LOOPWIRE_HARNESS, then 127.0.0.1:50051. The tenant API key comes
// from $LOOPWIRE_API_KEY and is sent as `authorization: Bearer <key>` (`loopwire up` prints a
// development key and leaves it in .state/dev-api-key). Without a task it replays a built-in
// two-turn session (a shell call, then an answer), which needs no model weights.
// It exits 0 once the run completes, 1 if it fails, 2 without a key.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	loopwirev1 "github.com/loopwire/loopwire/clients/go/gen/loopwire/v1"
)

func builtInReplay() *loopwirev1.StartTask {
	return &loopwirev1.StartTask{
		Task:     "Greet from the shell, then say you are done.",
		MaxTurns: 4,
		Replay: &loopwirev1.ReplayScript{
			Source: "go client example (built in)",
			Tools: []*loopwirev1.Tool{{
				Name:        "bash",
				Description: "Run a shell command",
				Parameters:  `{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`,
			}},
			Turns: []*loopwirev1.ReplayTurn{
				{
					Output: &loopwirev1.ReplayOutput{
						Text: "I will greet from the shell.",
						FunctionCalls: []*loopwirev1.FunctionCall{
							{CallId: "call_1", Name: "bash", Arguments: `{"command":"echo hello"}`},
						},
					},
					Followups: []*loopwirev1.Item{{Item: &loopwirev1.Item_FunctionCallOutput{
						FunctionCallOutput: &loopwirev1.FunctionCallOutput{CallId: "call_1", Output: "hello\n"},
					}}},
				},
				{Output: &loopwirev1.ReplayOutput{Text: "Done: the shell said hello."}},
			},
		},
	}
}

func main() {
	apiKey := strings.TrimSpace(os.Getenv("LOOPWIRE_API_KEY"))
	if apiKey == "" {
		fmt.Fprintln(os.Stderr, "LOOPWIRE_API_KEY is not set: export the harness API key (`loopwire up` leaves a development key in .state/dev-api-key)")
		os.Exit(2)
	}
	address := os.Getenv("LOOPWIRE_HARNESS")
	if address == "" {
		address = "127.0.0.1:50051"
	}
	if len(os.Args) > 1 {
		address = os.Args[1]
	}
	start := builtInReplay()
	if len(os.Args) > 2 {
		start = &loopwirev1.StartTask{Task: os.Args[2], MaxTurns: 8}
	}
	os.Exit(run(address, apiKey, start))
}

func run(address, apiKey string, start *loopwirev1.StartTask) int {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apiKey)
	stream, err := loopwirev1.NewHarnessServiceClient(conn).Run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	if err := stream.Send(&loopwirev1.RunRequest{Action: &loopwirev1.RunRequest_Start{Start: start}}); err != nil {
		fmt.Fprintln(os.Stderr, "send:", err)
		return 1
	}
	for {
		event, err := stream.Recv()
		if err == io.EOF {
			fmt.Fprintln(os.Stderr, "stream ended before the run completed")
			return 1
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "receive:", err)
			return 1
		}
		line, err := canonicalJSON(event)
		if err != nil {
			fmt.Fprintln(os.Stderr, "encode:", err)
			return 1
		}
		fmt.Println(line)
		switch event.Event.(type) {
		case *loopwirev1.RunResponse_Completed:
			_ = stream.CloseSend()
			return 0
		case *loopwirev1.RunResponse_Failed:
			return 1
		}
	}
}

// canonicalJSON is one line of the proto3 JSON mapping: protojson's field names, enum names and
// 64-bit integers as strings, with its randomized whitespace removed.
func canonicalJSON(event *loopwirev1.RunResponse) (string, error) {
	raw, err := protojson.Marshal(event)
	if err != nil {
		return "", err
	}
	var line bytes.Buffer
	if err := json.Compact(&line, raw); err != nil {
		return "", err
	}
	return line.String(), nil
}
