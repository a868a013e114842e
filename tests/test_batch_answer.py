"""The batch route's answer, written straight from the decisions, is the response model's.

:func:`~oncebox.surfaces.http.routes.batches.batch_json` writes ``BatchOut`` without a
pydantic model per decision; where it cannot (it answers None), the route returns the
model and FastAPI writes it, as before. So the fast path is checked against that general
path twice: on any decisions hypothesis makes, against the model's own JSON; and end to
end, the same batches sent to two apps on two fresh stores, one of them with the fast path
switched off, every answer compared byte for byte (status, headers and body).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import Oncebox
from oncebox.domain import Decision, Verdict
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.http import create_app
from oncebox.surfaces.http.models import BatchOut, DecisionOut
from oncebox.surfaces.http.routes import batches
from oncebox.surfaces.http.routes.batches import batch_json


def general(decisions: list[Decision]) -> bytes:
    """What FastAPI writes for the route's response model (``serialize_json``)."""
    return (
        BatchOut(decisions=[DecisionOut(**d.to_dict()) for d in decisions])
        .model_dump_json(by_alias=True)
        .encode()
    )


texts = st.none() | st.text(max_size=30) | st.sampled_from(["", 'a\x00\x1f\x7f"\\\u2028é𝄞'])
counts = st.none() | st.integers(min_value=0, max_value=2**63 - 1)
decisions = st.builds(
    Decision,
    inbox=st.text(min_size=1, max_size=20),
    verdict=st.sampled_from(list(Verdict)),
    may_ack=st.booleans(),
    reason=texts,
    detail=texts,
    identity=texts,
    witness=texts,
    record_id=counts,
    revision=counts,
    quarantine_id=counts,
    first_quarantine=st.booleans(),
    dead_letter_id=counts,
    late_replay=st.booleans(),
    log_position=counts,
)


@settings(max_examples=300)
@given(st.lists(decisions, max_size=8))
def test_the_answer_is_the_models_json(found: list[Decision]) -> None:
    assert batch_json(found) == general(found)


def test_what_it_cannot_write_is_left_to_the_model() -> None:
    lone = Decision(inbox="listing", verdict=Verdict.REJECTED, may_ack=True, detail="\ud800")
    assert batch_json([lone]) is None  # the model refuses it too: the route's 500, as before
    odd = Decision(inbox="listing", verdict=Verdict.ACCEPTED, may_ack=True, record_id=True)
    assert batch_json([odd]) is None  # a type it does not know: the model writes it
    assert batch_json([]) == general([]) == b'{"decisions":[]}'


# -- end to end: the fast path against the general one, on two fresh stores ---------------------
def frame(seq: int, need: str = "MED") -> str:
    return make_frame(seq, "Kakuma1", need, 3, 86)


def event(n: int, extra: str = "") -> bytes:
    body = {"source": "sp-api", "stream": "s", "id": f"e{n}", "seq": n, "data": {"n": n}}
    return json.dumps(body).encode()[:-1] + extra.encode() + b"}"


def conversation(box: Oncebox, http: httpx.Client) -> list[httpx.Response]:
    writer = box.create_token("writer", ["*"], ["read", "write"]).secret
    reader = box.create_token("reader", ["*"], ["read"]).secret
    bearer = {"Authorization": f"Bearer {writer}"}
    ndjson = {**bearer, "Content-Type": "application/x-ndjson"}
    array = {**bearer, "Content-Type": "application/json"}
    ussd = [json.dumps({"frame_id": f"r-{i}", "frame": frame(i)}) for i in range(1, 4)]
    other = json.dumps({"frame_id": "r-1", "frame": frame(1, "SHE"), "device_time": "t\u00e9"})
    cases: list[tuple[str, bytes, dict[str, str]]] = [
        (
            "ussd",
            "\n".join([*ussd, ussd[0], other, "H1|garbage", '{"frame": 1}', ""]).encode(),
            ndjson,
        ),
        ("ussd", ("[" + ",".join([*ussd, other]) + "]").encode(), array),
        ("ussd", b"[1,", array),  # not an array: 400
        ("ussd", "\n".join([ussd[0]] * 9).encode(), ndjson),  # over the batch limit: 413
        ("ussd", b"\n\n", ndjson),  # no lines: no decisions
        ("listing", b"\n".join([event(1), event(1), event(2, ',"x":"\u2028\\u0000"')]), ndjson),
        ("listing", b'{"schema_version": 1, "schema_version": 1}\r\n{not json', ndjson),
        ("listing", b"[" + event(3) + b"," + event(1) + b"]", array),
        ("feed", b'{"payload": "p1", "snapshot_id": "S1"}\nplain\n\xff\xfe', ndjson),
        ("nope", b"x\n", ndjson),  # no such inbox
        ("ussd", ussd[0].encode(), {}),  # no token
        ("ussd", ussd[0].encode(), {"Authorization": f"Bearer {reader}"}),  # read-only
        ("ussd", b"x" * 5000, ndjson),  # over the body bound
    ]
    return [
        http.post(f"/v1/inboxes/{inbox}/batch", content=body, headers=headers)
        for inbox, body, headers in cases
    ]


def answered(box: Oncebox) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    app = create_app(box, batch_limit=8, max_body=4096)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        found = conversation(box, http)
    return [
        (r.status_code, [(k, v) for k, v in r.headers.items() if k != "date"], r.content)
        for r in found
    ]


@pytest.fixture
def boxes(tmp_path: Path) -> Iterator[tuple[Oncebox, Oncebox]]:
    fast = oncebox.open(f"sqlite:///{tmp_path / 'fast.db'}", inboxes=INBOXES)
    slow = oncebox.open(f"sqlite:///{tmp_path / 'general.db'}", inboxes=INBOXES)
    yield fast, slow
    fast.close()
    slow.close()


def test_the_route_answers_as_the_response_model_did(
    boxes: tuple[Oncebox, Oncebox], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_box, general_box = boxes
    written: list[bytes | None] = []

    def never(decisions: list[Decision]) -> None:
        written.append(None)
        return None

    with monkeypatch.context() as patched:
        patched.setattr(batches, "batch_json", never)
        before = answered(general_box)
    assert written  # the general app's answers all came from the model
    after = answered(fast_box)
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        assert new == old, i
    statuses = [status for status, _, _ in after]
    assert statuses == [200, 200, 400, 413, 200, 200, 200, 200, 200, 404, 401, 403, 413]
    verdicts = [d["verdict"] for d in json.loads(after[0][2])["decisions"]]
    assert verdicts == ["accepted"] * 3 + ["duplicate", "conflict", "rejected", "rejected"]
