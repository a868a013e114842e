"""One delivery an apply step cannot take never starves the others (issue 19, item 1).

A field a built-in step cannot take is refused at decode (``bad_field``, a dead letter);
anything that still fails inside a step is that delivery's :class:`ApplyError` alone,
in a library batch, an HTTP group-commit round and an HTTP batch; and no answer to a
client names the store's tables.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import oncebox
from conftest import BoxFactory
from oncebox import ApplyError, ConfigError, Delivery, InboxSpec, Verdict
from serveproc import get, serving

TRIAGE_FIELDS = {"site": "/site", "need": "/need", "headcount": "/headcount", "pri": "/pri"}
TRIAGE = InboxSpec(
    "cases",
    "json",
    apply="triage",
    settings={"identity": ["/id"], "fields": TRIAGE_FIELDS},
)
WORK = InboxSpec(
    "listings",
    "json",
    apply="generation",
    settings={
        "identity": ["/id"],
        "fields": {"seller_id": "/seller", "sku": "/sku", "marketplace_id": "/market"},
    },
)
STORE_WORDS = ("triage_ledger", "work_keys", "constraint", "SQLite", "PostgreSQL", "null value")


def case(ident: str, **change: Any) -> Delivery:
    document = {"id": ident, "site": "Kakuma1", "need": "MED", "headcount": 3, "pri": 86}
    return Delivery(json.dumps({**document, **change}).encode())


def listing(ident: str, **change: Any) -> Delivery:
    document = {"id": ident, "seller": "S1", "sku": "K-1", "market": "ATVPDKIKX0DER"}
    return Delivery(json.dumps({**document, **change}).encode())


# -- refused at decode -----------------------------------------------------------------
BAD_TRIAGE = [
    {"site": None},
    {"site": ""},
    {"site": "x" * 257},
    {"site": "Kakuma1\n"},
    {"need": {"kind": "MED"}},
    {"need": 7},
    {"headcount": None},
    {"headcount": "3"},
    {"headcount": 3.5},
    {"headcount": True},
    {"headcount": -1},
    {"headcount": 10**9},
    {"pri": 10**30},
]


@pytest.mark.parametrize("change", BAD_TRIAGE, ids=lambda c: json.dumps(c)[:40])
def test_a_field_triage_cannot_take_is_a_bad_field_dead_letter(
    make_box: BoxFactory, change: dict[str, Any]
) -> None:
    box = make_box([TRIAGE])
    batch = [case("honest-1"), case("poison", **change), case("honest-2")]
    decisions = box.ingest_batch("cases", batch)
    assert [d.verdict for d in decisions] == [Verdict.ACCEPTED, Verdict.REJECTED, Verdict.ACCEPTED]
    refused = decisions[1]
    assert refused.reason == "bad_field" and refused.may_ack and refused.dead_letter_id
    assert box.triage("cases")["headcount"] == 6
    [letter] = box.dead_letters("cases")
    assert letter.reason == "bad_field"
    # The same identity sent right later is applied: the refusal left no dedup state.
    assert box.ingest_batch("cases", [case("poison")])[0].verdict is Verdict.ACCEPTED


@pytest.mark.parametrize(
    "change", [{"sku": None}, {"seller": ""}, {"market": 12}, {"sku": "k" * 3000}]
)
def test_a_work_key_generation_cannot_take_is_a_bad_field_dead_letter(
    make_box: BoxFactory, change: dict[str, Any]
) -> None:
    box = make_box([WORK])
    decisions = box.ingest_batch("listings", [listing("a"), listing("b", **change)])
    assert [d.reason for d in decisions] == [None, "bad_field"]
    [work] = box.work_keys("listings")
    assert work.generation == 1


def test_an_inbox_whose_codec_gives_no_field_the_step_needs_is_refused_at_declaration(
    make_box: BoxFactory,
) -> None:
    unnamed = InboxSpec("cases", "json", apply="triage", settings={"identity": ["/id"]})
    with pytest.raises(ConfigError, match=r"needs the field.*site, need, headcount, pri"):
        make_box([unnamed])
    with pytest.raises(ConfigError, match="needs the field"):
        make_box([InboxSpec("raw", "keyed", apply="generation")])


def test_a_user_step_checks_its_own_fields_at_decode(make_box: BoxFactory) -> None:
    def step(tx: Any, change: Any) -> None:
        pass

    def check(fields: Any) -> None:
        if fields.get("site") == "closed":
            raise oncebox.Invalid("bad_field", "site closed")

    step.check_fields = check  # type: ignore[attr-defined]
    box = make_box([InboxSpec("cases", "json", apply=step, settings={"fields": TRIAGE_FIELDS})])
    decisions = box.ingest_batch("cases", [case("a"), case("b", site="closed")])
    assert [d.reason for d in decisions] == [None, "bad_field"]


# -- a failure inside a step is that delivery's alone ------------------------------------
def _store_refuses_one(tx: Any, change: Any) -> None:
    """A user's step whose statement the store refuses for one delivery: the driver's
    own error (a NOT NULL constraint) is raised inside the deciding transaction."""
    site = None if change.fields["site"] == "poison" else change.fields["site"]
    tx.execute(
        "INSERT INTO triage_ledger (record_id, inbox_id, site, need, headcount, pri) "
        "VALUES (?, ?, ?, 'MED', 1, 1)".replace("?", "%s" if _pg(tx) else "?"),
        (change.record_id, change.inbox_id, site),
    )


def _pg(tx: Any) -> bool:
    return type(tx).__name__.startswith("Postgres")


def test_a_store_error_inside_a_step_fails_that_delivery_alone(make_box: BoxFactory) -> None:
    spec = InboxSpec("cases", "json", apply=_store_refuses_one, settings={"fields": TRIAGE_FIELDS})
    box = make_box([spec])
    batch = [case(f"h{i}") for i in range(5)]
    batch.insert(2, case("p", site="poison"))
    outcomes = box.ingest_each("cases", batch)
    failed = [i for i, o in enumerate(outcomes) if isinstance(o, ApplyError)]
    assert failed == [2]
    assert all(o.verdict is Verdict.ACCEPTED for o in outcomes if not isinstance(o, ApplyError))
    assert box.stats("cases")["records"] == 5
    # A batch answer shows the failure as the delivery's own decision.
    [again] = box.ingest_all("cases", [case("p2", site="poison")])
    assert (again.verdict, again.reason, again.may_ack) == (Verdict.REJECTED, "apply_failed", False)
    assert not any(word in (again.detail or "") for word in STORE_WORDS)


class Batched:
    """A step that takes a batch at once, as the built-in ones do, and so cannot say
    which delivery it failed on."""

    name = "batched"

    def __init__(self) -> None:
        self.batches: list[int] = []

    def apply(self, tx: Any, changes: Any) -> None:
        self.batches.append(len(changes))
        if any(change.fields["site"] == "poison" for change in changes):
            raise RuntimeError("cannot take it")


def test_a_batched_step_failure_is_found_by_halving(make_box: BoxFactory) -> None:
    """A step that takes the batch at once cannot say which delivery failed: the batch
    is halved until the one it fails on is alone, and only that one fails."""
    step = Batched()
    batches = step.batches
    spec = InboxSpec("cases", "json", apply=step, settings={"fields": TRIAGE_FIELDS})
    box = make_box([spec])
    batch = [case(f"h{i}") for i in range(15)]
    batch.insert(11, case("p", site="poison"))
    outcomes = box.ingest_each("cases", batch)
    assert [i for i, o in enumerate(outcomes) if isinstance(o, ApplyError)] == [11]
    assert box.stats("cases")["records"] == 15
    assert len(batches) <= 2 * 5  # about log2(16) levels, not one per delivery


# -- through a real server ---------------------------------------------------------------
SERVED_CONFIG = """
[inboxes.cases]
codec = "json"
identity = ["/id"]
fields = { site = "/site", need = "/need", headcount = "/headcount", pri = "/pri" }
apply = "triage"

[inboxes.hooked]
codec = "json"
identity = ["/id"]
fields = { site = "/site", need = "/need", headcount = "/headcount", pri = "/pri" }
apply = "poisonstep:step"
"""

POISON_STEP = """
def step(tx, change):
    site = None if change.fields["site"] == "poison" else change.fields["site"]
    mark = "%s" if type(tx).__name__.startswith("Postgres") else "?"
    tx.execute(
        "INSERT INTO triage_ledger (record_id, inbox_id, site, need, headcount, pri) "
        f"VALUES ({mark}, {mark}, {mark}, 'MED', 1, 1)",
        (change.record_id, change.inbox_id, site),
    )
"""


@pytest.fixture
def served(
    shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str]]:
    (tmp_path / "poisonstep.py").write_text(textwrap.dedent(POISON_STEP))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "oncebox.toml"
    config.write_text(SERVED_CONFIG)
    env = {
        "ONCEBOX_CONFIG": str(config),
        # Only the step's folder: the suite's own path holds bench/http.py, which would
        # shadow the standard library's http in the server process.
        "PYTHONPATH": str(tmp_path),
    }
    box = oncebox.open(shared_url, config=config)
    secret = box.create_token("probe", ["*"], ["read", "write"]).secret
    box.close()
    with serving(shared_url, "--workers", "1", env=env) as server:
        yield server.base, secret


def _post(base: str, secret: str, inbox: str, body: bytes, batch: bool = False) -> tuple[int, Any]:
    route = "batch" if batch else "deliveries"
    status, _headers, answer = get(f"{base}/v1/inboxes/{inbox}/{route}", secret, body)
    return status, json.loads(answer)


@pytest.mark.slow
@pytest.mark.parametrize("inbox", ["cases", "hooked"])
def test_poison_deliveries_never_fail_the_honest_ones_in_their_round(
    served: tuple[str, str], inbox: str
) -> None:
    base, secret = served
    honest = [case(f"h{i}").body for i in range(48)]
    poison = [case(f"p{i}", site=None if inbox == "cases" else "poison").body for i in range(16)]
    bodies = [(b, True) for b in honest] + [(b, False) for b in poison]
    bodies.sort(key=lambda item: item[0])  # honest and poison interleaved in each round
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda item: _post(base, secret, inbox, item[0]), bodies))
    for (_body, is_honest), (status, answer) in zip(bodies, answers, strict=True):
        text = json.dumps(answer)
        assert not any(word in text for word in STORE_WORDS), text
        if is_honest:
            assert status == 201 and answer["verdict"] == "accepted"
        elif inbox == "cases":
            assert status == 422 and answer["reason"] == "bad_field" and answer["may_ack"]
        else:
            assert status == 500 and answer["type"].endswith("apply-failed")
    array = b"[" + b",".join(honest[:2] + poison[:1]) + b"]"  # application/json: an array
    status, batch = _post(base, secret, inbox, array, batch=True)
    assert status == 200
    verdicts = [(d["verdict"], d["reason"], d["may_ack"]) for d in batch["decisions"]]
    assert verdicts[:2] == [("duplicate", None, True)] * 2
    expected = (
        ("rejected", "bad_field", True) if inbox == "cases" else ("rejected", "apply_failed", False)
    )
    assert verdicts[2] == expected
