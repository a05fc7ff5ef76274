// Command example runs one task on a loopwire harness and prints every event of the run.
//
// Usage: example [HARNESS_ADDRESS] [TASK]
//
// The address defaults to $LOOPWIRE_HARNESS, then 127.0.0.1:50051. Without a task it replays
// a built-in two-turn session (a shell call, then an answer), which needs no model weights.
// It exits 0 once the run completes and 1 if it fails.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
	os.Exit(run(address, start))
}

func run(address string, start *loopwirev1.StartTask) int {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
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
		fmt.Println(protojson.MarshalOptions{}.Format(event))
		switch event.Event.(type) {
		case *loopwirev1.RunResponse_Completed:
			_ = stream.CloseSend()
			return 0
		case *loopwirev1.RunResponse_Failed:
			return 1
		}
	}
}
