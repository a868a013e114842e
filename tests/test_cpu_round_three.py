"""The third CPU round gives exactly what the general code gives: on ``json-event``, the
strict reader's direct scan, the event checked in line, the canonical form written
around the payload, the event time checked by ``fromisoformat``, each compared with the
general path it skips over generated events and texts (the reader over the whole
JSONTestSuite corpus); on SQLite, a batch's records found by one blob of digests, as
each is found by its own."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncebox.engine import merkle
from oncebox.engine.ingest import _FIELDS_ENCODE, fields_json
from oncebox.formats import Decoded, Delivery, Invalid, strictjson
from oncebox.formats import json_event as je
from oncebox.formats.canonical import canonical
from oncebox.formats.jsontext import sorted_ascii_strings
from oncebox.formats.strictjson import JsonNumber, loads
from oncebox.store import open_store
from oncebox.store.sqlfile import load_queries

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "JSONTestSuite"


def _outcome(call: Any, *args: Any) -> Any:
    try:
        return ("ok", call(*args))
    except Invalid as invalid:
        return ("invalid", invalid.reason, invalid.detail)


def _general_loads(data: bytes | str, max_depth: int = 20) -> Any:
    """The reader without its direct scan: the decoder parses every text."""

    def no_scan(text: str, index: int) -> Any:
        raise StopIteration(index)

    saved = strictjson._SCAN
    strictjson._SCAN = no_scan
    try:
        return _outcome(lambda: loads(data, max_depth=max_depth))
    finally:
        strictjson._SCAN = saved


def _same_reading(data: bytes | str, max_depth: int = 20) -> None:
    fast = _outcome(lambda: loads(data, max_depth=max_depth))
    general = _general_loads(data, max_depth)
    assert fast == general
    if fast[0] == "ok":  # the same types too: numbers stay JsonNumber, spelled alike
        assert canonical(fast[1]) == canonical(general[1])


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the JSONTestSuite corpus is shared test data")
def test_the_direct_scan_reads_the_json_test_suite_as_the_decoder() -> None:
    paths = sorted(CORPUS.glob("test_parsing/*.json")) + sorted(
        CORPUS.glob("test_transform/*.json")
    )
    assert len(paths) > 300
    for path in paths:
        _same_reading(path.read_bytes(), je.MAX_DEPTH)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"a":2}',  # duplicate members
        '{"a":1,"a":2} x',
        "[NaN]",
        "[-Infinity]",
        '["\\ud800"]',  # a lone surrogate
        '{"\\udc00":1}',
        "[1e999]",
        "[-1e400]",
        "[" * 21 + "]" * 21,  # past the depth bound
        "[" * 20 + "]" * 20,
        " [1] ",
        "[1] ",
        " [1]",
        "[1]x",
        "",
        " ",
        "\ufeff[1]",
        '"a"',
        "1.50",
        "-0",
        '{"a":[1,2.0,{"b":null}]}\n',
    ],
)
def test_the_direct_scan_reads_adversarial_texts_as_the_decoder(text: str) -> None:
    _same_reading(text)
    _same_reading(text.encode("utf-8", "surrogatepass"))


_GOOD: dict[str, Any] = {
    "schema_version": JsonNumber("1"),
    "source": "sp-api",
    "subscription": "sub-eu-1",
    "notification_id": "n-1",
    "seller_id": "SELLER01",
    "sku": "SKU-00001",
    "marketplace_id": "A1PA6795UKMFR9",
    "notification_type": "listing_status_changed",
    "event_time": "2026-02-28T12:00:00Z",
    "payload": {"status": "BUYABLE", "price": JsonNumber("1.50"), "issues": []},
}

_EDGES = ["", " a", "a ", "a b", "a\tb", "\x00", "\x7f", "\xa0x", "x\u2028", "é",
          "\U0001f600", "x" * 256, "x" * 257, "y" * 200]  # fmt: skip
_strings = st.one_of(st.text(max_size=6), st.sampled_from(_EDGES))
_others = st.sampled_from(
    [None, True, JsonNumber("1"), JsonNumber("1.0"), JsonNumber("01"), "1", [], {}, ["a"]]
)
_times = st.one_of(
    st.sampled_from(
        [
            "2026-02-28T12:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-02-28T24:00:00Z",
            "2026-02-28T23:59:60Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "2026-02-28 12:00:00Z",
            "2026-02-28T12:00:00",
            "2026-02-28T12:00:00+00:00",
            "\uff12026-02-28T12:00:00Z",
            " 2026-02-28T12:00:00Z",
            "2024-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-00-10T00:00:00Z",
        ]
    ),
    st.builds(
        "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}Z".format,
        st.integers(0, 9999),
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 99),
    ),
)
_changes = st.dictionaries(
    st.sampled_from([*sorted(je.FIELDS), "extra", "Source"]),
    st.one_of(
        _strings,
        _others,
        _times,
        st.sampled_from(sorted(je.NOTIFICATION_TYPES)),
        st.just(("drop",)),
    ),
    max_size=4,
)


def _event(changes: dict[str, Any]) -> dict[str, Any]:
    event = dict(_GOOD)
    for name, value in changes.items():
        if value == ("drop",):
            event.pop(name, None)
        else:
            event[name] = value
    return event


@settings(max_examples=500)
@given(_changes)
def test_an_event_checked_in_line_is_checked_as_rule_by_rule(changes: dict[str, Any]) -> None:
    """``validate_event`` (in line where it can) accepts, refuses and orders the fields
    exactly as the rule-by-rule ``_validate_event``."""
    event = _event(changes)
    fast = _outcome(je.validate_event, event)
    general = _outcome(je._validate_event, event)
    assert fast == general
    if fast[0] == "ok":
        assert list(fast[1].items()) == list(general[1].items())


@pytest.mark.parametrize("name", sorted(je.FIELDS))
def test_each_edge_in_each_field_is_checked_as_rule_by_rule(name: str) -> None:
    for value in [*_EDGES, None, JsonNumber("1"), JsonNumber("1.0"), "1", [], {}]:
        event = _event({name: value})
        assert _outcome(je.validate_event, event) == _outcome(je._validate_event, event)


def test_an_event_time_with_any_character_changed_is_checked_as_rule_by_rule() -> None:
    """The in-line time check (its separators, then fromisoformat) against the rule's
    pattern: every character of a good time replaced by each of a few others (a space
    or another separator where ``T`` is: fromisoformat alone takes any there)."""
    good = "2024-02-29T23:59:59Z"
    others = " +-_./:0129TZtz\u0663\uff12\x7f"
    times = [good[:i] + c + good[i + 1 :] for i in range(len(good)) for c in others]
    times += [good[:-1], good + "Z", good[:-1] + ".5Z", "2024-02-29T23:59:59+00:00"]
    accepted = 0
    for time in times:
        event = _event({"event_time": time})
        fast = _outcome(je.validate_event, event)
        assert fast == _outcome(je._validate_event, event), time
        accepted += fast[0] == "ok"
    assert 0 < accepted < len(times)


def _dump(value: Any) -> str:
    if isinstance(value, JsonNumber):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_dump(k)}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _general_decode(body: bytes) -> Any:
    """json-event's decode as the general code makes it: the decoder's parse, the rules
    one by one, the canonical form written whole."""
    read = _general_loads(body, je.MAX_DEPTH)
    if read[0] == "invalid":
        raise Invalid(read[1], read[2])
    event = read[1]
    fields = je._validate_event(event)
    content = canonical(event)
    key = json.dumps([fields[name] for name in je.IDENTITY_FIELDS], ensure_ascii=False,
                     separators=(",", ":"))  # fmt: skip
    return content, key, list(fields.items())


_payloads = st.recursive(
    st.none()
    | st.booleans()
    | st.sampled_from(["0", "-0", "1.0", "2E+3"]).map(JsonNumber)
    | _strings,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_strings, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=400)
@given(_changes, _payloads, st.permutations([*sorted(je.FIELDS), "extra", "Source"]))
def test_json_event_decodes_as_its_general_path(
    changes: dict[str, Any], payload: Any, order: list[str]
) -> None:
    """The whole decode: the same content bytes (the witness), identity key and fields,
    or the same refusal, whatever the members' order and the payload."""
    event = _event({"payload": payload, **changes})
    body = _dump({name: event[name] for name in order if name in event}).encode("utf-8")
    try:
        decoded = je.JsonEventCodec().decode(Delivery(body))
        fast: Any = ("ok", decoded.content, decoded.key, list(decoded.fields.items()))
    except Invalid as invalid:
        fast = ("invalid", invalid.reason, invalid.detail)
    try:
        general: Any = ("ok", *_general_decode(body))
    except Invalid as invalid:
        general = ("invalid", invalid.reason, invalid.detail)
    assert fast == general


def test_fromisoformat_refuses_what_datetime_refuses() -> None:
    """Every date and time of the event time's shape that ``datetime()`` refuses,
    ``fromisoformat`` refuses (the in-line check relies on it), month, day, hour,
    minute and second through 00 to 99."""

    def valid(text: str) -> bool:
        try:
            datetime.fromisoformat(text)
        except ValueError:
            return False
        return True

    def made(*parts: int) -> bool:
        try:
            datetime(*parts)
        except ValueError:
            return False
        return True

    for year in (0, 1, 1900, 2000, 2024, 2026, 9999):
        for month in range(100):
            for day in range(100):
                text = f"{year:04d}-{month:02d}-{day:02d}T12:00:00"
                assert valid(text) == made(year, month, day, 12, 0, 0), text
    for hour in range(100):
        for minute in range(100):
            for second in (0, 1, 59, 60, 61, 99):
                text = f"2026-02-28T{hour:02d}:{minute:02d}:{second:02d}"
                assert valid(text) == made(2026, 2, 28, hour, minute, second), text


def _digest(n: int) -> bytes:
    return n.to_bytes(32, "big")


@pytest.fixture(scope="module")
def records_db(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A SQLite store holding records 1 to 30 of inbox 1 and 31 to 40 of inbox 2."""
    file = tmp_path_factory.mktemp("lookups") / "s.db"
    open_store(f"sqlite:///{file}").close()
    conn = apsw.Connection(str(file))
    conn.execute("INSERT INTO inboxes (name, codec, apply) VALUES ('a', 'keyed', 'none'), "
                 "('b', 'keyed', 'none')")  # fmt: skip
    for n in range(1, 41):
        conn.execute(
            "INSERT INTO records (id, inbox_id, ident, identity, witness, content, fields, "
            "first_seen, last_seen, log_seq) VALUES (?, ?, ?, ?, ?, 'c', '{}', ?, ?, ?)",
            (n, 1 if n <= 30 else 2, _digest(n), f"k{n}", _digest(1000 + n), 1.0 * n, 2.0,
             None if n % 3 else n),
        )  # fmt: skip
    yield conn
    conn.close()


@settings(max_examples=200)
@given(st.integers(1, 2), st.lists(st.integers(0, 45), max_size=60))
def test_a_batch_finds_its_records_as_each_finds_its_own(
    records_db: Any, inbox: int, numbers: list[int]
) -> None:
    """``find_records`` (the digests bound as one array) gives the rows that
    ``find_record`` gives for each digest alone: stored or not, of this inbox or the
    other, repeated, in any order."""
    queries = load_queries("sqlite")
    idents = list(dict.fromkeys(_digest(n) for n in numbers))
    if not idents:
        return  # the store asks nothing of SQLite for no identities
    together = sorted(records_db.execute(queries["find_records"].sql,
                                         (inbox, apsw.carray(tuple(idents)))))  # fmt: skip
    one = queries["find_record"].sql
    alone = sorted(row for ident in idents for row in records_db.execute(one, (inbox, ident)))
    assert together == alone


@settings(max_examples=100)
@given(st.integers(0, 40), st.integers(1, 70), st.sampled_from([1, 2, 3, 4]))
def test_the_kept_merkle_nodes_alone_are_those_of_all_nodes(
    before: int, count: int, stride: int
) -> None:
    """``appended_nodes`` with a stride builds exactly the nodes of the kept levels that
    it gives, in order, without one: what ``log.chain`` stores."""
    leaves = [hashlib.sha256(str(i).encode()).digest() for i in range(before + count)]
    store = {
        (level, index): node
        for level, index, node in merkle.appended_nodes(0, leaves[:before], lambda lv, ix: b"")
    }

    def get(level: int, index: int) -> bytes:
        return store[(level, index)]

    every = merkle.appended_nodes(before, leaves[before:], get)
    kept = merkle.appended_nodes(before, leaves[before:], get, stride)
    assert kept == [node for node in every if node[0] and not node[0] % stride]


class _Shouting(str):
    def __str__(self) -> str:
        return self.upper()


class _Quiet(_Shouting):
    pass


_names = st.text(max_size=4) | st.sampled_from(["a", "b%", "%s", 'q"', "b\\", "é", "\x7f"])
_field_values = (
    st.text(max_size=5)
    | st.sampled_from(["x", "%s", "%%", "a b", "\x1f", "\x7f", "~", 'q"', "\\", "é"])
    | st.builds(JsonNumber, st.sampled_from(["1", "2.5"]))
    | st.builds(_Quiet, st.sampled_from(["q", "r"]))
    | st.sampled_from([None, 1, True, [], {}])
)


@settings(max_examples=400)
@given(st.dictionaries(_names, _field_values, max_size=9))
def test_fields_written_without_the_encoder_are_the_encoders(fields: dict[str, Any]) -> None:
    """A record's stored fields (``fields_json``), written from a template where every
    name and value is plain, are what the sorted ASCII-only encoder writes."""
    decoded = Decoded(b"", None, fields)
    assert fields_json(decoded) == _FIELDS_ENCODE(fields)
    plain = sorted_ascii_strings(fields)
    assert plain is None or plain == _FIELDS_ENCODE(fields)


def test_plain_fields_take_the_template() -> None:
    fields = {"sku": "SKU-1", "b": "x%sy", "a": "2026-02-28T12:00:00Z"}
    assert sorted_ascii_strings(fields) == _FIELDS_ENCODE(fields)
    assert sorted_ascii_strings({"a": "x", "b": _Quiet("q")}) is None


def test_identities_that_are_not_digests_are_found(tmp_path: Path) -> None:
    """Not a store's own case (identities are SHA-256s), but a batch of other lengths is
    still found right."""
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        with store.reading() as tx:
            assert tx.find_records(1, [b"ab", b"abc" * 20]) == {}
    finally:
        store.close()
