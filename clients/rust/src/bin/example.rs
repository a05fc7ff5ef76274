//! Runs one task on a loopwire harness and prints every event of the run, one line of proto3
//! canonical JSON each (the serde impls pbjson-build generates), like every other example.
//!
//! Usage: example [HARNESS_ADDRESS] [TASK]
//!
//! The address defaults to $LOOPWIRE_HARNESS, then 127.0.0.1:50051. The tenant API key comes from
//! $LOOPWIRE_API_KEY and is sent as `authorization: Bearer <key>` (`loopwire up` prints a
//! development key and leaves it in .state/dev-api-key). Without a task it replays a built-in
//! two-turn session (a shell call, then an answer), which needs no model weights.
//! Exits 0 once the run completes, 1 if it fails, 2 without a key.

use std::process::ExitCode;
use std::time::Duration;

use loopwire_client::v1::{
    harness_service_client::HarnessServiceClient, item, run_request, run_response, FunctionCall,
    FunctionCallOutput, Item, ReplayOutput, ReplayScript, ReplayTurn, RunRequest, StartTask, Tool,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

fn built_in_replay() -> StartTask {
    StartTask {
        task: "Greet from the shell, then say you are done.".into(),
        max_turns: 4,
        replay: Some(ReplayScript {
            source: "rust client example (built in)".into(),
            tools: vec![Tool {
                name: "bash".into(),
                description: "Run a shell command".into(),
                parameters: r#"{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}"#
                    .into(),
            }],
            turns: vec![
                ReplayTurn {
                    output: Some(ReplayOutput {
                        text: "I will greet from the shell.".into(),
                        function_calls: vec![FunctionCall {
                            call_id: "call_1".into(),
                            name: "bash".into(),
                            arguments: r#"{"command":"echo hello"}"#.into(),
                        }],
                    }),
                    followups: vec![Item {
                        item: Some(item::Item::FunctionCallOutput(FunctionCallOutput {
                            call_id: "call_1".into(),
                            output: "hello\n".into(),
                            is_error: false,
                        })),
                    }],
                },
                ReplayTurn {
                    output: Some(ReplayOutput { text: "Done: the shell said hello.".into(), function_calls: vec![] }),
                    followups: vec![],
                },
            ],
            run_tools: false,
        }),
        ..Default::default()
    }
}

async fn run(
    address: String,
    api_key: String,
    start: StartTask,
) -> Result<bool, Box<dyn std::error::Error>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))?
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await?;
    let mut client = HarnessServiceClient::new(channel);
    // The request stream stays open until the run is over (the harness may expect more requests).
    let (requests, outbox) = mpsc::channel(4);
    requests.send(RunRequest { action: Some(run_request::Action::Start(start)) }).await?;
    let mut request = tonic::Request::new(ReceiverStream::new(outbox));
    request.metadata_mut().insert("authorization", format!("Bearer {api_key}").parse()?);
    let mut events = client.run(request).await?.into_inner();
    while let Some(event) = events.message().await? {
        println!("{}", serde_json::to_string(&event)?);
        match event.event {
            Some(run_response::Event::Completed(_)) => return Ok(true),
            Some(run_response::Event::Failed(_)) => return Ok(false),
            _ => {}
        }
    }
    eprintln!("stream ended before the run completed");
    Ok(false)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let api_key = std::env::var("LOOPWIRE_API_KEY").unwrap_or_default().trim().to_string();
    if api_key.is_empty() {
        eprintln!("LOOPWIRE_API_KEY is not set: export the harness API key (`loopwire up` leaves a development key in .state/dev-api-key)");
        return ExitCode::from(2);
    }
    let mut args = std::env::args().skip(1);
    let address = args
        .next()
        .or_else(|| std::env::var("LOOPWIRE_HARNESS").ok())
        .unwrap_or_else(|| "127.0.0.1:50051".into());
    let start = match args.next() {
        Some(task) => StartTask { task, max_turns: 8, ..Default::default() },
        None => built_in_replay(),
    };
    match tokio::time::timeout(Duration::from_secs(300), run(address, api_key, start)).await {
        Ok(Ok(true)) => ExitCode::SUCCESS,
        Ok(Ok(false)) => ExitCode::FAILURE,
        Ok(Err(err)) => {
            eprintln!("run: {err}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("run: timed out");
            ExitCode::FAILURE
        }
    }
}
