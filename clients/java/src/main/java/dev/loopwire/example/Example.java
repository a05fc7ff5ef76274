package dev.loopwire.example;

import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.util.JsonFormat;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.StreamObserver;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import loopwire.v1.Common.FunctionCall;
import loopwire.v1.Common.FunctionCallOutput;
import loopwire.v1.Common.Item;
import loopwire.v1.Common.ReplayOutput;
import loopwire.v1.Common.Tool;
import loopwire.v1.Harness.ReplayScript;
import loopwire.v1.Harness.ReplayTurn;
import loopwire.v1.Harness.RunRequest;
import loopwire.v1.Harness.RunResponse;
import loopwire.v1.Harness.StartTask;
import loopwire.v1.HarnessServiceGrpc;

/**
 * Runs one task on a loopwire harness and prints every event of the run, one line of proto3
 * canonical JSON each (JsonFormat without insignificant whitespace), like every other example.
 *
 * <p>Usage: {@code java -jar loopwire-client-example.jar [HARNESS_ADDRESS] [TASK]}. The address
 * defaults to $LOOPWIRE_HARNESS, then 127.0.0.1:50051. The tenant API key comes from
 * $LOOPWIRE_API_KEY and is sent as {@code authorization: Bearer <key>} ({@code loopwire up} prints
 * a development key and leaves it in .state/dev-api-key). Without a task it replays a built-in
 * two-turn session (a shell call, then an answer), which needs no model weights. Exits 0 once
 * the run completes, 1 if it fails, 2 without a key.
 */
public final class Example {
  private Example() {}

  static StartTask builtInReplay() {
    return StartTask.newBuilder()
        .setTask("Greet from the shell, then say you are done.")
        .setMaxTurns(4)
        .setReplay(
            ReplayScript.newBuilder()
                .setSource("java client example (built in)")
                .addTools(
                    Tool.newBuilder()
                        .setName("bash")
                        .setDescription("Run a shell command")
                        .setParameters(
                            "{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"string\"}},"
                                + "\"required\":[\"command\"]}"))
                .addTurns(
                    ReplayTurn.newBuilder()
                        .setOutput(
                            ReplayOutput.newBuilder()
                                .setText("I will greet from the shell.")
                                .addFunctionCalls(
                                    FunctionCall.newBuilder()
                                        .setCallId("call_1")
                                        .setName("bash")
                                        .setArguments("{\"command\":\"echo hello\"}")))
                        .addFollowups(
                            Item.newBuilder()
                                .setFunctionCallOutput(
                                    FunctionCallOutput.newBuilder()
                                        .setCallId("call_1")
                                        .setOutput("hello\n"))))
                .addTurns(
                    ReplayTurn.newBuilder()
                        .setOutput(ReplayOutput.newBuilder().setText("Done: the shell said hello."))))
        .build();
  }

  static final JsonFormat.Printer JSON = JsonFormat.printer().omittingInsignificantWhitespace();

  static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  public static void main(String[] args) throws InterruptedException {
    String apiKey = System.getenv("LOOPWIRE_API_KEY");
    if (apiKey == null || apiKey.trim().isEmpty()) {
      System.err.println(
          "LOOPWIRE_API_KEY is not set: export the harness API key (`loopwire up` leaves a development key in .state/dev-api-key)");
      System.exit(2);
    }
    Metadata auth = new Metadata();
    auth.put(AUTHORIZATION, "Bearer " + apiKey.trim());
    String env = System.getenv("LOOPWIRE_HARNESS");
    String address = args.length > 0 ? args[0] : (env != null && !env.isEmpty() ? env : "127.0.0.1:50051");
    StartTask start =
        args.length > 1
            ? StartTask.newBuilder().setTask(args[1]).setMaxTurns(8).build()
            : builtInReplay();
    ManagedChannel channel = ManagedChannelBuilder.forTarget(address).usePlaintext().build();
    CountDownLatch done = new CountDownLatch(1);
    AtomicInteger exitCode = new AtomicInteger(1);
    AtomicBoolean finished = new AtomicBoolean(false);
    StreamObserver<RunRequest> requests =
        HarnessServiceGrpc.newStub(channel)
            .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(auth))
            .withDeadlineAfter(5, TimeUnit.MINUTES)
            .run(
                new StreamObserver<RunResponse>() {
                  @Override
                  public void onNext(RunResponse event) {
                    try {
                      System.out.println(JSON.print(event));
                    } catch (InvalidProtocolBufferException error) {
                      System.err.println("encode: " + error);
                      done.countDown();
                      return;
                    }
                    if (event.hasCompleted() || event.hasFailed()) {
                      exitCode.set(event.hasCompleted() ? 0 : 1);
                      finished.set(true);
                      done.countDown();
                    }
                  }

                  @Override
                  public void onError(Throwable error) {
                    if (!finished.get()) { // after the run ended, the channel's shutdown is no error
                      System.err.println("run: " + error);
                    }
                    done.countDown();
                  }

                  @Override
                  public void onCompleted() {
                    if (!finished.get()) {
                      System.err.println("stream ended before the run completed");
                    }
                    done.countDown();
                  }
                });
    requests.onNext(RunRequest.newBuilder().setStart(start).build());
    done.await();
    System.out.flush();
    channel.shutdownNow();
    System.exit(exitCode.get());
  }
}
