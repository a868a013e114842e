"""The throwaway PostgreSQL helper itself: start, template copies, crash recovery, cleanup."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgcluster import ExternalServer, PgCluster

needs_server = pytest.mark.skipif(
    not PgCluster.available(), reason="PostgreSQL server binaries not found"
)


@pytest.fixture
def pg_base() -> Iterator[Path]:
    # Not tmp_path: /tmp/pytest-of-root is 0700, which the postgres user cannot traverse.
    base = Path(tempfile.mkdtemp(prefix="oncebox-pg-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _rows(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT n FROM t ORDER BY n").fetchall()]


@pytest.mark.slow
@needs_server
def test_template_copy_and_crash_recovery(pg_base: Path) -> None:
    cluster = PgCluster.start(pg_base, durable=True)
    try:
        assert cluster.is_running()
        template_url = cluster.create_database("tmpl")
        with psycopg.connect(template_url) as conn:
            conn.execute("CREATE TABLE t (n int PRIMARY KEY)")
            conn.execute("INSERT INTO t VALUES (1), (2)")
        # The template connection is closed: a copy needs the template to be idle.
        copy_url = cluster.create_database("copy", template="tmpl")
        assert copy_url == cluster.url("copy")
        assert _rows(copy_url) == [1, 2]

        with psycopg.connect(copy_url, autocommit=True) as conn:
            conn.execute("INSERT INTO t VALUES (3)")
            cluster.stop("immediate")  # a crash, with this connection still open
        assert not cluster.is_running()
        cluster.stop("immediate")  # idempotent
        cluster.stop()

        cluster.start_again()
        assert cluster.is_running()
        assert _rows(copy_url) == [1, 2, 3]
        assert "database system was interrupted" in cluster.log_path.read_text()

        cluster.drop_database("copy")
        cluster.drop_database("copy")  # IF EXISTS
        with psycopg.connect(cluster.url()) as conn:
            names = {r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()}
        assert "copy" not in names and "tmpl" in names
    finally:
        cluster.stop()
    assert not cluster.is_running()
    cluster.stop()


@pytest.mark.slow
@needs_server
def test_fast_cluster_settings_and_socket_only(pg_base: Path) -> None:
    with PgCluster.start(pg_base) as cluster:
        assert cluster.socket_path.is_socket()
        assert cluster.socket_path.parent == pg_base / "sock"
        assert cluster.url("x") == (
            f"postgresql://postgres@/x?host={pg_base / 'sock'}&port={cluster.port}"
        )
        with psycopg.connect(cluster.url()) as conn:
            settings = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                for name in (
                    "listen_addresses", "max_connections", "fsync", "synchronous_commit",
                    "full_page_writes", "server_encoding", "lc_collate",
                )
            }  # fmt: skip
            user = conn.execute("SELECT current_user").fetchone()
        assert settings == {
            "listen_addresses": "",
            "max_connections": "200",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "server_encoding": "UTF8",
            "lc_collate": "C",
        }
        assert user == ("postgres",)
        assert (pg_base / "server.log").exists()
    assert not cluster.is_running()


@pytest.mark.slow
@needs_server
def test_leftover_server_in_base_is_replaced(pg_base: Path) -> None:
    first = PgCluster.start(pg_base)
    old_pid = first._postmaster_pid()
    second = PgCluster.start(pg_base)  # as if an earlier run had died without stopping
    try:
        assert second.is_running()
        assert second._postmaster_pid() != old_pid
        with psycopg.connect(second.url()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        second.stop()
        first.stop()
    assert not second.is_running()


@pytest.mark.slow
@needs_server
def test_failed_start_raises_with_log_tail(pg_base: Path) -> None:
    cluster = PgCluster.start(pg_base)
    cluster.stop()
    with (cluster.data_dir / "postgresql.conf").open("a") as conf:
        conf.write("shared_buffers = 'not a size'\n")
    with pytest.raises(RuntimeError, match="shared_buffers"):
        cluster.start_again()
    assert not cluster.is_running()


@pytest.mark.slow
@needs_server
def test_external_server_against_a_cluster(pg_base: Path) -> None:
    with PgCluster.start(pg_base) as cluster:
        external = ExternalServer(cluster.url())
        url = external.create_database("ext")
        assert url == cluster.url("ext")
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("ext",)
        external.drop_database("ext")
        with pytest.raises(NotImplementedError):
            external.stop()
        with pytest.raises(NotImplementedError):
            external.start_again()


def test_external_server_url_replaces_only_the_database() -> None:
    url = ExternalServer("postgresql://u:p%40ss@db.example:6543/admin?sslmode=require").url("d1")
    assert url == "postgresql://u:p%40ss@db.example:6543/d1?sslmode=require"
    assert conninfo_to_dict(url) == {
        "user": "u", "password": "p@ss", "host": "db.example", "port": "6543",
        "dbname": "d1", "sslmode": "require",
    }  # fmt: skip
    sock = ExternalServer("postgresql://postgres@/postgres?host=/run/postgresql&port=5432")
    assert conninfo_to_dict(sock.url("x y")) == {
        "user": "postgres", "host": "/run/postgresql", "port": "5432", "dbname": "x y",
    }  # fmt: skip
    assert sock.url("x").startswith("postgresql://")
    keywords = ExternalServer("host=/run/postgresql user=postgres dbname=postgres")
    assert conninfo_to_dict(keywords.url("d2"))["dbname"] == "d2"


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONCEBOX_TEST_PG", raising=False)
    assert PgCluster.from_env() is None
    monkeypatch.setenv("ONCEBOX_TEST_PG", "")
    assert PgCluster.from_env() is None
    monkeypatch.setenv("ONCEBOX_TEST_PG", "postgresql://postgres@/postgres")
    assert PgCluster.from_env() == "postgresql://postgres@/postgres"
