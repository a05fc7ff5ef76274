"""The auth flags the services share: ``--auth-config`` (tenants), ``--service-token-file``, ``--insecure-dev``."""

from __future__ import annotations

import argparse
import logging
import tomllib

from loopwire.common.auth import Authenticator
from loopwire.common.config import env as _env
from loopwire.common.service_auth import ServiceAuthError, read_token_file

log = logging.getLogger("loopwire.auth")


def add_service_token_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--service-token-file", default=_env("service_token_file", ""),
                        help=f"file holding the service token ({what}); `loopwire up` writes one "
                             "(env LOOPWIRE_SERVICE_TOKEN_FILE)")
    add_insecure_dev_argument(parser)


def add_insecure_dev_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--insecure-dev", action="store_true", default=_env("insecure_dev", "") == "1",
                        help="development only: run without credentials (no service token, anonymous "
                             "clients); refused on a non-loopback address (env LOOPWIRE_INSECURE_DEV=1)")


def service_token_from_args(args: argparse.Namespace, service: str) -> str:
    """The token, or '' in --insecure-dev; a clear exit when neither is usable."""
    if args.service_token_file:
        try:
            return read_token_file(args.service_token_file)
        except ServiceAuthError as e:
            raise SystemExit(f"{service}: {e}") from None
    check_insecure_dev(args, service, "--service-token-file")
    return ""


def load_authenticator(args: argparse.Namespace, service: str) -> Authenticator:
    """``--auth-config`` as an Authenticator; anonymous only with ``--insecure-dev``; a clear exit otherwise."""
    if args.auth_config:
        try:
            return Authenticator.from_file(args.auth_config)
        except (OSError, ValueError, tomllib.TOMLDecodeError) as e:
            raise SystemExit(f"{service}: --auth-config {args.auth_config}: {e}") from None
    check_insecure_dev(args, service, "--auth-config")
    return Authenticator.open()


def check_insecure_dev(args: argparse.Namespace, service: str, flag: str) -> None:
    if not args.insecure_dev:
        raise SystemExit(f"{service}: {flag} is required (or --insecure-dev for a development setup on loopback)")
    host = args.listen.rpartition(":")[0].strip("[]")
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"{service}: --insecure-dev is refused on {args.listen}: bind a loopback address")
    log.warning("INSECURE DEV MODE (%s): no credentials are checked", service)
