"""`loopwire up|inference|gateway|harness|run|replay|analyze`."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
import time
from pathlib import Path

from loopwire.common.config import env as _env

SERVICE_MODULES = {
    "inference": "loopwire.inference.server",
    "gateway": "loopwire.gateway.server",
    "harness": "loopwire.harness.server",
    "api": "loopwire.api.server",  # the OpenAI-compatible HTTP/WebSocket front door, a client of the gateway
}


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default after its help (unless it is empty or already said)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in ("", None, False) or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action) or ""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopwire")
    except PackageNotFoundError:
        return "unknown"


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


def service_parser(command: str) -> argparse.ArgumentParser:
    """Every flag of one service (the Kubernetes manifests are checked against these too)."""
    from loopwire.common import telemetry, tls

    module = importlib.import_module(SERVICE_MODULES[command])
    parser = argparse.ArgumentParser(prog=f"loopwire {command}", formatter_class=_Help,
                                     epilog="Every flag also reads LOOPWIRE_<FLAG> (dashes as underscores).")
    module.add_arguments(parser)
    telemetry.add_arguments(parser)
    parser.add_argument("--metrics-host", default=_env("metrics_host", "127.0.0.1"),
                        help="address the metrics endpoint binds (0.0.0.0 in a pod, for Prometheus; "
                             "env LOOPWIRE_METRICS_HOST)")
    tls.add_arguments(parser)
    return parser


def _cmd_service(args: argparse.Namespace) -> int:
    """Service flags belong to the service module, imported only when that service starts."""
    from loopwire.common import telemetry, tls

    module = importlib.import_module(SERVICE_MODULES[args.command])
    service_args = service_parser(args.command).parse_args(args.service_args)
    tls.configure(service_args, args.command)
    # Before any server or channel exists: their interceptors come from this setup.
    telemetry.setup(f"loopwire-{args.command}", metrics_port=service_args.metrics_port,
                    metrics_host=service_args.metrics_host, log_format=service_args.log_format)
    asyncio.run(module.serve_from_args(service_args))
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    from rich.console import Console

    from loopwire.mesh import StateDirBusy, lock_state_dir, start_mesh

    try:  # first: nothing in the state dir may change under a mesh that runs on it
        lock = lock_state_dir(args.state_dir)  # noqa: F841 - held until this process exits
    except StateDirBusy as e:
        print(f"loopwire up: {e}", file=sys.stderr)
        return 1
    console = Console()
    # Before anything starts: a signal that comes while the mesh starts or the banner prints
    # still stops everything cleanly (the default handler would kill this process and orphan it).
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    ports = {"harness": args.harness_port, "gateway": args.gateway_port, "inference": args.inference_port,
             "api": args.api_port}
    extra = {"inference": ["--engine", args.engine]}
    if args.model:
        extra["inference"] += ["--model", args.model]
    try:
        mesh = start_mesh(Path(args.state_dir), ports=ports, inference_replicas=args.replicas,
                          extra_args=extra, log=sys.stdout, use_tls=args.tls, api=args.api_port > 0,
                          allow_replay=args.allow_replay)
    except RuntimeError as e:
        console.print(f"[red]loopwire up failed:[/] {e} (its own message is above)")
        return 1
    tls_dir = f"{args.state_dir}/tls"
    grpcurl_tls = (f"-cacert {tls_dir}/ca.pem -cert {tls_dir}/client.pem -key {tls_dir}/client.key" if args.tls
                   else "-plaintext")
    console.print(
        f"\n[bold green]loopwire is up[/]  harness {mesh.harness}  gateway {mesh.gateway}  "
        f"inference {', '.join(mesh.inference)}\n"
        f"development API key (tenant 'dev'): [bold]{mesh.api_key}[/]\n"
        f"try:  loopwire run --harness {mesh.harness} --state-dir {args.state_dir} \"What is the capital of France?\"\n"
        f"      grpcurl {grpcurl_tls} -H \"authorization: Bearer $(cat {args.state_dir}/service-token)\" "
        f"{mesh.inference[0]} loopwire.v1.InferenceService/GetStatus\n"
        + (f"      OpenAI API (openai SDK, Agents SDK, Codex CLI): base URL http://{mesh.api}/v1, model 'loopwire', "
           "the key above (docs/openai-api.md)\n" if mesh.api else "")
        + "Ctrl-C stops every service (in-flight streams drain first).\n"
    )
    try:
        while not stop:
            dead = [n for n, p in mesh.processes.items() if p.poll() is not None]
            if dead:
                console.print(f"[red]{', '.join(dead)} exited; stopping the mesh[/]")
                break
            time.sleep(0.3)
    finally:
        mesh.stop()
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from loopwire.client import run_task
    from loopwire.console import EventPrinter, turn_table
    from loopwire.v1 import common_pb2, harness_pb2

    console = Console()
    start = harness_pb2.StartTask(task=args.task, workspace=args.workspace or "")
    if args.continue_session:
        if not args.task or args.replay or args.workspace:
            console.print("[red]--continue:[/] give the follow-up message as the task, without --replay or --workspace")
            return 2
    elif not args.task and not args.replay:
        console.print("[red]loopwire run:[/] say what the agent should do (or give --replay FILE)")
        return 2
    if args.tool_choice:
        start.model.tool_choice.SetInParent()  # chosen, even as auto: the harness default does not apply
        start.model.tool_choice.mode = {"auto": common_pb2.TOOL_CHOICE_MODE_UNSPECIFIED,
                                        "required": common_pb2.TOOL_CHOICE_MODE_REQUIRED,
                                        "none": common_pb2.TOOL_CHOICE_MODE_NONE}[args.tool_choice]
    if args.max_output_tokens:
        start.model.sampling.max_output_tokens = args.max_output_tokens
    if args.replay:
        from loopwire.common.recorded import load_session

        try:
            session = load_session(args.replay)
        except ValueError as e:
            console.print(f"[red]--replay:[/] {e}")
            return 2
        start.task = args.task or session.task
        start.instructions = session.instructions
        start.replay.CopyFrom(session.replay_script(run_tools=bool(args.workspace)))
    if args.max_turns:
        start.max_turns = args.max_turns
    from loopwire.mesh import read_dev_key, use_client_certificate

    use_client_certificate(args.state_dir)  # the harness of `loopwire up --tls` demands it
    key = args.api_key or read_dev_key(args.state_dir)
    if not key:
        console.print(f"[red]no API key:[/] pass --api-key or LOOPWIRE_API_KEY, or start the mesh with "
                      f"`loopwire up` (it leaves a development key in {args.state_dir}/)")
        return 2
    request: harness_pb2.StartTask | harness_pb2.AddUserMessage = start
    if args.continue_session:
        request = harness_pb2.AddUserMessage(session_id=args.continue_session, text=args.task)
    result = asyncio.run(run_task(args.harness, request, EventPrinter(console), api_key=key))
    if result.session_id:
        console.print(f"[dim]session {result.session_id}: continue it with "
                      f"loopwire run --continue {result.session_id} \"...\"[/]")
    if result.turns:
        console.print(turn_table(result.turns))
    if result.error:
        console.print(f"[red]run failed:[/] {result.error}")
        return 1
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from loopwire.replay import main as replay_main

    return replay_main(args)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from loopwire.analyze import main as analyze_main

    return analyze_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopwire", description=__doc__,
                                     formatter_class=_Help)
    parser.add_argument("--log-level", default=_env("LOG_LEVEL", "info"),
                        choices=["debug", "info", "warning", "error"], help="env LOOPWIRE_LOG_LEVEL")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    for name in SERVICE_MODULES:
        p = sub.add_parser(name, help=f"run the {name} service (--help after the name lists its flags)",
                           add_help=False)
        p.set_defaults(func=_cmd_service)

    p = sub.add_parser("up", help="start all three services on loopback (embedded default)", formatter_class=_Help)
    p.add_argument("--state-dir", default=_env("STATE_DIR", ".state"),
                   help="sessions, logs, the dev API key and the service token (env LOOPWIRE_STATE_DIR)")
    p.add_argument("--harness-port", type=int, default=50051, help="port of the harness (clients connect here)")
    p.add_argument("--gateway-port", type=int, default=50052, help="port of the gateway")
    p.add_argument("--inference-port", type=int, default=50053, help="port of the first inference replica")
    p.add_argument("--api-port", type=int, default=8080,
                   help="port of the OpenAI-compatible HTTP/WebSocket front door (`loopwire api`); 0: not started")
    p.add_argument("--replicas", type=int, default=1, help="inference replicas (consecutive ports)")
    p.add_argument("--engine", default="reference", choices=["reference", "simulated", "trtllm"],
                   help="inference engine: numpy reference, simulated GPU cost model, or TensorRT-LLM")
    p.add_argument("--model", default="",
                   help="default (SmolLM2-135M-Instruct, bundled) | dummy:<seed> | FILE.gguf | a Hugging Face "
                        "directory (default: the real model on reference, dummy:0 on simulated)")
    p.add_argument("--allow-replay", action="store_true", default=_env("ALLOW_REPLAY", "") == "1",
                   help="let the gateway accept recorded output to emit (`loopwire run --replay`); off by default")
    p.add_argument("--tls", action="store_true", default=_env("TLS", "") == "1",
                   help="mutual TLS on every hop: a development CA and certificates in --state-dir/tls; "
                        "`loopwire run` uses its client certificate (env LOOPWIRE_TLS=1)")
    p.set_defaults(func=_cmd_up)

    p = sub.add_parser("run", help="run a task on a running harness and stream its events", formatter_class=_Help)
    p.add_argument("task", nargs="?", default="", help="what the agent should do")
    p.add_argument("--harness", default=_env("HARNESS", "127.0.0.1:50051"), help="harness address (env LOOPWIRE_HARNESS)")
    p.add_argument("--api-key", default=_env("API_KEY", ""),
                   help="tenant key for the harness (default: the development key `loopwire up` left in --state-dir)")
    p.add_argument("--state-dir", default=_env("STATE_DIR", ".state"), help="where `loopwire up` keeps its state")
    p.add_argument("--workspace", default="",
                   help="directory the agent's tools work in, under the harness's workspace root; tools of a "
                        "replay run really only when it is given (default: a fresh directory per session)")
    p.add_argument("--replay", default="", help="replay this recorded session instead of asking the model")
    p.add_argument("--max-turns", type=int, default=0, help="stop after this many model turns (0: the harness's limit)")
    p.add_argument("--max-output-tokens", type=int, default=0,
                   help="longest model reply per turn in tokens (0: the gateway's default, 1024)")
    p.add_argument("--tool-choice", choices=["auto", "required", "none"], default="",
                   help="auto: the model may answer or call a tool (an opened call is always valid); required: a "
                        "tool call every turn until it calls finish (best for small models); none: text only "
                        "(default: the harness's --tool-choice)")
    p.add_argument("--continue", dest="continue_session", default="", metavar="SESSION",
                   help="send the task as a follow-up message to this existing session instead of starting one")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("replay", help="replay recorded sessions through the mesh, three ways side by side",
                       formatter_class=_Help)
    from loopwire.replay import add_arguments as replay_arguments

    replay_arguments(p)
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser("analyze", help="profile recorded sessions without running them", formatter_class=_Help)
    from loopwire.analyze import add_arguments as analyze_arguments

    analyze_arguments(p)
    p.set_defaults(func=_cmd_analyze)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in SERVICE_MODULES:
        args.service_args = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    _setup_logging(args.log_level)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
