"""Fuzzing, bounded: codec properties, the fuzz targets, hostile requests over real HTTP.

The long run is ``.venv/bin/python reliability/fuzz.py`` (atheris, schemathesis with all
checks against ``oncebox serve``). Here: Hypothesis properties that every codec, the
``Invalid`` contract and the canonical form keep (adding to tests/test_properties.py and
tests/test_formats.py), a few thousand executions of each fuzz target, negative controls
showing the fuzzer and its oracles can fail, and the explicit HTTP probes.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import json
import re
import string
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import Delivery, ManualClock, Verdict
from oncebox.domain import UNSTORED
from oncebox.formats import Invalid, codec_names, get_codec, identify
from oncebox.formats.canonical import canonical, canonical_json
from oncebox.formats.feed import MAX_BYTES as FEED_MAX
from oncebox.formats.json_event import IDENTITY_FIELDS, JsonEventCodec
from oncebox.formats.strictjson import loads
from oncebox.formats.ussd_h1 import UssdH1Codec, make_frame
from oncebox.surfaces.http import create_app

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))
import _fuzz_targets as targets
import fuzz

pytestmark = pytest.mark.slow  # the fuzzing campaign, bounded, and its controls

PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON_EVENT = JsonEventCodec()
USSD = UssdH1Codec()
FEED = get_codec("feed")
REASONS: dict[str, frozenset[str]] = {
    "json-event": targets.JSON_REASONS,
    "ussd-h1": targets.H1_REASONS,
    "feed": frozenset({"bad_format", "too_large"}),
}


# -- strategies --------------------------------------------------------------------------------
def _no_control(text: str) -> bool:
    return text == text.strip() and not any(ord(c) < 0x20 for c in text)


bounded = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40).filter(
    _no_control
)
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=["Cs"]), max_size=12),
)
json_tree = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(st.characters(blacklist_categories=["Cs"]), max_size=6), inner,
                        max_size=4),
    ),
    max_leaves=20,
)  # fmt: skip
times = st.datetimes(
    min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31, 23, 59, 59)
).map(
    lambda t: f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"
)
events = st.fixed_dictionaries(
    {
        "schema_version": st.just(1),
        "source": bounded,
        "subscription": bounded,
        "notification_id": bounded,
        "seller_id": bounded,
        "sku": bounded,
        "marketplace_id": bounded,
        "notification_type": st.sampled_from(["listing_status_changed", "listing_issues_changed"]),
        "event_time": times,
        "payload": st.dictionaries(st.text(max_size=8), json_tree, max_size=5),
    }
)


def spell(event: dict[str, Any], order: list[int], indent: int | None, ascii_only: bool) -> bytes:
    """One of many texts of ``event``: member order, whitespace and escaping vary."""
    items = list(event.items())
    shuffled = dict(items[i] for i in order)
    return json.dumps(shuffled, indent=indent, ensure_ascii=ascii_only).encode("utf-8")


def _event_text(payload_text: str) -> bytes:
    base = json.dumps({**targets._event(), "payload": {"x": "PAYLOAD"}})
    return base.replace('"PAYLOAD"', payload_text).encode()


# -- every codec --------------------------------------------------------------------------------
deliveries = st.builds(
    Delivery,
    body=st.one_of(
        st.binary(max_size=300),
        st.sampled_from([s for s in targets.seeds("ussd-h1")] + targets.seeds("json-event")[:5]),
        st.text(string.printable, max_size=200).map(str.encode),
    ),
    key=st.one_of(st.none(), st.text(max_size=20), st.sampled_from(["rec1-1", "a.b:c_d-9"])),
    snapshot_id=st.one_of(st.none(), st.text(max_size=10)),
    device_time=st.one_of(st.none(), st.text(max_size=10)),
    lease_token=st.one_of(st.none(), st.integers(min_value=0, max_value=2**63 - 1)),
)


@PROPS
@given(delivery=deliveries)
def test_every_codec_decodes_deterministically_or_refuses_with_a_documented_reason(
    delivery: Delivery,
) -> None:
    # The built-in codecs: other tests register deliberately broken codecs of their own
    # (their failures are the engine's to contain, which test_engine checks).
    assert set(REASONS) <= set(codec_names())
    for name in REASONS:
        codec = get_codec(name)
        try:
            decoded = codec.decode(delivery)
        except Invalid as exc:
            assert exc.reason in REASONS.get(name, {exc.reason}), (name, exc.reason)
            continue
        assert codec.decode(delivery) == decoded  # pure: the same input, the same result
        found = identify(codec, decoded)
        assert len(found.witness) == 64 and found.identity
        if codec.identity == "content":
            assert found.identity == found.witness


@PROPS
@given(reason=st.text(max_size=30), detail=st.text(max_size=60))
def test_invalid_keeps_its_reason_and_is_a_value_error(reason: str, detail: str) -> None:
    exc = Invalid(reason, detail)
    assert isinstance(exc, ValueError)
    assert (exc.reason, exc.detail) == (reason, detail)
    assert str(exc) == (f"{reason}: {detail}" if detail else reason)


# -- json-event ---------------------------------------------------------------------------------
@PROPS
@given(event=events, data=st.data())
def test_json_event_round_trips_whatever_the_spelling(event: dict[str, Any], data: Any) -> None:
    order = data.draw(st.permutations(range(len(event))))
    text = spell(event, order, data.draw(st.sampled_from([None, 0, 2])), data.draw(st.booleans()))
    decoded = JSON_EVENT.decode(Delivery(body=text))
    plain = JSON_EVENT.decode(Delivery(body=json.dumps(event).encode()))
    assert decoded == plain  # member order, whitespace and escaping are not content
    for name in (*IDENTITY_FIELDS, "seller_id", "sku", "marketplace_id", "event_time"):
        assert decoded.fields[name] == event[name]
    assert decoded.key == canonical([event[name] for name in IDENTITY_FIELDS]).decode()
    assert JSON_EVENT.decode(Delivery(body=decoded.content)) == decoded  # a fixed point
    assert json.loads(decoded.content, parse_int=str, parse_float=str) == json.loads(
        json.dumps(event), parse_int=str, parse_float=str
    )


@PROPS
@given(event=events, name=st.sampled_from(sorted(targets._event())), again=json_tree)
def test_a_duplicate_member_is_always_refused(event: dict[str, Any], name: str, again: Any) -> None:
    text = json.dumps(event)
    duplicated = text[:-1] + f", {json.dumps(name)}: {json.dumps(again)}}}"
    with pytest.raises(Invalid) as refused:
        JSON_EVENT.decode(Delivery(body=duplicated.encode()))
    assert refused.value.reason == "duplicate_member"


@PROPS
@given(levels=st.integers(min_value=0, max_value=400), opener=st.sampled_from(["[", '{"k":']))
def test_nesting_passes_up_to_twenty_and_is_too_deep_beyond(levels: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    body = _event_text(opener * levels + "0" + closer * levels)  # depth 2 + levels
    if 2 + levels <= 20:
        assert JSON_EVENT.decode(Delivery(body=body)).fields["source"] == "fuzz"
    else:
        with pytest.raises(Invalid) as refused:
            JSON_EVENT.decode(Delivery(body=body))
        assert refused.value.reason == "too_deep"


@PROPS
@given(
    number=st.one_of(
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1E400", "2e308"]),
        st.integers(min_value=309, max_value=10**6).map(lambda e: f"1.5e{e}"),
    )
)
def test_non_finite_numbers_are_refused(number: str) -> None:
    with pytest.raises(Invalid) as refused:
        JSON_EVENT.decode(Delivery(body=_event_text(number)))
    assert refused.value.reason == "non_finite_number"


@PROPS
@given(digits=st.integers(min_value=1, max_value=20_000), sign=st.sampled_from(["", "-"]))
@example(digits=4_301, sign="")
def test_integers_of_any_length_are_kept_digit_for_digit(digits: int, sign: str) -> None:
    number = sign + "7" * digits
    body = _event_text(number)
    if len(body) > 65_536:
        return
    decoded = JSON_EVENT.decode(Delivery(body=body))
    assert f'"x":{number}}}'.encode() in decoded.content


# -- ussd-h1 ------------------------------------------------------------------------------------
FRAME_ID_CHARS = string.ascii_letters + string.digits + "_.:-"
frame_ids = st.text(FRAME_ID_CHARS, min_size=1, max_size=128)
counts = st.integers(min_value=0, max_value=10**9 - 1)
sites = st.text(string.ascii_letters + string.digits, min_size=1, max_size=8)
needs = st.text(string.ascii_uppercase, min_size=3, max_size=3)
NAMES_A_SEQ = re.compile(r"-[0-9]+\Z")


@st.composite
def frame_ids_for(draw: st.DrawFn, seq: int) -> str:
    """A frame id the gateway could send with frame ``seq``: one naming no seq (no
    ``-digits`` end, as the seed's ``rec1``), or ``rec_id-seq`` with the frame's own seq
    (any other seq is ``key_mismatch``, tested below)."""
    if draw(st.booleans()):
        return draw(frame_ids.filter(lambda key: not NAMES_A_SEQ.search(key)))
    rec_id = draw(st.text(FRAME_ID_CHARS, min_size=1, max_size=128 - len(f"-{seq}")))
    return f"{rec_id}-{seq}"


@PROPS
@given(data=st.data(), seq=counts, site=sites, need=needs, headcount=counts, pri=counts,
       upper=st.booleans())  # fmt: skip
def test_h1_frames_round_trip_under_any_valid_frame_id(
    data: st.DataObject, seq: int, site: str, need: str, headcount: int, pri: int, upper: bool
) -> None:
    key = data.draw(frame_ids_for(seq))
    text = make_frame(seq, site, need, headcount, pri)
    if upper:
        text = text[:-2] + text[-2:].upper()
    decoded = USSD.decode(Delivery(body=text.encode(), key=key))
    assert decoded.content == text.encode() and decoded.key == key  # kept as sent
    assert decoded.fields == {
        "seq": seq, "site": site, "need": need, "headcount": headcount, "pri": pri
    }  # fmt: skip
    assert identify(USSD, decoded).identity == key


@PROPS
@given(rec_id=st.text(FRAME_ID_CHARS, min_size=1, max_size=100), seq=counts, named=counts)
def test_a_frame_id_naming_another_seq_is_a_key_mismatch(rec_id: str, seq: int, named: int) -> None:
    if str(named) == str(seq):
        named += 1
    frame = make_frame(seq, "S", "MED", 3, 86).encode()
    with pytest.raises(Invalid) as refused:
        USSD.decode(Delivery(body=frame, key=f"{rec_id}-{named}"))
    assert refused.value.reason == "key_mismatch"


def _unusable(key: str) -> bool:
    return not re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", key)


@PROPS
@given(key=st.text(max_size=140).filter(_unusable))
def test_an_h1_frame_without_a_usable_frame_id_names_the_key(key: str) -> None:
    with pytest.raises(Invalid) as refused:
        USSD.decode(Delivery(body=make_frame(1, "S", "MED", 3, 86).encode(), key=key))
    assert refused.value.reason == ("bad_key" if key else "missing_key")


@PROPS
@given(field=st.sampled_from([0, 3, 4]), digits=st.integers(min_value=10, max_value=40))
def test_h1_numbers_over_nine_digits_are_bad_format(field: int, digits: int) -> None:
    values: list[Any] = [1, "S", "MED", 3, 86]
    values[field] = int("9" * digits)
    with pytest.raises(Invalid) as refused:
        USSD.decode(Delivery(body=make_frame(*values).encode(), key="rec-1"))
    assert refused.value.reason in {"bad_format", "too_large"}


# -- feed ---------------------------------------------------------------------------------------
@PROPS
@given(
    body=st.binary(min_size=1, max_size=2_000),
    snapshots=st.lists(st.one_of(st.none(), st.text(max_size=8)), min_size=2, max_size=2),
    device=st.one_of(st.none(), st.text(max_size=8)),
)
def test_feed_content_is_the_payload_whatever_the_transport_facts(
    body: bytes, snapshots: list[str | None], device: str | None
) -> None:
    first = FEED.decode(Delivery(body=body, snapshot_id=snapshots[0], device_time=device))
    second = FEED.decode(Delivery(body=body, snapshot_id=snapshots[1], lease_token=7))
    assert first.content == second.content == body
    assert identify(FEED, first) == identify(FEED, second)


@pytest.mark.parametrize(("size", "reason"), [(0, "bad_format"), (FEED_MAX + 1, "too_large")])
def test_feed_bounds(size: int, reason: str) -> None:
    with pytest.raises(Invalid) as refused:
        FEED.decode(Delivery(body=b"x" * size))
    assert refused.value.reason == reason
    assert FEED.decode(Delivery(body=b"x" * FEED_MAX)).content == b"x" * FEED_MAX


# -- canonical form -----------------------------------------------------------------------------
@PROPS
@given(value=json_tree, indent=st.sampled_from([None, 1]), ascii_only=st.booleans())
def test_canonical_form_reads_back_as_the_same_value(
    value: Any, indent: int | None, ascii_only: bool
) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    once = canonical(loads(text, max_depth=64))

    def read(raw: str | bytes) -> Any:
        return json.loads(raw, parse_int=str, parse_float=str)

    assert read(once) == read(text)
    assert b"\n" not in once and not once.startswith(b" ")


@PROPS
@given(value=json_tree, ascii_only=st.booleans())
def test_the_fast_canonical_path_matches_the_exact_one(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert canonical_json(text) == canonical(loads(text, max_depth=64))


# -- ingest never crashes ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def box() -> Iterator[oncebox.Oncebox]:
    opened = oncebox.open("sqlite:///:memory:", inboxes=INBOXES, clock=ManualClock(1.8e9))
    yield opened
    opened.close()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(delivery=deliveries, inbox=st.sampled_from([spec.name for spec in INBOXES]))
def test_any_delivery_gets_a_decision(box: oncebox.Oncebox, delivery: Delivery, inbox: str) -> None:
    decision = box.ingest(inbox, delivery)
    if decision.verdict is Verdict.REJECTED:
        assert decision.may_ack is (decision.reason not in UNSTORED)
    else:
        assert decision.may_ack


# -- the fuzz targets, bounded --------------------------------------------------------------------
@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_a_bounded_mutation_run_finds_no_crash_or_hang(target: str) -> None:
    stats = targets.mutation_fuzz(target, 3_000, seed=7)
    assert stats.executions == 3_000
    assert (stats.crashes, stats.hangs) == (0, 0), stats.first_crash or stats.first_hang
    # The seeds and mutations reach acceptance (webhook labels name their scheme too).
    accepted = {label: n for label, n in stats.outcomes.items() if label.endswith("accepted")}
    assert sum(accepted.values()) > 0
    if target == "webhook-signatures":
        assert len(accepted) == 3 and any("stale" in label for label in stats.outcomes)


@pytest.mark.skipif(not fuzz.atheris_available(), reason="atheris is not installed")
def test_a_bounded_atheris_run_finds_no_crash_or_hang() -> None:
    with tempfile.TemporaryDirectory() as work:
        # One target of each kind (the JSON reader, a frame codec, the signatures): each
        # run is a process that instruments what it imports, seconds of CPU before its
        # first input. Every target runs in process above, and under atheris for long in
        # reliability/fuzz.py.
        for target, runs in [("json-event", 300), ("ussd-h1", 1_000), ("webhook-signatures", 500)]:
            result = fuzz.run_atheris(target, runs, 3, Path(work))
            stats = result.stats
            assert stats.executions == runs and not result.libfuzzer, result.libfuzzer
            assert (stats.crashes, stats.hangs) == (0, 0), stats.first_crash or stats.first_hang


def test_the_fuzzer_finds_a_planted_bug() -> None:
    """Negative control: were a codec to crash on some input, the run would say so."""
    control = fuzz.negative_control(3_000, seed=7)
    assert control.crashes > 0 and control.first_crash and "KeyError" in control.first_crash


def test_a_slow_input_counts_as_a_hang() -> None:
    def slow(data: bytes) -> str:
        spent = time.thread_time()
        while time.thread_time() - spent < 1.05:  # CPU time: a hang is counted in it
            pass
        return "ok"

    stats = targets.Stats("slow")
    stats.run(slow, b"x")
    assert stats.hangs == 1 and stats.first_hang


def test_the_oracles_catch_a_lax_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the oracles: a signature check that accepts anything, and a
    codec that accepts a frame whose trailer is wrong, are both caught."""
    real_check = targets.check_signature
    monkeypatch.setattr(targets, "check_signature", lambda *args, **kwargs: bytes(32))
    with pytest.raises(targets.OracleFailure):
        targets.signature_target(bytes([4]) + b"1800000000\nx\nPOST\n/v1\nk\nbody")

    def stripping(key: str, headers: list[tuple[bytes, bytes]], *rest: Any) -> bytes:
        """The check before issue 13: the signature compared after trimming whitespace."""
        trimmed = [(n, v.decode("latin-1").strip().encode("latin-1")) for n, v in headers]
        return real_check(key, trimmed, *rest)

    monkeypatch.setattr(targets, "check_signature", stripping)
    targets.signature_target(bytes([2]) + b"1800000000\n\xa0\nPOST\n/v1\nk\nbody")
    with pytest.raises(targets.OracleFailure):
        targets.signature_target(bytes([32]) + b"1800000000\n\xa0\nPOST\n/v1\nk\nbody")

    class Lax:
        def decode(self, delivery: Delivery) -> Any:
            body = delivery.body
            fields = dict(zip(["seq", "site", "need", "headcount", "pri"], [1, "S", "MED", 3, 86],
                              strict=True))  # fmt: skip
            return type("D", (), {"content": body, "key": delivery.key, "fields": fields})()

    monkeypatch.setattr(targets, "USSD", Lax())
    with pytest.raises(targets.OracleFailure):
        targets.h1_target(b"rec-1\nH1|1|S|MED|3|86|#00")


# -- the newer targets: the json codec, sp-api-listing, webhook signatures ---------------------
def test_the_json_codec_target_knows_each_outcome() -> None:
    """The model answers as the codec must: the seeds reach acceptance and each refusal,
    and "/ref/a~01b~1c" names the member "a~1b/c" (not "a/b/c" nor "a~1b~1c")."""
    doc = targets._json_doc
    assert targets.json_codec_target(json.dumps(doc()).encode()) == "accepted"
    decoded = targets.JSON_CODEC.decode(Delivery(json.dumps(doc()).encode()))
    assert decoded.key == '["order-1",7]'
    assert decoded.fields == {"site": "Kakuma1", "first": {"n": 1}}
    assert b"attempt" not in decoded.content and b'"seen~1at"' in decoded.content
    for changes, outcome in [
        ({"id": ""}, "missing_identity"),
        ({"ref": {"a/b/c": 1}}, "missing_identity"),
        ({"items": {"0": "x"}}, "accepted"),
        ({"items": []}, "missing_field"),
        ({"site": "a\u0000b"}, "bad_field"),
        ({"items": [int("7" * 300)]}, "accepted"),
    ]:
        label = targets.json_codec_target(json.dumps(doc(**changes)).encode())
        assert label == ("accepted" if outcome == "accepted" else f"invalid:{outcome}"), changes
    seeds = targets.seeds("json-codec")
    outcomes = {targets.json_codec_target(seed) for seed in seeds}
    assert {"accepted", "invalid:bad_field", "invalid:duplicate_member"} <= outcomes


def test_the_json_codec_target_catches_the_field_conversion_bug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Negative control: the codec before the fix (a field past int()'s digit limit
    raised ValueError) crashes the target."""
    from oncebox.formats import json_codec

    def old_field(self: Any, document: dict[str, Any], name: str, tokens: Any) -> Any:
        value = json_codec.resolve(document, tokens)
        if value is json_codec.MISSING:
            raise Invalid("missing_field", name)
        if isinstance(value, str) and "\x00" in value:
            raise Invalid("bad_field", name)
        return json_codec._plain(value)

    monkeypatch.setattr(json_codec.JsonCodec, "_field", old_field)
    stats = targets.mutation_fuzz("json-codec", 1_000, seed=7)
    assert any(kind.startswith("ValueError: Exceeds the limit") for kind in stats.crash_kinds)


def test_the_sp_api_target_reads_the_fixtures_as_their_notification_ids() -> None:
    seeds = targets.seeds("sp-api")
    fixtures = sorted((Path(targets.SP_FIXTURES)).glob("*.json"))
    assert len(fixtures) == 3 and fixtures[0].read_bytes() in seeds
    for path in fixtures:
        assert targets.sp_api_target(path.read_bytes()) == "accepted"
    outcomes = {targets.sp_api_target(seed) for seed in seeds}
    assert {"invalid:source_mismatch", "invalid:subscription_mismatch"} <= outcomes


@pytest.mark.parametrize("scheme", range(3))
def test_the_webhook_target_accepts_the_signed_request_and_refuses_it_stale(scheme: int) -> None:
    name = targets.WEBHOOK_SCHEMES[scheme]
    at_now = 320  # the offset bytes for "signed now" at the 300 s tolerance (spread 640)
    body = b'{"id":"evt_1","type":"t"}'

    def run(mode: int, offset: int) -> str:
        head = bytes([scheme, mode, offset >> 8, offset & 0xFF])
        return targets.webhook_target(head + b"msg_1\n" + body + b"\n")

    assert run(0, at_now) == run(2, at_now) == f"{name}:accepted"  # either secret
    assert run(1, at_now) == f"{name}:refused:bad_signature"  # a secret not configured
    assert run(4, at_now) == f"{name}:refused:bad_signature"  # the body changed
    stale = f"{name}:accepted" if name == "github" else f"{name}:refused:stale_signature"
    assert run(0, at_now - 301) == stale  # GitHub signs no time
    # Stripe bounds only the past, as its libraries do (issue 19, item 6).
    assert run(0, at_now + 301) == (f"{name}:accepted" if name == "stripe" else stale)
    assert run(0, at_now + 300) == f"{name}:accepted"  # at the bound: still fresh
    if name == "standard-webhooks":  # under Svix's names, and beside bogus standard ones
        svixed = bytes([scheme, 0, at_now >> 8, (at_now & 0xFF) | 8])
        assert targets.webhook_target(svixed + b"msg_1\n" + body + b"\n") == f"{name}:accepted"


@pytest.mark.parametrize("index", range(len(fuzz.LAX_CONTROLS)))
def test_the_new_oracles_catch_a_lax_variant(index: int) -> None:
    """Negative controls: pointers unescaped in the wrong order, witness_ignore
    forgotten, sp-api-listing taking any ApplicationId, webhook times unbounded."""
    stats = fuzz.lax_control(index, 1_500, seed=7)
    assert fuzz.oracle_failures(stats) > 0, fuzz.LAX_CONTROLS[index][0]


def test_the_webhook_oracle_catches_a_verifier_that_compares_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A verifier whose comparison says yes to any well-formed signature is caught."""
    from oncebox.formats import webhooks

    monkeypatch.setattr(webhooks.BodyMac, "verdict", lambda self: self.head.verified)
    with pytest.raises(targets.OracleFailure):
        targets.webhook_target(bytes([1, 1, 1, 64]) + b"msg_1\nbody\n")


def test_the_webhook_oracle_catches_a_verifier_that_takes_upper_case_hex(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """octokit and Stripe's libraries refuse an upper-case digest; so must oncebox."""
    from oncebox.formats import webhooks

    body = b"body"
    digest = hmac.new(targets._RAW_SECRETS[0], body, hashlib.sha256).hexdigest().upper()
    github = bytes([1, 8, 1, 64]) + b"msg_1\n" + body + b"\nsha256=" + digest.encode()
    assert targets.webhook_target(github) == "github:refused:bad_signature_header"
    monkeypatch.setattr(webhooks, "_HEX64", re.compile(r"[0-9a-fA-F]{64}"))
    with pytest.raises(targets.OracleFailure):
        targets.webhook_target(github)


# -- hostile requests over real HTTP ------------------------------------------------------------
def test_hostile_requests_get_their_documented_status() -> None:
    with tempfile.TemporaryDirectory() as work, contextlib.ExitStack() as stack:
        served = oncebox.open(f"sqlite:///{work}/http.db", inboxes=INBOXES)
        stack.callback(served.close)
        secret = served.create_token("probes", ["*"], ["read", "write", "operator"]).secret
        url = stack.enter_context(serving(create_app(served)))
        found = fuzz.probes(url, secret)
        failed = [f"{p.name}: want {p.expected}; got {p.got}" for p in found if not p.ok]
        assert not failed, "\n".join(failed)
        assert len(found) >= 25
        assert served.stats("listing")["records"] == 2  # depth 20 and the long integer
