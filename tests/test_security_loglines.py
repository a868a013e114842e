"""Issue 19, item 4: no value a client chose can forge a log line.

Through a real ``oncebox serve``: a delivery key holding a newline (or U+0085, U+2028)
made the "conflict quarantined" warning print a second, forged warning; a percent-encoded
U+0085 or U+2028 in a path, and U+0085 in a User-Agent, split access lines for
``str.splitlines`` readers; ``X-Forwarded-For`` was trusted from loopback by default
(uvicorn's own default) and written unescaped into the combined line. Every such value
now goes through :mod:`oncebox.logtext`, and no proxy is trusted unless
``--forwarded-allow-ips`` names it. The other lines that print someone else's text
(the reconciler's review warning, an unexpected error, the Redis consumer's, a worker's
failure) are checked here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import oncebox
from conftest import SESSION, BoxFactory
from helpers import event_body
from oncebox import InboxSpec, Oncebox
from oncebox.engine.reconciler import ReadResult, WorkKey
from oncebox.errors import OnceboxError
from oncebox.logtext import escaped, json_line
from oncebox.surfaces.cli import cli
from oncebox.surfaces.consume import StreamConsumer
from oncebox.surfaces.http import problems
from oncebox.surfaces.serve import _proxies
from oncebox.surfaces.workers import run_workers
from redisserver import RedisServer
from serveproc import Served, closed_within, create_token, serving, status_of
from test_consume import client, publish, redis_server, stream  # noqa: F401 (fixtures)

CONFIG = '[inboxes.k]\ncodec = "keyed"\n'
SPLITTERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
FORGED = "oncebox: conflict quarantined: inbox=k identity=forged record=99 quarantine=99"
COMBINED = re.compile(r'^\S+ - - \[[^\]]+\] "[^"]*" \d{3} \S+ "[^"]*" "[^"]*"$')


def _store(tmp_path: Path) -> str:
    (tmp_path / "oncebox.toml").write_text(CONFIG)
    return f"sqlite:///{tmp_path / 'served.db'}"


@contextlib.contextmanager
def _serve(tmp_path: Path, *args: str) -> Iterator[Served]:
    """One worker of ``oncebox serve ARGS`` on the store of :func:`_store`, its standard
    error (the access log and the warnings) kept in ``stderr.log`` for :func:`_lines`."""
    url, env = _store(tmp_path), {"ONCEBOX_CONFIG": str(tmp_path / "oncebox.toml")}
    with (
        (tmp_path / "stderr.log").open("wb") as err,
        serving(url, "--workers", "1", *args, env=env, stderr=err) as served,
    ):
        yield served


def _raw(served: Served, request: bytes) -> bytes:
    """Send one request as these bytes (its head without the blank line that ends it),
    asking the server to close once it has answered; the answer."""
    with served.connect() as sock:
        sock.sendall(request + b"Connection: close\r\n\r\n")
        return closed_within(sock, 5)[1]


def _lines(tmp_path: Path) -> list[str]:
    text = (tmp_path / "stderr.log").read_bytes().decode("utf-8")
    # Whoever reads the log, with split("\n") or with splitlines(), sees the same lines.
    assert text.splitlines() == text.split("\n")[:-1], text.splitlines()[:20]
    return text.splitlines()


# -- the conflict warning -------------------------------------------------------------------
@pytest.mark.slow
def test_a_key_cannot_forge_a_conflict_warning(tmp_path: Path) -> None:
    secret = create_token(_store(tmp_path))
    keys = [f"x{splitter}{FORGED}" for splitter in ("\n", "\r", "\x85", "\u2028", "\x1c")]
    first = "\n".join(json.dumps({"body": "a", "key": key}) for key in keys)
    second = "\n".join(json.dumps({"body": "b", "key": key}) for key in keys)
    with _serve(tmp_path) as s:
        headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/x-ndjson"}
        for body in (first, second):
            answer = httpx.post(f"{s.base}/v1/inboxes/k/batch", content=body, headers=headers)
            assert answer.status_code == 200, answer.text
        verdicts = [d["verdict"] for d in answer.json()["decisions"]]
        assert verdicts == ["conflict"] * len(keys)
    warnings = [x for x in _lines(tmp_path) if x.startswith("oncebox: conflict quarantined")]
    assert len(warnings) == len(keys), warnings  # one per conflict, none forged
    for line, key in zip(warnings, keys, strict=True):
        assert f'identity="{escaped(key, chr(34))}"' in line, line


# -- the access log ---------------------------------------------------------------------------
# Percent-encoded, so the HTTP parser takes them (it refuses raw controls in a request).
HOSTILE_PATH = "/v1/inboxes/a%C2%85b%E2%80%A8c%E2%80%A9d%0Be%1Cf%0Ag/triage"
HOSTILE_AGENT = b"agent\xc2\x85forged line\x85 and \xe2\x80\xa8"


@pytest.fixture(scope="module", params=["combined", "json"])
def untrusted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[str]]:
    """One service per log format, trusting no proxy (the default), asked a hostile path
    and user agent, then given X-Forwarded-For headers: (the format, its access lines).
    Both tests below read what this one service logged rather than each starting it."""
    form, where = str(request.param), tmp_path_factory.mktemp("untrusted")
    with _serve(where, "--log-format", form) as s:
        for target in (HOSTILE_PATH, "/healthz"):
            asked = f"GET {target} HTTP/1.1\r\nHost: x\r\n".encode()
            answer = _raw(s, asked + b"User-Agent: " + HOSTILE_AGENT + b"\r\n")
            assert status_of(answer) in (200, 401), answer[:200]
        _forwarded_request(s, b"6.6.6.6")
        _forwarded_request(s, FORWARDED)
    return form, [x for x in _lines(where) if not x.startswith(("oncebox:", "WARNING:"))]


@pytest.mark.slow
def test_no_path_or_user_agent_splits_an_access_line(untrusted: tuple[str, list[str]]) -> None:
    form, access = untrusted
    # serving()'s own readiness check, the two hostile requests, the two forwarded ones
    assert len(access) == 5, access
    if form == "json":
        logged = [json.loads(x) for x in access]
        assert logged[1]["path"] == "/v1/inboxes/a\x85b\u2028c\u2029d\x0be\x1cf\ng/triage"
        assert logged[1]["inbox"] == "a\x85b\u2028c\u2029d\x0be\x1cf\ng"
        assert all(x.isascii() for x in access)  # here every unusual character is escaped
    else:
        assert all(COMBINED.match(x) for x in access), access
        assert access[2].endswith('"agent\xc2\\x85forged line\\x85 and \xe2\\x80\xa8"'), access[2]


# -- X-Forwarded-For --------------------------------------------------------------------------
FORWARDED = b'6.6.6.6\xc2\x85forged - - [01/Jan/2030] "GET /x"'


def _forwarded_request(served: Served, forwarded: bytes) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: " + forwarded + b"\r\n"
    assert status_of(_raw(served, request)) == 200


@pytest.mark.slow
def test_no_proxy_is_trusted_by_default(untrusted: tuple[str, list[str]]) -> None:
    form, access = untrusted
    clients = [json.loads(x)["client"] if form == "json" else x.split(" ")[0] for x in access]
    assert clients == ["127.0.0.1"] * 5  # the peer, whatever the header says


@pytest.mark.slow
@pytest.mark.parametrize("form", ["combined", "json"])
def test_a_trusted_proxy_is_believed_and_its_value_escaped(tmp_path: Path, form: str) -> None:
    with _serve(tmp_path, "--log-format", form, "--forwarded-allow-ips", "127.0.0.1") as s:
        _forwarded_request(s, b"6.6.6.6")
        _forwarded_request(s, FORWARDED)
    access = [x for x in _lines(tmp_path) if not x.startswith(("oncebox:", "WARNING:"))]
    assert len(access) == 3, access
    hostile = FORWARDED.decode("latin-1")
    if form == "json":
        assert [json.loads(x)["client"] for x in access[1:]] == ["6.6.6.6", hostile]
    else:
        assert all(COMBINED.match(x) for x in access), access
        assert access[1].startswith("6.6.6.6 - - [")
        assert access[2].startswith(escaped(hostile, ' "') + " - - ["), access[2]


@pytest.mark.parametrize("value", ["10.0.0.0/8,proxy", "127.0.0.1 ::1", "", "*,10.0.0.1"])
def test_forwarded_allow_ips_refuses_what_is_not_an_address(tmp_path: Path, value: str) -> None:
    """uvicorn would keep a typo as a name no peer ever has, and trust nobody silently."""
    db = f"sqlite:///{tmp_path / 'never.db'}"
    result = CliRunner().invoke(cli, ["--db", db, "serve", "--forwarded-allow-ips", value])
    assert result.exit_code == 2 and "not an IP address or network" in result.output, result.output
    assert not (tmp_path / "never.db").exists()


def test_forwarded_allow_ips_are_given_to_uvicorn_as_it_compares_them() -> None:
    # uvicorn reads "127.0.0.9/8" as a name, not a network: it is passed as 127.0.0.0/8.
    assert _proxies(" 127.0.0.9/8, ::1,10.1.2.3 ") == ["127.0.0.0/8", "::1", "10.1.2.3"]
    assert _proxies("*") == ["*"] and _proxies(None) is None


# -- the other lines that print someone else's text ---------------------------------------------
def _one_line_each(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.name == logger]
    assert messages, f"nothing logged on {logger}"
    assert all(len(m.splitlines()) == 1 and FORGED not in m.splitlines() for m in messages)
    return messages


def test_a_reader_error_cannot_forge_a_review_warning(
    box: Oncebox, caplog: pytest.LogCaptureFixture
) -> None:
    box.ingest("listing", event_body("n-1"))

    def broken(key: WorkKey) -> ReadResult:
        raise ConnectionError(f"refused\n{FORGED}\u2028{FORGED}")

    recon = box.reconciler("listing", broken, max_failures=1)
    with caplog.at_level(logging.WARNING, logger="oncebox"):
        recon.refresh_once()
    [line] = _one_line_each(caplog, "oncebox")
    assert "went to review: ConnectionError: refused\\x0a" in line, line


def test_an_unexpected_error_is_logged_on_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="oncebox.http"):
        asyncio.run(problems.on_unexpected(None, RuntimeError(f"k\n{FORGED}")))  # type: ignore[arg-type]
    _one_line_each(caplog, "oncebox.http")


@pytest.mark.slow
def test_a_failing_apply_step_is_one_consumer_line(
    make_box: BoxFactory,
    redis_server: RedisServer,  # noqa: F811
    client: redis.Redis,  # noqa: F811
    stream: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fail_on_wat(tx: oncebox.store.Tx, change: oncebox.Change) -> None:
        if change.fields["need"] == "WAT":
            raise ValueError(f"ledger full\x85{FORGED}")

    box = make_box([InboxSpec("ussd", codec="ussd-h1", apply=fail_on_wat)])
    publish(client, stream, SESSION)
    consumer = StreamConsumer(box, redis_server.url, stream, "g", "c1", "ussd")
    with caplog.at_level(logging.WARNING, logger="oncebox.consume"):
        assert consumer.run_once().failed == 1
    consumer.close()
    _one_line_each(caplog, "oncebox.consume")


def test_a_failing_worker_is_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    def job(index: int) -> None:
        raise RuntimeError(f"worker\n{FORGED}")

    with pytest.raises(OnceboxError):
        run_workers(2, job)
    printed = [x for x in capfd.readouterr().err.splitlines() if "RuntimeError" in x]
    assert printed and all(FORGED not in x.splitlines() for x in printed)
    assert all("worker\\x0a" in x for x in printed), printed


# -- the rule itself ----------------------------------------------------------------------------
@given(st.text())
def test_escaped_text_is_one_printable_line_that_says_what_came(text: str) -> None:
    out = escaped(text, '" ')
    assert out.isprintable() and " " not in out and '"' not in out
    assert out.splitlines() in ([out], [])
    # Reversible: the escapes are Python's, and a backslash is always one of them.
    assert out.encode("ascii", "backslashreplace").decode("unicode_escape") == text


@given(st.dictionaries(st.text(), st.text() | st.none() | st.integers()))
def test_a_json_line_is_one_line_and_reads_back_exactly(value: dict[str, object]) -> None:
    line = json_line(value)
    assert line.isprintable() and line.splitlines() == [line]
    assert json.loads(line) == value


def test_escaping_splitters_and_leaving_text_alone() -> None:
    for splitter in SPLITTERS:
        assert len(escaped(f"a{splitter}b").splitlines()) == 1
    assert escaped("café Kakuma1 -> K2") == "café Kakuma1 -> K2"
    assert escaped("a\\x0ab") == "a\\x5cx0ab"
