"""json-event's in-line checks (the one-pass decode and ``validate_event``, which
json-event and sp-api-listing run) say what the rules say.

The event time: ``YYYY-MM-DDTHH:MM:SSZ`` in ASCII digits, a real date and time. The
in-line check leans on ``datetime.fromisoformat``, whose reading differs between Python
versions: CPython's newer ones take ISO 8601's ``T24:00:00`` for the next day's midnight,
which ``datetime()`` (the rule) refuses. The check must not let a version's reading
through, so the tests run it under a stand-in with that reading as well, and compare it
with a small reference written here, over every hour, minute and second from 00 to 99
and dates around month ends and leap days.

The six identity and work-key strings: the in-line check bounds them together, which
must never let one past its own bound of 256 characters (the rules, one by one)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncebox.formats import Delivery, Invalid
from oncebox.formats import json_event as je
from oncebox.formats.strictjson import JsonNumber

CODEC = je.JsonEventCodec()
_GOOD: dict[str, Any] = {
    "schema_version": 1,
    "source": "sp-api",
    "subscription": "sub-eu-1",
    "notification_id": "n-1",
    "seller_id": "SELLER01",
    "sku": "SKU-00001",
    "marketplace_id": "A1PA6795UKMFR9",
    "notification_type": "listing_status_changed",
    "event_time": "2026-02-28T12:00:00Z",
    "payload": {"status": "BUYABLE", "price": 3, "issues": []},
}
_SHAPE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")


def _reference(time: str) -> bool:
    """The rule, written plainly: the shape in ASCII digits, then a real date and time."""
    found = _SHAPE.fullmatch(time)
    if found is None:
        return False
    year, month, day, hour, minute, second = (int(part) for part in found.groups())
    try:
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return True


def _end_of_day_reading(text: str) -> datetime:
    """``datetime.fromisoformat`` as the Python versions that read ISO 8601's end of day
    do: ``24:00:00`` is the next day's midnight; anything else as this Python reads it."""
    if len(text) >= 19 and text[10] == "T" and text[11:19] == "24:00:00":
        return datetime.fromisoformat(text[:11] + "00" + text[13:]) + timedelta(days=1)
    return datetime.fromisoformat(text)


def _body(time: str) -> bytes:
    return json.dumps(dict(_GOOD, event_time=time), separators=(",", ":")).encode()


def _decoded(time: str) -> Any:
    try:
        decoded = CODEC.decode(Delivery(_body(time)))
    except Invalid as invalid:
        return ("invalid", invalid.reason)
    return ("ok", decoded.fields["event_time"])


def _validated(time: str) -> Any:
    event = dict(_GOOD, event_time=time, schema_version=JsonNumber("1"))
    try:
        fields = je.validate_event(event)
    except Invalid as invalid:
        return ("invalid", invalid.reason)
    return ("ok", fields["event_time"])


def _expected(time: str) -> Any:
    return ("ok", time) if _reference(time) else ("invalid", "bad_event_time")


_READINGS: list[Callable[[str], datetime]] = [datetime.fromisoformat, _end_of_day_reading]


@pytest.fixture(params=_READINGS, ids=["this-python", "end-of-day"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(je, "_FROM_ISO", request.param)


@pytest.mark.usefixtures("reading")
@pytest.mark.parametrize("time", ["2026-02-28T24:00:00Z", "2024-02-29T24:00:00Z",
                                  "2026-12-31T24:00:00Z", "9999-12-31T24:00:00Z"])  # fmt: skip
def test_an_hour_of_24_is_refused_whatever_fromisoformat_reads(time: str) -> None:
    assert _decoded(time) == ("invalid", "bad_event_time")
    assert _validated(time) == ("invalid", "bad_event_time")


def _clock_times() -> Iterator[str]:
    """Every hour, minute and second from 00 to 99, each with the others valid."""
    for n in range(100):
        yield f"2026-02-28T{n:02d}:00:00Z"
        yield f"2026-02-28T12:{n:02d}:00Z"
        yield f"2026-02-28T12:00:{n:02d}Z"
        yield f"2026-02-28T{n:02d}:{n:02d}:{n:02d}Z"


def _dates() -> Iterator[str]:
    """Every month from 00 to 13 and every day from 00 to 32, in a common year, a leap
    year, a century that is not a leap year and one that is, and years at the ends."""
    for year in ["2026", "2024", "1900", "2000", "0000", "0001", "9999"]:
        for month in range(14):
            for day in range(33):
                yield f"{year}-{month:02d}-{day:02d}T00:00:00Z"


@pytest.mark.usefixtures("reading")
def test_every_clock_and_date_is_checked_as_the_reference_says() -> None:
    times = [*_clock_times(), *_dates()]
    for time in times:
        expected = _expected(time)
        assert _decoded(time) == expected, time
        assert _validated(time) == expected, time
    accepted = sum(_reference(time) for time in times)
    assert 0 < accepted < len(times)


_digit = st.sampled_from("0123456789")
_odd = st.sampled_from([*"0129 T:Z-+.tz/", "\u0663", "\uff12", "\x7f", "\u00e9", "24"])


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_digit, min_size=14, max_size=14),
    st.lists(st.tuples(st.integers(0, 19), _odd), max_size=2),
    st.sampled_from(["", "Z", ".5", "+00:00", "x"]),
)
def test_generated_times_are_checked_as_the_reference_says(
    digits: list[str], changes: list[tuple[int, str]], extra: str
) -> None:
    d = "".join(digits)
    time = f"{d[:4]}-{d[4:6]}-{d[6:8]}T{d[8:10]}:{d[10:12]}:{d[12:]}Z"
    for at, char in changes:
        time = time[:at] + char + time[at + 1 :]
    time = time[:-1] + extra if extra != "Z" else time + extra
    for read in _READINGS:
        saved = je._FROM_ISO
        je._FROM_ISO = read
        try:
            assert _decoded(time) == _expected(time), (read, time)
            assert _validated(time) == _expected(time), (read, time)
        finally:
            je._FROM_ISO = saved


def _by_rule(event: dict[str, Any]) -> Any:
    try:
        return ("ok", list(je._validate_event(event).items()))
    except Invalid as invalid:
        return ("invalid", invalid.reason, invalid.detail)


def _in_line(event: dict[str, Any]) -> Any:
    try:
        return ("ok", list(je.validate_event(event).items()))
    except Invalid as invalid:
        return ("invalid", invalid.reason, invalid.detail)


def _decoded_whole(event: dict[str, Any]) -> Any:
    body = json.dumps(dict(event, schema_version=1), separators=(",", ":")).encode()
    try:
        return ("ok", list(CODEC.decode(Delivery(body)).fields.items()))
    except Invalid as invalid:
        return ("invalid", invalid.reason, invalid.detail)


@pytest.mark.parametrize("name", je.STRING_FIELDS)
def test_one_long_string_beside_five_short_ones_is_checked_as_by_rule(name: str) -> None:
    """The six together are short; the long one is at, or past, its own bound."""
    for short in ["a", "ab"]:
        for size in range(250, 262):
            event = dict(_GOOD, **dict.fromkeys(je.STRING_FIELDS, short),
                         schema_version=JsonNumber("1"))  # fmt: skip
            event[name] = "x" * size
            expected = _by_rule(event)
            assert expected[0] == ("ok" if size <= 256 else "invalid"), size
            assert _in_line(event) == expected, (short, size)
            assert _decoded_whole(event) == expected, (short, size)
