"""Test certificates made at test time: a CA, a server certificate for 127.0.0.1/localhost,
and client certificates (the ``cryptography`` package; nothing is committed)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey) -> Pair:
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return pair_of(cert_path, key_path)


def pair_of(cert: Path, key: Path) -> Pair:
    """A ``Pair`` of existing files."""
    return Pair(cert, key)


class Authority:
    """A throwaway CA that signs server and client certificates into ``directory``."""

    def __init__(self, directory: Path, name: str = "test CA") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.files = _write(directory, name.replace(" ", "-"), self.cert, self.key)

    def issue(self, stem: str, common_name: str, *, server: bool = True,
              sans: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Pair:
        """A certificate signed by this CA, with ``sans`` (IP addresses or DNS names)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        names: list[x509.GeneralName] = []
        for san in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                names.append(x509.DNSName(san))
        usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server else \
            x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return _write(self.directory, stem, builder.sign(self.key, hashes.SHA256()), key)


def write_web_config(directory: Path, text: str) -> str:
    """``text`` as ``web.yml`` in ``directory``; its path, for ``--web.config.file``."""
    path = directory / "web.yml"
    path.write_text(text, encoding="utf-8")
    return str(path)
