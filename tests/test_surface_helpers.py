"""The surfaces' pure helpers: what differs between a record and a newcomer, the ingest
line that re-delivers a dead letter, the times operators type, the triage CSV."""

from __future__ import annotations

import csv
import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncebox import Delivery
from oncebox.surfaces.diffing import ABSENT, byte_difference, field_changes, visible
from oncebox.surfaces.lines import delivery_from_line, line_for
from oncebox.surfaces.views import (
    ISO_PATTERN,
    SECONDS_PATTERN,
    csv_text,
    parse_when,
    triage_table,
)


# -- what differs -----------------------------------------------------------------------------
def test_field_changes_name_each_differing_value_old_then_new() -> None:
    old = {"seq": 1, "site": "Kakuma1", "headcount": 3, "pri": 86}
    new = {"seq": 1, "site": "Kakuma1", "headcount": 9, "pri": 86, "extra": True}
    changes = field_changes(old, new)
    assert [(c.name, c.text) for c in changes] == [
        ("headcount", "3 -> 9"),
        ("extra", "(absent) -> true"),
    ]
    assert changes[1].old is ABSENT
    # JSON's distinctions are kept: 1 is not 1.0, nor true.
    assert [c.name for c in field_changes({"a": 1, "b": 1}, {"a": 1.0, "b": True})] == ["a", "b"]
    assert field_changes(old, dict(old)) == []


def test_byte_difference_finds_the_trailer_case_and_a_trailing_newline() -> None:
    case = byte_difference(b"H1|3|Kakuma1|WAT|12|69|#1a", b"H1|3|Kakuma1|WAT|12|69|#1A")
    assert case is not None
    assert (case.offset, case.old, case.new, case.after) == (25, b"a", b"A", b"")
    assert case.before == b"WAT|12|69|#1" and case.cut_before  # 12 bytes before
    newline = byte_difference(b"H1|1|K|MED|3|86|#89", b"H1|1|K|MED|3|86|#89\n")
    assert newline is not None and (newline.old, newline.new) == (b"", b"\n")
    assert visible(newline.new) == "\\n"
    assert byte_difference(b"same", b"same") is None


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_byte_difference_splits_both_sides_into_agreeing_ends_and_a_middle(
    old: bytes, new: bytes
) -> None:
    diff = byte_difference(old, new)
    if old == new:
        assert diff is None
        return
    assert diff is not None
    head = old[: diff.offset]
    assert new[: diff.offset] == head and head.endswith(diff.before)
    old_tail = old[diff.offset + len(diff.old) :]
    assert old_tail == new[diff.offset + len(diff.new) :]  # the same agreeing end
    assert old_tail.startswith(diff.after)
    assert head + diff.old + old_tail == old


def test_visible_shows_every_byte() -> None:
    assert visible(b"a\tb\r\n\\\x00\xff") == "a\\tb\\r\\n\\\\\\x00\\xff"
    assert visible(b"x" * 200, 10) == "x" * 10 + "… (190 more bytes)"


# -- the line that re-delivers ----------------------------------------------------------------
# A stored fact is UTF-8 text: lone surrogates never reach a dead letter.
facts = st.one_of(
    st.none(),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
)


@pytest.mark.parametrize("codec", ["ussd-h1", "feed", "keyed", "picky-test"])
@given(
    body=st.binary(max_size=60),
    key=facts,
    snapshot_id=facts,
    device_time=facts,
    delivery_id=facts,
)
def test_an_envelope_line_always_re_delivers_the_delivery(
    codec: str,
    body: bytes,
    key: str | None,
    snapshot_id: str | None,
    device_time: str | None,
    delivery_id: str | None,
) -> None:
    delivery = Delivery(body, key, snapshot_id, device_time, delivery_id)
    line = line_for(codec, delivery)
    assert line is not None and b"\n" not in line
    assert delivery_from_line(codec, line) == delivery


def test_a_bare_line_is_the_body_or_nothing() -> None:
    assert line_for("json-event", Delivery(b'{"a": 1}')) == b'{"a": 1}'
    assert line_for("json{identity=[/id]}", Delivery(b"[]")) == b"[]"
    for cannot in (
        Delivery(b'{\n"a": 1}'),  # spans lines
        Delivery(b'{"a": 1}\r'),  # the line's end would be taken off
        Delivery(b"   "),  # a blank line is skipped
        Delivery(b"{}", key="k"),  # a bare line carries no key
        Delivery(b"{}", device_time="t"),  # nor facts
    ):
        assert line_for("json-event", cannot) is None, cannot
    assert line_for("ussd-h1", Delivery(b"H1|1", key="a-1", lease_token=3)) == (
        b'{"frame": "H1|1", "frame_id": "a-1"}'  # never a lease token
    )


# -- times and tables -------------------------------------------------------------------------
def test_a_typed_time_is_iso_8601_utc_unless_it_says_or_unix_seconds() -> None:
    assert parse_when("2030-01-15T08:00") == parse_when("2030-01-15T08:00Z") == 1_894_694_400
    assert parse_when("2030-01-15T13:30+05:30") == 1_894_694_400
    assert parse_when("1894694400.5") == 1_894_694_400.5
    for wrong in ("yesterday", "nan", "inf", "", "9" * 30):
        with pytest.raises(ValueError, match="is not a time"):
            parse_when(wrong)


@given(st.one_of(st.text(max_size=40), st.from_regex(ISO_PATTERN), st.from_regex(SECONDS_PATTERN)))
def test_a_time_is_taken_only_in_a_published_form(text: str) -> None:
    """parse_when takes nothing the published patterns refuse (what OpenAPI says the
    time filters take), and reads every published form that names a real time."""
    published = any(re.match(p, text.strip()) for p in (ISO_PATTERN, SECONDS_PATTERN))
    try:
        parse_when(text)
    except ValueError:
        return  # refused: a published form may still name no real day (2027-02-30)
    assert published


def test_the_triage_csv_has_a_row_per_site_and_need_and_no_formulas() -> None:
    ledger = {
        "totals": [
            {
                "site": "K1",
                "need": "MED",
                "headcount": 3,
                "cases": 1,
                "every_arrival_headcount": 6,
                "arrivals": 2,
            },
            {
                "site": "=HYPERLINK()",
                "need": "WAT",
                "headcount": 1,
                "cases": 1,
                "every_arrival_headcount": 1,
                "arrivals": 1,
            },
        ],
        "ranking": [{"record_id": 7, "site": "K1", "need": "MED", "headcount": 3, "pri": 86}],
    }
    rows = list(csv.reader(io.StringIO(csv_text(*triage_table(ledger)))))
    assert rows[0][-1] == "suppressed_headcount"
    assert rows[1] == ["K1", "MED", "3", "1", "6", "2", "3"]
    assert rows[2][0] == "'=HYPERLINK()"  # a spreadsheet shows it, never runs it
    ranking = list(csv.reader(io.StringIO(csv_text(*triage_table(ledger, "ranking")))))
    assert ranking == [["rank", "pri", "site", "need", "headcount", "record_id"],
                       ["1", "86", "K1", "MED", "3", "7"]]  # fmt: skip
