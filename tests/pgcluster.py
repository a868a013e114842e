"""A throwaway PostgreSQL server for the test run.

``PgCluster.start(base)`` runs ``initdb`` into ``base/data`` and starts a server that listens
only on a unix socket in ``base/sock`` (no TCP), logging to ``base/server.log``.  When the
current process is root, every server binary runs as the ``postgres`` system user through
``runuser`` (postgres refuses to run as root), so ``base`` and all of its parents must be
traversable by that user: use a directory under ``/tmp`` (``tempfile.mkdtemp(dir="/tmp")``),
not pytest's ``tmp_path`` (``/tmp/pytest-of-root`` is mode 0700).

``ExternalServer(admin_url)`` wraps an existing server (``ONCEBOX_TEST_PG``) with the same
``url`` / ``create_database`` / ``drop_database`` methods; it cannot be stopped or restarted.

Durability: with ``durable=False`` the server runs with ``fsync``, ``synchronous_commit`` and
``full_page_writes`` off.  ``synchronous_commit=off`` means a commit can be acknowledged before
its WAL leaves shared memory, so ``stop("immediate")`` may lose the last few hundred
milliseconds of commits.  Crash tests must use ``durable=True``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ENV_VAR = "ONCEBOX_TEST_PG"
SERVER_USER = "postgres"
STOP_MODES = ("smart", "fast", "immediate")
_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
_PG_CTL_TIMEOUT_S = 60
# sizeof(sockaddr_un.sun_path) on Linux, including the terminating NUL.
_UNIX_PATH_MAX = 108


def _find_bindir() -> Path | None:
    """The directory with initdb/pg_ctl/postgres, or None."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))

    def version_key(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))

    candidates.extend(
        sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version_key, reverse=True)
    )
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in _SERVER_BINARIES):
            return bindir
    return None


def _as_root() -> bool:
    return os.geteuid() == 0


def _server_account() -> pwd.struct_passwd | None:
    """The account the server runs as: ``postgres`` when we are root, else ourselves."""
    try:
        return pwd.getpwnam(SERVER_USER) if _as_root() else pwd.getpwuid(os.geteuid())
    except KeyError:
        return None


def _free_port() -> int:
    # The server has no TCP listener; the port only names the socket file and seeds the
    # shared-memory key.  A port that is free on loopback avoids surprising anyone.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _quote_conf(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _clean_env() -> dict[str, str]:
    # PGPORT, PGDATA, PGHOST... from the caller's environment must not leak into the server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not running
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _blocked_ancestor(path: Path, account: pwd.struct_passwd) -> Path | None:
    """The first directory from / down to ``path`` that ``account`` cannot search, if any."""
    groups = set(os.getgrouplist(account.pw_name, account.pw_gid))
    for directory in [*reversed(path.parents), path]:
        try:
            st = directory.stat()
        except OSError:
            return directory
        if account.pw_uid == 0:
            continue
        if st.st_uid == account.pw_uid:
            bit = 0o100
        elif st.st_gid in groups:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return directory
    return None


class _DatabaseAdmin(ABC):
    """CREATE/DROP DATABASE through an autocommit connection to the admin database."""

    can_restart: ClassVar[bool] = False

    @abstractmethod
    def url(self, dbname: str = "postgres") -> str:
        """A connection URL for ``dbname`` on this server."""

    def _admin_url(self) -> str:
        return self.url("postgres")

    def _execute(self, statement: sql.Composed) -> None:
        with psycopg.connect(self._admin_url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(statement)

    def create_database(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE ``name`` (optionally from ``template``); returns ``url(name)``.

        Copying a template fails while anyone else is connected to the template database.
        """
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
        self._execute(statement)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """DROP DATABASE IF EXISTS ``name`` WITH (FORCE): open connections are terminated."""
        self._execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


_LIVE: dict[int, PgCluster] = {}


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            cluster.stop("immediate")


class PgCluster(_DatabaseAdmin):
    """A private PostgreSQL server under ``base``; see the module docstring."""

    can_restart: ClassVar[bool] = True

    def __init__(self, base: Path, bindir: Path, port: int, *, durable: bool) -> None:
        self.base = base
        self.bindir = bindir
        self.port = port
        self.durable = durable
        self.data_dir = base / "data"
        self.sock_dir = base / "sock"
        self.log_path = base / "server.log"

    def __repr__(self) -> str:
        return f"PgCluster(base={str(self.base)!r}, port={self.port}, durable={self.durable})"

    # --- discovery ---------------------------------------------------------------------

    @staticmethod
    def from_env() -> str | None:
        """The admin URL of an existing server from ``ONCEBOX_TEST_PG``, or None."""
        return os.environ.get(ENV_VAR) or None

    @staticmethod
    def available() -> bool:
        """Whether a private server can be run here (binaries, and the account if root)."""
        if _find_bindir() is None or _server_account() is None:
            return False
        return not _as_root() or shutil.which("runuser") is not None

    # --- lifecycle ---------------------------------------------------------------------

    @classmethod
    def start(cls, base: Path, *, durable: bool = False) -> PgCluster:
        """initdb into ``base/data`` and start a server on a unix socket in ``base/sock``.

        Leftovers from an earlier run in ``base`` (a running server, an old data directory)
        are stopped and wiped first.
        """
        bindir = _find_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found")
        account = _server_account()
        if account is None:
            raise RuntimeError(f"no {SERVER_USER!r} system user to run the server as")
        base = Path(base).absolute()
        cluster = cls(base, bindir, _free_port(), durable=durable)
        cluster._prepare_dirs(account)
        cluster._initdb()
        cluster._write_config()
        cluster._pg_ctl_start()
        return cluster

    def start_again(self) -> None:
        """Start the server again on the same data directory and port (after ``stop``).

        After ``stop("immediate")`` this performs crash recovery before returning.
        """
        if self.is_running():
            return
        self._pg_ctl_start()

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop -m ``mode`` -w; does nothing if the server is not running."""
        if mode not in STOP_MODES:
            raise ValueError(f"stop mode must be one of {STOP_MODES}, not {mode!r}")
        if not self.is_running():
            _LIVE.pop(id(self), None)
            return
        self._pg_ctl_stop(mode)
        if self.is_running() and mode != "immediate":
            self._pg_ctl_stop("immediate")
        if self.is_running():
            pid = self._postmaster_pid()
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while self.is_running() and time.monotonic() < deadline:
                    time.sleep(0.05)
        if self.is_running():
            raise RuntimeError(f"could not stop {self!r}\n{self.log_tail()}")
        _LIVE.pop(id(self), None)

    def is_running(self) -> bool:
        pid = self._postmaster_pid()
        return pid is not None and _pid_alive(pid)

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- connections -------------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        return self.sock_dir / f".s.PGSQL.{self.port}"

    def url(self, dbname: str = "postgres") -> str:
        """e.g. ``postgresql://postgres@/DBNAME?host=/path/to/sock&port=5433``."""
        host = urllib.parse.quote(str(self.sock_dir), safe="/")
        db = urllib.parse.quote(dbname, safe="")
        return f"postgresql://{SERVER_USER}@/{db}?host={host}&port={self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no server log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    # --- internals ---------------------------------------------------------------------

    def _command(self, binary: str, *args: str) -> list[str]:
        command = [str(self.bindir / binary), *args]
        if _as_root():
            return ["runuser", "-u", SERVER_USER, "--", *command]
        return command

    def _run(self, binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # cwd=base: the server account may not be allowed into the caller's cwd (e.g. /root).
        result = subprocess.run(
            self._command(binary, *args),
            cwd=self.base,
            env=_clean_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PG_CTL_TIMEOUT_S + 30,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{binary} {' '.join(args)} failed with exit code {result.returncode}\n"
                f"{result.stdout}{result.stderr}\n--- {self.log_path} (tail) ---\n"
                f"{self.log_tail()}"
            )
        return result

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            return int(first.strip())
        except (OSError, ValueError):
            return None

    def _prepare_dirs(self, account: pwd.struct_passwd) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        mode = self.base.stat().st_mode & 0o777
        if mode & 0o755 != 0o755:
            self.base.chmod(mode | 0o755)
        blocked = _blocked_ancestor(self.base, account)
        if blocked is not None:
            raise RuntimeError(
                f"user {account.pw_name!r} cannot traverse {blocked} "
                f"(mode {blocked.stat().st_mode & 0o777:o}); put the cluster under a directory "
                f"it can reach, e.g. tempfile.mkdtemp(dir='/tmp') chmod 0o755"
            )
        if len(str(self.socket_path)) >= _UNIX_PATH_MAX:
            raise RuntimeError(
                f"unix socket path too long ({self.socket_path}); use a shorter base"
            )
        # Leftovers: a server still running on base/data from an earlier run, old files.
        if self.is_running():
            self._pg_ctl_stop("immediate")
            pid = self._postmaster_pid()
            if pid is not None and _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                time.sleep(0.5)
        for stale in (self.data_dir, self.sock_dir):
            if stale.exists():
                shutil.rmtree(stale)
        self.data_dir.mkdir(mode=0o700)
        self.sock_dir.mkdir(mode=0o755)
        self.sock_dir.chmod(0o755)  # mkdir's mode is filtered by the umask
        self.log_path.write_text("")
        if _as_root():
            for path in (self.data_dir, self.sock_dir, self.log_path):
                os.chown(path, account.pw_uid, account.pw_gid)

    def _initdb(self) -> None:
        args = [
            "-D", str(self.data_dir), "-U", SERVER_USER, "--auth=trust",
            "-E", "UTF8", "--locale=C",
        ]  # fmt: skip
        if not self.durable:
            args.append("--no-sync")
        self._run("initdb", *args)

    def _write_config(self) -> None:
        settings = {
            "listen_addresses": "''",
            "unix_socket_directories": _quote_conf(str(self.sock_dir)),
            "port": str(self.port),
            "max_connections": "200",
        }
        if not self.durable:
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        lines = ["", "# added by tests/pgcluster.py"]
        lines += [f"{key} = {value}" for key, value in settings.items()]
        # Appending keeps the file's owner (the server account); later settings win.
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(lines) + "\n")

    def _pg_ctl_start(self) -> None:
        result = self._run(
            "pg_ctl", "start", "-w", "-t", str(_PG_CTL_TIMEOUT_S),
            "-D", str(self.data_dir), "-l", str(self.log_path),
            check=False,
        )  # fmt: skip
        if result.returncode != 0 or not self.is_running():
            # Don't leave a half-started server behind.
            if self.is_running():
                self._pg_ctl_stop("immediate")
            raise RuntimeError(
                f"PostgreSQL failed to start (pg_ctl exit code {result.returncode})\n"
                f"{result.stdout}{result.stderr}\n--- {self.log_path} (tail) ---\n"
                f"{self.log_tail()}"
            )
        _LIVE[id(self)] = self

    def _pg_ctl_stop(self, mode: str) -> None:
        """pg_ctl stop; failures are judged by the caller through ``is_running``."""
        self._run(
            "pg_ctl", "stop", "-m", mode, "-w", "-t", str(_PG_CTL_TIMEOUT_S),
            "-D", str(self.data_dir),
            check=False,
        )  # fmt: skip


class ExternalServer(_DatabaseAdmin):
    """An existing server given by its admin URL (e.g. from ``ONCEBOX_TEST_PG``).

    It can create and drop databases but not be stopped or restarted: crash tests skip.
    """

    can_restart: ClassVar[bool] = False

    def __init__(self, admin_url: str) -> None:
        conninfo_to_dict(admin_url)  # fail early on a malformed URL
        self.admin_url = admin_url

    def __repr__(self) -> str:
        return f"ExternalServer({self.admin_url!r})"

    def _admin_url(self) -> str:
        return self.admin_url

    def url(self, dbname: str = "postgres") -> str:
        """The admin URL with its database name replaced by ``dbname``.

        A ``postgresql://`` URL stays a URL (only its path changes, any ``dbname=`` query
        parameter is dropped); a ``key=value`` conninfo string stays one.
        """
        parts = urllib.parse.urlsplit(self.admin_url)
        if parts.scheme in ("postgresql", "postgres"):
            query = [
                (k, v)
                for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
                if k != "dbname"
            ]
            result = urllib.parse.urlunsplit(
                parts._replace(
                    path="/" + urllib.parse.quote(dbname, safe=""),
                    query=urllib.parse.urlencode(query, safe="/"),
                )
            )
        else:
            result = make_conninfo(self.admin_url, dbname=dbname)
        assert conninfo_to_dict(result).get("dbname") == dbname, result
        return result

    def is_running(self) -> bool:
        return True

    def stop(self, mode: str = "fast") -> None:
        raise NotImplementedError("an external PostgreSQL server cannot be stopped by the tests")

    def start_again(self) -> None:
        raise NotImplementedError("an external PostgreSQL server cannot be restarted by the tests")


def _home(durable: bool) -> str:
    """Where a throwaway server keeps its files. A server without fsync goes in memory
    (/dev/shm) where there is one: on ext4, each CREATE DATABASE of the tests (about 300
    files, after thousands made and deleted) spent 300 to 600 ms of kernel CPU looking for
    inodes not recently deleted (perf: ``recently_deleted``), a fifth of the suite's CPU.
    A server the tests crash keeps its files on disk, as a user's would."""
    shm = Path("/dev/shm")
    if not durable and shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return str(shm)
    return "/tmp"


@contextlib.contextmanager
def throwaway_server(prefix: str, *, durable: bool = False) -> Iterator[PgCluster | ExternalServer]:
    """The server ``ONCEBOX_TEST_PG`` names, else a private cluster in a new directory under
    /dev/shm or /tmp (:func:`_home`; the postgres user can reach both), stopped and wiped
    afterwards."""
    external = PgCluster.from_env()
    if external:
        yield ExternalServer(external)
        return
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=_home(durable)))
    cluster = PgCluster.start(base, durable=durable)
    try:
        yield cluster
    finally:
        cluster.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)
