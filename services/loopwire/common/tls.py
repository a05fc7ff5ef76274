"""Mutual TLS on every hop: one set of flags for every service, and a development CA.

A service given ``--tls-cert``/``--tls-key``/``--tls-ca`` serves TLS, demands a client
certificate signed by that CA (mutual TLS), and presents its own certificate when it calls
another service, verifying the callee against the same CA. Without them it speaks plaintext,
which is refused on a non-loopback address unless ``--allow-plaintext`` says that something
else (a service-mesh sidecar, a VPN) encrypts the hop. ``loopwire up --tls`` makes a CA and
the certificates in its state directory with :func:`create_dev_pki`.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from loopwire.common.config import env as _env

log = logging.getLogger("loopwire.tls")

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class TlsFiles:
    cert: bytes
    key: bytes
    ca: bytes

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)


_active: TlsFiles | None = None


def active() -> TlsFiles | None:
    """The TLS files of this process (None: plaintext)."""
    return _active


def use(files: TlsFiles | None) -> None:
    global _active
    _active = files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (mutual, on every hop)")
    group.add_argument("--tls-cert", default=_env("tls_cert", ""),
                       help="PEM certificate this service serves and presents to the services it calls "
                            "(env LOOPWIRE_TLS_CERT)")
    group.add_argument("--tls-key", default=_env("tls_key", ""),
                       help="PEM private key of --tls-cert (env LOOPWIRE_TLS_KEY)")
    group.add_argument("--tls-ca", default=_env("tls_ca", ""),
                       help="PEM CA that signs every peer: callers must present a certificate it signed, and "
                            "callees are verified against it (env LOOPWIRE_TLS_CA)")
    group.add_argument("--allow-plaintext", action="store_true", default=_env("allow_plaintext", "") == "1",
                       help="serve plaintext on a non-loopback address (only when a sidecar or VPN encrypts "
                            "the hop; env LOOPWIRE_ALLOW_PLAINTEXT=1)")


def load(cert: str, key: str, ca: str) -> TlsFiles:
    """Read the three PEM files; ValueError names what is missing or unreadable."""
    given = {"--tls-cert": cert, "--tls-key": key, "--tls-ca": ca}
    missing = [flag for flag, path in given.items() if not path]
    if missing:
        raise ValueError(f"TLS needs all of --tls-cert, --tls-key and --tls-ca (missing {', '.join(missing)})")
    data = {}
    for flag, path in given.items():
        try:
            data[flag] = Path(path).read_bytes()
        except OSError as e:
            raise ValueError(f"{flag} {path}: {e.strerror or e}") from None
        if b"-----BEGIN" not in data[flag]:
            raise ValueError(f"{flag} {path}: not a PEM file")
    return TlsFiles(data["--tls-cert"], data["--tls-key"], data["--tls-ca"])


def configure(args: argparse.Namespace, service: str) -> None:
    """Apply the flags to this process, or exit with one line when they are unusable."""
    if not (args.tls_cert or args.tls_key or args.tls_ca):
        listen = getattr(args, "listen", "")
        host = listen.rpartition(":")[0].strip("[]")
        if listen and host not in LOOPBACK_HOSTS and not args.allow_plaintext:
            raise SystemExit(f"{service}: {listen} is not a loopback address, so TLS is required: pass --tls-cert, "
                             "--tls-key and --tls-ca (or --allow-plaintext when a sidecar encrypts the hop)")
        use(None)
        return
    try:
        use(load(args.tls_cert, args.tls_key, args.tls_ca))
    except ValueError as e:
        raise SystemExit(f"{service}: {e}") from None
    log.info("%s: mutual TLS on every hop (CA %s)", service, args.tls_ca)


def channel(target: str, *, options: list[tuple[str, Any]], interceptors: list[Any]) -> grpc.aio.Channel:
    files = _active
    if files is None:
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(target, files.channel_credentials(), options=options, interceptors=interceptors)


def add_port(server: grpc.aio.Server, address: str) -> int:
    files = _active
    if files is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, files.server_credentials())


# -- a development PKI ---------------------------------------------------------------


def create_dev_pki(directory: Path, hosts: list[str] = list(LOOPBACK_HOSTS)) -> dict[str, Path]:  # noqa: B006
    """A CA plus one service and one client certificate under ``directory`` (kept if present).

    The service certificate names ``hosts`` (DNS names or IP addresses) as subject alternative
    names. Keys are written 0600. Returns the paths by role: ca, cert, key, client_cert, client_key.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from loopwire.common.auth import write_private_file

    paths = {"ca": directory / "ca.pem", "ca_key": directory / "ca.key", "cert": directory / "service.pem",
             "key": directory / "service.key", "client_cert": directory / "client.pem",
             "client_key": directory / "client.key"}
    if all(p.exists() for p in paths.values()):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=365)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "loopwire development"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("loopwire development CA")).issuer_name(name(
        "loopwire development CA")).public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usages: list[x509.ObjectIdentifier], sans: list[x509.GeneralName]) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    # Services call each other, so their certificate serves and authenticates as a client.
    service_cert, service_key = leaf("loopwire service", [ExtendedKeyUsageOID.SERVER_AUTH,
                                                          ExtendedKeyUsageOID.CLIENT_AUTH], sans)
    client_cert, client_key = leaf("loopwire client", [ExtendedKeyUsageOID.CLIENT_AUTH], [])
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    write_private_file(paths["ca_key"], pem_key(ca_key).decode())
    paths["cert"].write_bytes(service_cert)
    write_private_file(paths["key"], service_key.decode())
    paths["client_cert"].write_bytes(client_cert)
    write_private_file(paths["client_key"], client_key.decode())
    return paths
