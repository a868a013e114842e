"""Issue 13, item 1: a signed request covers every header oncebox reads, and a signature
is used once whatever its spelling.

Before the fix the signature covered only the timestamp, method, target and body, and the
replay guard recorded the raw header while the check compared it after ``.strip()``: one
captured request, replayed with ``\\xa0`` or ``\\x85`` after its signature and a new
``Oncebox-Key``, minted a new record every time (200 of 200 replays in the probe), and a
replayed lease request fenced the real holder out.

The signatures here are computed by hand from the signed string the README documents, not
by :func:`oncebox.engine.tokens.sign`, so the two are checked against each other.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import Oncebox
from oncebox.engine import tokens
from oncebox.engine.tokens import ReplayGuard, check_signature, sign
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.http import create_app
from openapidoc import openapi_document

README = (Path(__file__).parent.parent / "docs" / "http.md").read_text("utf-8")
SIGNED = (
    "content-type",
    "oncebox-key",
    "oncebox-snapshot",
    "oncebox-lease-token",
    "oncebox-device-time",
    "oncebox-delivery-id",
)
DELIVERIES = "/v1/inboxes/ussd/deliveries"


def by_hand(
    key: str, method: str, target: str, stamp: str, headers: Mapping[str, str], body: bytes
) -> str:
    """The documented signed string, spelled out independently of the implementation."""
    lower = {name.lower(): value for name, value in headers.items()}
    lines = ["oncebox-signature-v2", method, target, f"oncebox-timestamp:{stamp}"]
    lines += [f"{name}:{lower[name]}" if name in lower else name for name in SIGNED]
    message = ("\n".join(lines) + "\n").encode("latin-1") + body
    return "sha256=" + hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def signed(
    key: str, method: str, target: str, body: bytes, headers: Mapping[str, str] | None = None
) -> dict[str, str]:
    stamp = str(int(time.time()))
    facts = dict(headers or {})
    return {
        **facts,
        "Oncebox-Timestamp": stamp,
        "Oncebox-Signature": by_hand(key, method, target, stamp, facts, body),
    }


def frame(seq: int, headcount: int = 3) -> bytes:
    return make_frame(seq, "Kakuma1", "MED", headcount, 86).encode()


class Gateway:
    def __init__(self, box: Oncebox, url: str) -> None:
        created = box.create_token("gw", ["ussd", "feed"], ["write", "read"], hmac=True)
        self.box = box
        self.key = str(created.token.hmac_key)
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {created.secret}"}, timeout=30
        )

    def post(self, target: str, body: bytes, headers: Mapping[str, str | bytes]) -> httpx.Response:
        return self.http.post(target, content=body, headers=dict(headers))


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    box = oncebox.open(f"sqlite:///{tmp_path / 'sig.db'}", inboxes=INBOXES)
    with serving(create_app(box)) as url:
        gw = Gateway(box, url)
        yield gw
        gw.http.close()
    box.close()


def refused(response: httpx.Response) -> str:
    assert response.status_code == 401, response.text
    return str(response.json()["detail"])


# -- the replay guard keys on the signature's bytes -------------------------------------------
@pytest.mark.parametrize("suffix", ["\xa0", "\x85", " \xa0", "\t\x85", "\xa0\xa0"])
def test_a_respelled_signature_is_refused_and_mints_nothing(gateway: Gateway, suffix: str) -> None:
    body = frame(1, 7)
    headers = signed(gateway.key, "POST", DELIVERIES, body, {"Oncebox-Key": "rec1-1"})
    assert gateway.post(DELIVERIES, body, headers).status_code == 201
    respelled = (headers["Oncebox-Signature"] + suffix).encode("latin-1")
    for n in range(20):
        replay = {**headers, "Oncebox-Key": f"evil{n}-1", "Oncebox-Signature": respelled}
        refused(gateway.post(DELIVERIES, body, replay))
    assert gateway.box.stats("ussd")["records"] == 1
    assert gateway.box.triage("ussd")["headcount"] == 7


def test_the_same_signature_is_used_once(gateway: Gateway) -> None:
    body = frame(1)
    headers = signed(gateway.key, "POST", DELIVERIES, body, {"Oncebox-Key": "rec1-1"})
    assert gateway.post(DELIVERIES, body, headers).status_code == 201
    assert "replay" in refused(gateway.post(DELIVERIES, body, headers))


def test_a_replayed_lease_request_does_not_fence_the_holder(gateway: Gateway) -> None:
    target, body = "/v1/inboxes/feed/leases", b'{"scope": "S1", "ttl": 60}'
    headers = signed(gateway.key, "POST", target, body, {"Content-Type": "application/json"})
    lease = gateway.post(target, body, headers)
    assert lease.status_code == 201
    for suffix in ("\xa0", "\x85"):
        respelled = (headers["Oncebox-Signature"] + suffix).encode("latin-1")
        refused(gateway.post(target, body, {**headers, "Oncebox-Signature": respelled}))
    (current,) = gateway.box.leases("feed")
    assert current.token == lease.json()["token"]


# -- every header oncebox reads is signed ---------------------------------------------------------
FACTS = {
    "Content-Type": "text/plain",
    "Oncebox-Key": "rec2-2",
    "Oncebox-Snapshot": "S1",
    "Oncebox-Lease-Token": "5",
    "Oncebox-Device-Time": "2030-01-15T08:00:00Z",
    "Oncebox-Delivery-Id": "d-1",
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_a_changed_added_or_dropped_header_breaks_the_signature(
    gateway: Gateway, name: str
) -> None:
    body = frame(2)
    others = {k: v for k, v in FACTS.items() if k not in (name, "Oncebox-Lease-Token")}
    base = {"Oncebox-Key": "rec2-2", **others}
    without = signed(gateway.key, "POST", DELIVERIES, body, base)
    added = {**without, name: FACTS[name] + "0"}
    assert "does not match" in refused(gateway.post(DELIVERIES, body, added))
    with_it = signed(gateway.key, "POST", DELIVERIES, body, {**base, name: FACTS[name]})
    changed = {**with_it, name: FACTS[name] + "0"}
    assert "does not match" in refused(gateway.post(DELIVERIES, body, changed))
    dropped = {k: v for k, v in with_it.items() if k != name}
    assert "does not match" in refused(gateway.post(DELIVERIES, body, dropped))
    assert gateway.box.stats("ussd")["records"] == 0


def test_a_request_signed_over_its_headers_is_accepted(gateway: Gateway) -> None:
    body = frame(2)
    facts = {k: v for k, v in FACTS.items() if k != "Oncebox-Lease-Token"}
    response = gateway.post(DELIVERIES, body, signed(gateway.key, "POST", DELIVERIES, body, facts))
    assert response.status_code == 201, response.text
    assert gateway.box.stats("ussd")["records"] == 1


def test_an_unknown_or_repeated_oncebox_header_is_refused(gateway: Gateway) -> None:
    body = frame(3)
    headers = signed(gateway.key, "POST", DELIVERIES, body, {"Oncebox-Key": "rec3-3"})
    unknown = gateway.post(DELIVERIES, body, {**headers, "Oncebox-Priority": "high"})
    assert "oncebox-priority" in refused(unknown)
    twice = [*headers.items(), ("Oncebox-Key", "rec9-9")]
    again = gateway.http.post(DELIVERIES, content=body, headers=twice)
    assert "more than once" in refused(again)
    assert gateway.box.stats("ussd")["records"] == 0


# -- the header is parsed strictly ----------------------------------------------------------
@pytest.mark.parametrize(
    "spell",
    [
        lambda good: good + "\xa0",
        lambda good: good + "\x85",
        lambda good: good.upper(),
        lambda good: "SHA256=" + good[7:],
        lambda good: good.replace("=", "= "),
        lambda good: good[:-1],
        lambda good: good + "0",
        lambda good: good + "," + good,
        lambda good: good[7:],
        lambda good: "sha512=" + good[7:],
    ],
)
def test_a_signature_not_spelled_exactly_is_refused_on_first_use(
    gateway: Gateway, spell: object
) -> None:
    body = frame(4)
    headers = signed(gateway.key, "POST", DELIVERIES, body, {"Oncebox-Key": "rec4-4"})
    assert callable(spell)
    bent = str(spell(headers["Oncebox-Signature"])).encode("latin-1")
    refused(gateway.post(DELIVERIES, body, {**headers, "Oncebox-Signature": bent}))
    assert gateway.box.stats("ussd")["records"] == 0
    # The exact spelling still works afterwards: the refusal did not use it up.
    assert gateway.post(DELIVERIES, body, headers).status_code == 201


# -- the pure check, the helper and the documentation ---------------------------------------
KEY, NOW = "k3y", 1_800_000_000.0


def raw(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode("latin-1")) for k, v in headers.items()]


def test_sign_matches_the_documented_string() -> None:
    facts = {"Oncebox-Key": "rec1-1", "Content-Type": "text/plain"}
    stamp = str(int(NOW))
    expected = by_hand(KEY, "POST", "/v1/p?x=1", stamp, facts, b"body")
    assert sign(KEY, stamp, "POST", "/v1/p?x=1", b"body", facts) == expected
    headers = raw({**facts, "Oncebox-Timestamp": stamp, "Oncebox-Signature": expected})
    digest = check_signature(KEY, headers, "POST", b"/v1/p?x=1", b"body", NOW)
    assert digest == bytes.fromhex(expected[7:])


def test_an_empty_header_is_not_an_absent_one() -> None:
    stamp = str(int(NOW))
    absent = sign(KEY, stamp, "POST", "/v1/p", b"")
    empty = sign(KEY, stamp, "POST", "/v1/p", b"", {"Oncebox-Snapshot": ""})
    assert absent != empty
    headers = raw({"Oncebox-Timestamp": stamp, "Oncebox-Signature": absent, "Oncebox-Snapshot": ""})
    with pytest.raises(tokens.SignatureRefused, match="does not match"):
        check_signature(KEY, headers, "POST", b"/v1/p", b"", NOW)


def test_the_replay_guard_keys_on_bytes() -> None:
    guard = ReplayGuard(window=300, clock=lambda: NOW)
    digest = bytes(range(32))
    assert guard.first_use(digest)
    assert not guard.first_use(bytes(digest))


def readme_example() -> tuple[str, str, str]:
    """The key, the signed string and the digest of the README's worked example."""
    section = README.split("**Signed requests.**", 1)[1].split("**Delivering.**", 1)[0]
    key = re.search(r"HMAC key `([^`]+)`", section)
    string = re.search(r"```text\n(oncebox-signature-v2\n.*?)\n```", section, re.S)
    digest = re.search(r"sha256=([0-9a-f]{64})", section)
    assert key and string and digest, "the README's worked example is missing"
    return key.group(1), string.group(1), digest.group(1)


def test_the_readme_worked_example_reproduces() -> None:
    key, text, digest = readme_example()
    assert hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest() == digest
    lines = text.split("\n")
    headers = dict(line.split(":", 1) for line in lines[4:10] if ":" in line)
    stamp, body = lines[3].split(":", 1)[1], "\n".join(lines[10:]).encode()
    assert sign(key, stamp, lines[1], lines[2], body, headers) == f"sha256={digest}"
    openssl = shutil.which("openssl")
    if openssl:
        out = subprocess.run(
            [openssl, "dgst", "-sha256", "-hmac", key],
            input=text.encode(),
            capture_output=True,
            check=True,
        ).stdout.decode()
        assert out.strip().endswith(digest)


def test_the_openapi_document_publishes_the_signed_string() -> None:
    schema = openapi_document()
    operation = schema["paths"]["/v1/inboxes/{inbox}/deliveries"]["post"]
    params = {p["name"]: p for p in operation["parameters"] if p["in"] == "header"}
    assert "oncebox-signature-v2" in params["Oncebox-Signature"]["description"]
    assert "Oncebox-Timestamp" in params
    # Every authenticated operation documents them; the public ones do not.
    for path, operations in schema["paths"].items():
        for op in operations.values():
            names = {p["name"] for p in op.get("parameters", []) if p["in"] == "header"}
            if op.get("security"):
                assert {"Oncebox-Timestamp", "Oncebox-Signature"} <= names, path
            else:
                assert "Oncebox-Signature" not in names, path
