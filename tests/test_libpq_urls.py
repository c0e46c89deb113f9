"""Connection strings as users have them: libpq's query parameters on a PostgreSQL URL.

What RDS, Cloud SQL, Neon and Supabase hand out is a libpq URL (``postgresql://...
?sslmode=require``). Before, such a URL crashed in asyncpg (``TypeError: connect() got an
unexpected keyword argument 'sslmode'``). Here each listed form connects, through the store,
the migrations and the command line, against a PostgreSQL started with TLS (a CA and a
server certificate for ``localhost`` that the test makes) and against one without; a URL
that demands TLS is refused when it cannot be had (agentplane 0.22:
``a_url_demanding_tls_is_refused_not_downgraded``), and ``verify-full`` with a host name the
certificate does not name is refused.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlalchemy import text

from agentplane_journal import BackendError, RunId, SqlJournalStore
from agentplane_journal.db.engine import create_engine
from agentplane_journal.migrations.commands import upgrade

from support.helpers import admitted
from support.pgcluster import Cluster

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parent.parent


# -- a certificate authority and a TLS cluster ------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    dns: str | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if dns is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, data: bytes, *, private: bool = False) -> Path:
    path.write_bytes(data)
    os.chmod(path, 0o600 if private else 0o644)
    return path


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class Pki:
    """A CA, a server certificate for ``localhost`` only, and a client certificate."""

    def __init__(self, root: Path) -> None:
        ca_key, server_key, client_key = _key(), _key(), _key()
        ca = _cert("apj test CA", ca_key, None, ca_key, ca=True)
        server = _cert("localhost", server_key, ca, ca_key, dns="localhost")
        client = _cert("postgres", client_key, ca, ca_key)
        pem = serialization.Encoding.PEM
        self.ca = _write(root / "ca.pem", ca.public_bytes(pem))
        self.server_cert = _write(root / "server.pem", server.public_bytes(pem))
        self.server_key = _write(root / "server.key", _pem_key(server_key), private=True)
        self.client_cert = _write(root / "client.pem", client.public_bytes(pem))
        self.client_key = _write(root / "client.key", _pem_key(client_key), private=True)


@pytest.fixture(scope="module")
def pki() -> Iterator[Pki]:
    root = Path(tempfile.mkdtemp(prefix="apj-pki-"))
    try:
        made = Pki(root)
        if os.geteuid() == 0:  # the server runs as postgres and must read its key
            for path in (root, made.ca, made.server_cert, made.server_key):
                shutil.chown(path, "postgres", "postgres")
        yield made
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_cluster(pki: Pki) -> Iterator[Cluster]:
    cluster = Cluster(
        options=f"-c ssl=on -c ssl_cert_file={pki.server_cert} "
        f"-c ssl_key_file={pki.server_key} -c ssl_ca_file={pki.ca}"
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def plain_cluster() -> Iterator[Cluster]:
    cluster = Cluster()  # ssl=off, PostgreSQL's default
    try:
        yield cluster
    finally:
        cluster.stop()


def _database(cluster: Cluster) -> str:
    """A new database on ``cluster``: its name."""
    name = f"apj_{uuid.uuid4().hex[:10]}"

    async def create() -> None:
        conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres")
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    return name


@pytest.fixture(scope="module")
def tls_db(tls_cluster: Cluster) -> str:
    return _database(tls_cluster)


@pytest.fixture(scope="module")
def plain_db(plain_cluster: Cluster) -> str:
    return _database(plain_cluster)


async def _session(url: str) -> dict[str, Any]:
    """What the server says about the connection ``url`` opens through our engine factory."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT coalesce(s.ssl, false), s.client_dn, "
                        "current_setting('application_name'), current_setting('search_path'), "
                        "current_setting('work_mem') "
                        "FROM pg_stat_ssl s WHERE s.pid = pg_backend_pid()"
                    )
                )
            ).one()
    finally:
        await engine.dispose()
    names = ["ssl", "client_dn", "application_name", "search_path", "work_mem"]
    return dict(zip(names, row, strict=True))


async def _store_works(url: str) -> None:
    """The store opens on ``url`` (migrated through it too) and appends and reads."""
    await upgrade(url)
    store = await SqlJournalStore.connect(url)
    try:
        run = RunId.generate()
        await store.append(0, [admitted(run)])
        assert (await store.head(run)).seq == 1
    finally:
        await store.close()


# -- against the TLS server -------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+asyncpg"])
@pytest.mark.parametrize("sslmode", ["require", "prefer", "verify-ca"])
async def test_each_scheme_and_tls_mode_connects_over_tls(
    tls_cluster: Cluster, tls_db: str, pki: Pki, scheme: str, sslmode: str
) -> None:
    url = f"{scheme}://postgres@127.0.0.1:{tls_cluster.port}/{tls_db}?sslmode={sslmode}"
    if sslmode == "verify-ca":
        url += f"&sslrootcert={pki.ca}"
    assert (await _session(url))["ssl"] is True
    await _store_works(url)


async def test_verify_full_connects_by_the_certificates_host_name(
    tls_cluster: Cluster, tls_db: str, pki: Pki
) -> None:
    url = (
        f"postgresql://postgres@localhost:{tls_cluster.port}/{tls_db}"
        f"?sslmode=verify-full&sslrootcert={pki.ca}"
    )
    assert (await _session(url))["ssl"] is True
    await _store_works(url)


async def test_verify_full_with_a_host_name_the_certificate_lacks_is_refused(
    tls_cluster: Cluster, tls_db: str, pki: Pki
) -> None:
    url = (
        f"postgresql://postgres@127.0.0.1:{tls_cluster.port}/{tls_db}"
        f"?sslmode=verify-full&sslrootcert={pki.ca}"
    )
    with pytest.raises(BackendError, match=r"(?i)certificate|hostname|ip address"):
        await SqlJournalStore.connect(url)


async def test_verify_ca_with_another_authority_is_refused(
    tls_cluster: Cluster, tls_db: str, pki: Pki, tmp_path: Path
) -> None:
    other_key = _key()
    other = _cert("another CA", other_key, None, other_key, ca=True)
    ca = _write(tmp_path / "other.pem", other.public_bytes(serialization.Encoding.PEM))
    url = (
        f"postgresql://postgres@127.0.0.1:{tls_cluster.port}/{tls_db}"
        f"?sslmode=verify-ca&sslrootcert={ca}"
    )
    with pytest.raises(BackendError, match=r"(?i)certificate"):
        await SqlJournalStore.connect(url)


async def test_a_client_certificate_is_presented(
    tls_cluster: Cluster, tls_db: str, pki: Pki
) -> None:
    url = (
        f"postgresql://postgres@localhost:{tls_cluster.port}/{tls_db}?sslmode=verify-full"
        f"&sslrootcert={pki.ca}&sslcert={pki.client_cert}&sslkey={pki.client_key}"
    )
    said = await _session(url)
    assert said["ssl"] is True and said["client_dn"] == "/CN=postgres"


async def test_disable_connects_without_tls(tls_cluster: Cluster, tls_db: str) -> None:
    url = f"postgresql://postgres@127.0.0.1:{tls_cluster.port}/{tls_db}?sslmode=disable"
    assert (await _session(url))["ssl"] is False


async def test_startup_parameters_timeout_and_session_attributes(
    tls_cluster: Cluster, tls_db: str
) -> None:
    options = quote("-c search_path=apj_elsewhere,public -c work_mem=8MB")
    url = (
        f"postgresql://postgres@127.0.0.1:{tls_cluster.port}/{tls_db}?application_name=apj-test"
        f"&options={options}&connect_timeout=5&target_session_attrs=read-write&sslmode=require"
    )
    said = await _session(url)
    assert said["application_name"] == "apj-test"
    assert said["search_path"] == "apj_elsewhere,public"
    assert said["work_mem"] == "8MB"
    assert said["ssl"] is True


async def test_a_unix_socket_host_connects(tls_cluster: Cluster, tls_db: str) -> None:
    url = f"postgresql://postgres@/{tls_db}?host={tls_cluster.root}&port={tls_cluster.port}"
    assert (await _session(url))["ssl"] is False  # no TLS over a unix socket
    await _store_works(url)


def test_the_command_line_takes_a_libpq_url(tls_cluster: Cluster, tls_db: str, pki: Pki) -> None:
    url = (
        f"postgres://postgres@localhost:{tls_cluster.port}/{tls_db}"
        f"?sslmode=verify-full&sslrootcert={pki.ca}"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for argv in (["upgrade", url], ["runs", "--url", url]):
        result = subprocess.run(
            [sys.executable, "-m", "agentplane_journal.cli.main", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr


# -- against the server without TLS -----------------------------------------------------------


@pytest.mark.parametrize("sslmode", ["require", "verify-ca", "verify-full"])
async def test_a_url_demanding_tls_is_refused_not_downgraded(
    plain_cluster: Cluster, plain_db: str, pki: Pki, sslmode: str
) -> None:
    url = f"postgresql://postgres@localhost:{plain_cluster.port}/{plain_db}?sslmode={sslmode}"
    if sslmode != "require":
        url += f"&sslrootcert={pki.ca}"
    with pytest.raises(BackendError, match=r"(?i)ssl|tls") as caught:
        await SqlJournalStore.connect(url)
    assert "cannot connect" in str(caught.value)
    with pytest.raises(OSError, match=r"(?i)ssl|tls"):  # the migrations: asyncpg's own error
        await upgrade(url)


@pytest.mark.parametrize("sslmode", ["disable", "allow", "prefer"])
async def test_modes_that_allow_plaintext_connect_without_tls(
    plain_cluster: Cluster, plain_db: str, sslmode: str
) -> None:
    url = f"postgres://postgres@127.0.0.1:{plain_cluster.port}/{plain_db}?sslmode={sslmode}"
    assert (await _session(url))["ssl"] is False


# -- values libpq would refuse ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("sslmode=required", "sslmode"),
        ("sslrootcert=/nonexistent/ca.pem", "sslrootcert"),
        ("sslcert=/nonexistent/c.pem", "sslcert"),
        ("sslkey=/nonexistent/c.key", "sslkey"),
        ("connect_timeout=soon", "connect_timeout"),
        ("target_session_attrs=writable", "target_session_attrs"),
        ("ssl_min_protocol_version=TLSv9", "ssl_min_protocol_version"),
    ],
)
async def test_a_wrong_value_is_a_clear_error_naming_the_parameter(query: str, named: str) -> None:
    url = f"postgresql://postgres:hunter2@127.0.0.1:1/db?{query}"
    with pytest.raises(ValueError, match=f"\\?{named}=") as caught:
        await SqlJournalStore.connect(url)
    assert "hunter2" not in str(caught.value)
