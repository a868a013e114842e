"""Fuzz targets for reliability/fuzz.py: the JSON event codec, the H1 codec, the HMAC check
and the NDJSON line adapter in front of every codec.

Why a module of its own: the same byte-level targets run under atheris (libFuzzer,
coverage-guided, in a subprocess) and under the seeded mutation fuzzer below (for when
atheris is not installed, and for the bounded run in the test suite). Each target takes
one input and returns an outcome label; anything else it raises is a crash: a codec may
refuse only with :class:`Invalid` and a documented reason, and every target also checks
an oracle on what it accepts (canonical form is a fixed point, the strict reader is never
laxer than the standard one, a frame's trailer really is its cksum, the signature check
accepts exactly the fresh, matching signatures, a line is never lost to the adapter).
"""

from __future__ import annotations

import json
import random
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncebox.engine.tokens import SIGNATURE_WINDOW, SignatureRefused, check_signature, sign
from oncebox.formats import Delivery, Invalid, JsonEventCodec, Unreadable, UssdH1Codec, get_codec
from oncebox.formats.canonical import canonical
from oncebox.formats.cksum import cksum
from oncebox.formats.strictjson import loads
from oncebox.formats.ussd_h1 import MAX_BYTES as H1_MAX_BYTES
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.lines import delivery_from_line

JSON_EVENT = JsonEventCodec()
USSD = UssdH1Codec()
HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent.parent / "shared" / "testdata" / "JSONTestSuite" / "test_parsing"
HANG_SECONDS = 1.0  # an input slower than this is a hang

# The documented rejection reasons (README "Rules, in brief"), plus bad_shape, which the
# codec raises for a JSON text that is not an object.
JSON_REASONS = frozenset(
    {
        "unknown_field",
        "missing_field",
        "bad_schema_version",
        "bad_field",
        "bad_notification_type",
        "bad_event_time",
        "bad_payload",
        "duplicate_member",
        "invalid_unicode",
        "non_finite_number",
        "too_deep",
        "too_large",
        "bad_json",
        "bad_shape",
    }
)
H1_REASONS = frozenset(
    {"bad_format", "bad_checksum", "too_large", "missing_key", "bad_key", "key_mismatch"}
)


class OracleFailure(AssertionError):
    """A target accepted or refused something it must not have."""


def _oracle(ok: bool, why: str) -> None:
    if not ok:
        raise OracleFailure(why)


# -- the JSON event codec -------------------------------------------------------------------
def _stdlib_accepts(data: bytes) -> bool:
    """Whether ``data`` is JSON to the standard library's grammar (NaN and friends refused;
    numbers kept as text, so Python's 4,300-digit int limit is not mistaken for grammar)."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        json.loads(data.decode("utf-8"), parse_constant=refuse, parse_int=str, parse_float=str)
    except (ValueError, RecursionError):
        return False
    return True


def json_target(data: bytes) -> str:
    """The strict reader and the json-event codec on one input."""
    try:
        value = loads(data, max_depth=64)
    except Invalid as exc:
        _oracle(exc.reason in JSON_REASONS, f"strict reader refused with {exc.reason!r}")
    else:
        # Never laxer than the standard library, and canonical form is a fixed point.
        _oracle(_stdlib_accepts(data), "the strict reader took what json.loads refuses")
        once = canonical(value)
        _oracle(canonical(loads(once, max_depth=64)) == once, "canonical form moved")
    try:
        decoded = JSON_EVENT.decode(Delivery(body=data))
    except Invalid as exc:
        _oracle(exc.reason in JSON_REASONS, f"json-event refused with {exc.reason!r}")
        _oracle(str(exc).startswith(exc.reason), "Invalid's message does not lead with its reason")
        return f"invalid:{exc.reason}"
    again = JSON_EVENT.decode(Delivery(body=decoded.content))
    _oracle(again == decoded, "decoding the canonical content gave something else")
    _oracle(len(decoded.content) <= len(data), "canonical content longer than its source")
    return "accepted"


# -- the H1 codec ------------------------------------------------------------------------------
def h1_target(data: bytes) -> str:
    """``frame_id`` line, newline, frame: the gateway's two facts."""
    raw_key, newline, frame = data.partition(b"\n")
    if not newline:
        raw_key, frame = b"rec1-1", data
    key = raw_key.decode("latin-1")  # an HTTP header value, as the service reads it
    try:
        decoded = USSD.decode(Delivery(body=frame, key=key))
    except Invalid as exc:
        _oracle(exc.reason in H1_REASONS, f"ussd-h1 refused with {exc.reason!r}")
        return f"invalid:{exc.reason}"
    body = frame[: frame.rindex(b"|#")]
    _oracle(decoded.content == frame and decoded.key == key, "content or key changed")
    _oracle(len(frame) <= H1_MAX_BYTES, "a frame over the bound passed")
    _oracle(int(frame[-2:], 16) == cksum(body) % 256, "a trailer that is not the cksum passed")
    tag, seq, site, need, headcount, pri = body.split(b"|")
    f = decoded.fields
    spelled = (tag, int(seq), site.decode(), need.decode(), int(headcount), int(pri))
    _oracle(
        spelled == (b"H1", f["seq"], f["site"], f["need"], f["headcount"], f["pri"]),
        "the fields do not spell the frame",
    )
    return "accepted"


# -- the HMAC signature check --------------------------------------------------------------------
KEY = "fuzzing-key-not-a-secret"
NOW = 1_800_000_000.0


def signature_target(data: bytes) -> str:
    """A mode byte, then timestamp, signature, method, target, Oncebox-Key and body on lines.

    Mode bits: 1 a timestamp near the server's (within or past the window), 2 the correct
    signature, 4 the correct signature with one character changed, 8/16 no timestamp/no
    signature header, 32 the correct signature with the signature line's bytes after it
    (a respelling: trailing whitespace, ``\\xa0``, a second value), 64 an Oncebox-Key
    header. Header values and the target are the raw bytes the service would see.
    """
    mode = data[0] if data else 0
    parts = data[1:].split(b"\n", 5)
    parts += [b""] * (6 - len(parts))
    ts_raw, sig_raw, method_raw, target_raw, key_raw, body = parts
    timestamp: bytes | None = ts_raw
    if mode & 1:
        offset = int.from_bytes(ts_raw[:2].ljust(2, b"\0"), "big", signed=True) // 64
        timestamp = str(int(NOW) + offset).encode()  # -512..511 s: either side of the window
    method = method_raw.decode("latin-1") or "POST"
    target = target_raw or b"/v1/inboxes/ussd/deliveries"
    facts = {"oncebox-key": key_raw} if mode & 64 else {}
    good = sign(KEY, (timestamp or b"").decode("latin-1"), method, target.decode("latin-1"),
                body, facts).encode()  # fmt: skip
    signature: bytes | None = sig_raw
    if mode & 2:
        signature = good
    elif mode & 4:
        at = 7 + (sig_raw[0] if sig_raw else 0) % (len(good) - 7)
        signature = good[:at] + (b"0" if good[at : at + 1] != b"0" else b"1") + good[at + 1 :]
    elif mode & 32:
        signature = good + sig_raw
    headers = [(b"oncebox-key", key_raw)] if mode & 64 else []
    if timestamp is not None and not mode & 8:
        headers.append((b"oncebox-timestamp", timestamp))
    if signature is not None and not mode & 16:
        headers.append((b"oncebox-signature", signature))
    try:
        digest: bytes | None = check_signature(KEY, headers, method, target, body, NOW)
        refused = ""
    except SignatureRefused as exc:
        digest, refused = None, str(exc)
    fresh = (
        not mode & 8
        and timestamp is not None
        and re.fullmatch(rb"[0-9]{1,12}", timestamp) is not None
        and abs(NOW - int(timestamp)) <= SIGNATURE_WINDOW
    )
    matches = not mode & 16 and signature == good  # byte for byte: one spelling only
    _oracle(
        (digest is not None) == (fresh and matches),
        f"check_signature said {refused or 'good'!r} for fresh={fresh} matching={matches}",
    )
    if digest is not None:
        _oracle(digest == bytes.fromhex(good[7:].decode()), "the decoded signature is not it")
        return "accepted"
    return "refused:" + (
        "missing"
        if "need" in refused
        else "timestamp"
        if "Timestamp" in refused
        else "spelling"
        if "lowercase hex" in refused
        else "mismatch"
    )


# -- the NDJSON line adapter ---------------------------------------------------------------------
LINE_CODECS = ("ussd-h1", "feed", "keyed", "json-event", "custom")  # custom: the generic form
LINE_FIELDS = ("frame", "frame_id", "payload", "payload_b64", "body", "body_b64", "key",
               "lease_token", "snapshot_id", "device_time", "delivery_id")  # fmt: skip


def _storable(text: str | None) -> bool:
    """Text every store holds: UTF-8 (no lone surrogate) without NUL (PostgreSQL)."""
    if text is None:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def lines_target(data: bytes) -> str:
    """A codec byte, then one NDJSON line: the adapter, then the codec behind it.

    The adapter must not raise; what it gives must be storable (key and facts as text a
    store holds, a lease token of 0 to 2**63 - 1); an unreadable line is kept whole; and
    the codec may refuse only with Invalid. (Surfaces strip the newline themselves.)
    """
    codec = LINE_CODECS[data[0] % len(LINE_CODECS)] if data else "ussd-h1"
    line = data[1:]
    delivery = delivery_from_line(codec, line)
    _oracle(isinstance(delivery, Delivery), "the adapter gave no delivery")
    facts = (delivery.key, delivery.snapshot_id, delivery.device_time, delivery.delivery_id)
    _oracle(all(_storable(f) for f in facts), f"a fact no store can hold: {facts!r:.200}")
    token = delivery.lease_token
    _oracle(token is None or (type(token) is int and 0 <= token < 2**63), f"token {token!r}")
    if isinstance(delivery, Unreadable):
        _oracle(delivery.body == line.rstrip(b"\r\n"), "an unreadable line was not kept whole")
        return "unreadable"
    try:
        get_codec("keyed" if codec == "custom" else codec).decode(delivery)
    except Invalid as exc:
        return f"invalid:{exc.reason}"
    return "accepted"


TARGETS: dict[str, Callable[[bytes], str]] = {
    "json-event": json_target,
    "ussd-h1": h1_target,
    "hmac-signature": signature_target,
    "ndjson-lines": lines_target,
}


# -- seed corpora and dictionaries -----------------------------------------------------------------
def _event(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema_version": 1,
        "source": "fuzz",
        "subscription": "sub-1",
        "notification_id": "n-1",
        "seller_id": "S1",
        "sku": "SKU-1",
        "marketplace_id": "M1",
        "notification_type": "listing_issues_changed",
        "event_time": "2030-06-15T08:09:10Z",
        "payload": {"status": "ACTIVE", "issues": [{"code": 7, "ratio": 0.5}], "ok": True},
    }
    base.update(changes)
    return base


def seeds(target: str) -> list[bytes]:
    """A small seed corpus per target (JSONTestSuite files are read where they lie)."""
    if target == "json-event":
        out = [
            json.dumps(_event()).encode(),
            json.dumps(_event(payload={}), indent=2).encode(),
            json.dumps(_event(payload={"n": [1, -0.0, 1e300, "\u00e9\ud83d\ude00"]})).encode(),
            json.dumps(_event(payload={"deep": [[[[{"a": [[[]]]}]]]]})).encode(),
            json.dumps(_event(notification_type="listing_status_changed")).encode(),
        ]
        if CORPUS.is_dir():
            out += [p.read_bytes() for p in sorted(CORPUS.glob("*.json"))]
        return out
    if target == "ussd-h1":
        return [
            f"rec{seq}-{seq}\n{make_frame(seq, site, need, count, pri)}".encode()
            for seq, site, need, count, pri in [
                (1, "Kakuma1", "MED", 3, 86),
                (2, "Dadaab", "SHE", 8, 71),
                (999999999, "Z", "WAT", 999999999, 0),
                (7, "a1B2c3D4", "FOO", 0, 999999999),
            ]
        ] + [b"k\nH1|1|x|ABC|1|1|#ZZ", b"H1|", b"rec-1\nH1|01|S|MED|3|86|#00"]
    if target == "ndjson-lines":
        frame = make_frame(1, "Kakuma1", "MED", 3, 86)
        lines = [
            json.dumps({"frame_id": "rec1-1", "frame": frame, "device_time": "t"}),
            json.dumps({"payload": "row-A", "snapshot_id": "S1", "lease_token": 7}),
            json.dumps({"body_b64": "eA==", "key": "k1", "delivery_id": "d"}),
            json.dumps(_event()),
            frame,
            "[" * 3_000,
            '{"frame_id": "r\\u0000", "frame": "x", "payload": "\\ud800"}',
        ]
        return [bytes([i]) + line.encode() for i in range(len(LINE_CODECS)) for line in lines]
    body = b'{"scope": "S1", "ttl": 60}'
    return [
        bytes([mode]) + b"1800000000\nsha256=00\nPOST\n/v1/inboxes/feed/leases\nrec1-1\n" + body
        for mode in (0, 1, 2, 3, 4, 5, 9, 18, 31, 33, 35, 67, 99)
    ]


DICTIONARY: dict[str, list[bytes]] = {
    "json-event": [
        *(f'"{name}"'.encode() for name in _event()),
        b'"listing_status_changed"',
        b'"2024-02-29T23:59:59Z"',
        b"NaN",
        b"-Infinity",
        b"1e999",
        b"-0",
        b"1.0",
        b'"\\ud800"',
        b'"\\ud83d\\ude00"',
        b"\\u0000",
        b"[[[[[[[[[[[[[[[[[[[[[",
        b"{}",
        b"[]",
        b"null",
        b"\xef\xbb\xbf",
        b"\xed\xa0\x80",
        b"9" * 64,
    ],
    "ussd-h1": [b"H1|", b"|#", b"|MED|", b"\n", b"|00", b"999999999", b"1000000000"],
    "hmac-signature": [b"sha256=", b"\n", b" ", b"\xa0", b"GET", b"?a=1", b"1800000300"],
    "ndjson-lines": [
        *(f'"{name}":'.encode() for name in LINE_FIELDS),
        b"[[[[[[[[[[[[[[[[[[[[[",
        b'"\\u0000"',
        b'"\\ud800"',
        b"NaN",
        b"9223372036854775808",
        b"\xff",
        b"\r\n",
    ],
}


def libfuzzer_dictionary(target: str) -> str:
    """DICTIONARY[target] in libFuzzer's ``-dict`` format."""

    def quote(token: bytes) -> str:
        return "".join(
            chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02X}" for b in token
        )

    return "".join(f'kw{i}="{quote(t)}"\n' for i, t in enumerate(DICTIONARY[target]))


# -- running a target and keeping figures ---------------------------------------------------------
@dataclass
class Stats:
    """Executions and what they came to; crashes and hangs keep their first inputs."""

    target: str
    executions: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    crashes: int = 0
    crash_kinds: Counter[str] = field(default_factory=Counter)
    hangs: int = 0
    slowest: float = 0.0
    first_crash: str | None = None  # repr of the input, then the error
    first_hang: str | None = None

    def run(self, fn: Callable[[bytes], str], data: bytes) -> str | None:
        """One execution; its outcome label, or None for a crash."""
        self.executions += 1
        started = time.perf_counter()
        outcome: str | None = None
        try:
            outcome = fn(data)
            self.outcomes[outcome] += 1
        except Exception as exc:  # any of them is a crash: that is the point
            self.crashes += 1
            kind = f"{type(exc).__name__}: {str(exc)[:120]}"
            self.crash_kinds[kind] += 1
            if self.first_crash is None:
                self.first_crash = f"{data[:2000]!r} -> {kind}"
        elapsed = time.perf_counter() - started
        self.slowest = max(self.slowest, elapsed)
        if elapsed > HANG_SECONDS:
            self.hangs += 1
            if self.first_hang is None:
                self.first_hang = f"{data[:2000]!r} took {elapsed:.2f} s"
        return outcome

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "executions": self.executions,
            "outcomes": dict(self.outcomes),
            "crashes": self.crashes,
            "crash_kinds": dict(self.crash_kinds),
            "hangs": self.hangs,
            "slowest": self.slowest,
            "first_crash": self.first_crash,
            "first_hang": self.first_hang,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stats:
        return cls(
            target=data["target"],
            executions=data["executions"],
            outcomes=Counter(data["outcomes"]),
            crashes=data["crashes"],
            crash_kinds=Counter(data["crash_kinds"]),
            hangs=data["hangs"],
            slowest=data["slowest"],
            first_crash=data["first_crash"],
            first_hang=data["first_hang"],
        )


# -- the fallback: a seeded mutation fuzzer ----------------------------------------------------
INTERESTING = [b"0", b"-1", b"1e999", b"NaN", b"9" * 4301, b"\x00", b"\xff", b"\n", b'"', b"\\"]


class Mutator:
    """A seeded byte mutator with a little feedback: an input whose outcome label was not
    seen before joins the corpus. Deterministic for a seed, so a crash replays."""

    def __init__(self, seed: int, corpus: list[bytes], dictionary: list[bytes]) -> None:
        self.rnd = random.Random(seed)
        self.corpus = list(corpus) or [b""]
        self.dictionary = dictionary + INTERESTING
        self.seen: set[str] = set()

    def inputs(self, count: int) -> Iterator[bytes]:
        for i in range(count):
            if i < len(self.corpus):
                yield self.corpus[i]
            else:
                yield self.mutate(self.rnd.choice(self.corpus))

    def learn(self, data: bytes, outcome: str) -> None:
        if outcome not in self.seen:
            self.seen.add(outcome)
            self.corpus.append(data)

    def mutate(self, data: bytes) -> bytes:
        rnd = self.rnd
        out = bytearray(data)
        for _ in range(rnd.choice([1, 1, 2, 3, 4, 8])):
            op = rnd.randrange(9)
            at = rnd.randrange(len(out) + 1)
            if op == 0 and out:
                i = rnd.randrange(len(out))
                out[i] ^= 1 << rnd.randrange(8)
            elif op == 1 and out:
                out[rnd.randrange(len(out))] = rnd.randrange(256)
            elif op == 2:
                out[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4)))
            elif op == 3 and out:
                end = min(len(out), at + rnd.randint(1, 16))
                del out[at:end]
            elif op == 4 and out:
                start = rnd.randrange(len(out))
                chunk = out[start : start + rnd.randint(1, 64)]
                out[at:at] = chunk * rnd.choice([1, 2, 16])
            elif op in (5, 6):
                out[at:at] = rnd.choice(self.dictionary)
            elif op == 7:
                other = rnd.choice(self.corpus)
                cut = rnd.randrange(len(other) + 1)
                out = out[:at] + bytearray(other[cut:])
            elif op == 8 and out:
                del out[rnd.randrange(len(out)) :]
        return bytes(out[:70_000])


class _Hang(Exception):
    """Raised by the backstop alarm inside a target that runs far too long."""


def mutation_fuzz(target: str, executions: int, seed: int) -> Stats:
    """Run ``target`` ``executions`` times on seeded mutations of its seed corpus."""
    fn = TARGETS[target]
    stats = Stats(target)
    mutator = Mutator(seed, seeds(target), DICTIONARY[target])

    def alarm(_signum: int, _frame: Any) -> None:
        raise _Hang

    # A backstop against a real infinite loop (the per-input timer counts anything over
    # HANG_SECONDS); an input that trips it is counted as a crash and as a hang.
    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        for data in mutator.inputs(executions):
            signal.setitimer(signal.ITIMER_REAL, 30.0)
            try:
                outcome = stats.run(fn, data)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if outcome is not None:
                mutator.learn(data, outcome)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return stats
