"""Seed 002's refresh contract and the several-worker extension, on every backend."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from conftest import BoxFactory
from helpers import event_body
from oncebox import ManualClock, Oncebox
from oncebox.engine.reconciler import (
    Backoff,
    Completion,
    Outcome,
    ReadResult,
    Reconciler,
    WorkKey,
)
from oncebox.engine.steps import generation
from oncebox.errors import InvalidDocument, InvalidOperation, NotFound, WrongKey

PRIMARY = WorkKey("SELLER-A", "SKU-1", "ATVPDKIKX0DER")
OTHER = WorkKey("SELLER-A", "SKU-2", "ATVPDKIKX0DER")


def _nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` levels deep."""
    top: dict[str, Any] = {}
    inner = top
    for _ in range(depth):
        inner["a"] = {}
        inner = inner["a"]
    return top


def reading(status: str = "ACTIVE") -> Any:
    def reader(key: WorkKey) -> ReadResult:
        return ReadResult(key, {"status": status, "sku": key.sku})

    return reader


def row(box: Oncebox, key: WorkKey = PRIMARY) -> Any:
    [found] = [r for r in box.work_keys("listing") if r.key == tuple(key)]
    return found


def worker(box: Oncebox, reader: Any = None, **options: Any) -> Reconciler:
    return box.reconciler("listing", reader, backoff=Backoff(rng=lambda: 0.0), **options)


def test_refresh_applies_and_cleans_the_key(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1"))
    recon = worker(box, reading())
    assert [r.key for r in recon.dirty_keys()] == [tuple(PRIMARY)]
    assert recon.refresh_once() is Outcome.APPLIED
    assert recon.dirty_keys() == []
    clean = row(box)
    assert (clean.generation, clean.applied_generation, clean.document_generation) == (1, 1, 1)
    assert clean.document == '{"sku":"SKU-1","status":"ACTIVE"}'
    assert recon.refresh_once() is Outcome.IDLE


def test_a_document_with_an_integer_too_long_for_python_still_shows(box: Oncebox) -> None:
    import json

    from oncebox.surfaces.views import work_key_json

    huge = "9" * 5001  # beyond Python's 4,300-digit int conversion limit
    box.ingest("listing", event_body("n-1"))
    recon = worker(box)
    ticket = recon.begin_refresh(PRIMARY)
    assert ticket is not None
    text = '{"n":' + huge + ',"small":7}'
    assert recon.complete(ticket, ReadResult(PRIMARY, text)) is Completion.APPLIED
    shown = work_key_json(row(box))
    assert shown["document"] == {"n": huge, "small": 7}
    json.dumps(shown)  # and the view can be sent


def test_a_duplicate_after_clean_work_does_not_dirty_it(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1"))
    worker(box, reading()).refresh_once()
    assert str(box.ingest("listing", event_body("n-1")).verdict) == "duplicate"
    assert not row(box).dirty


def test_an_event_during_the_read_supersedes_the_completion(make_box: BoxFactory) -> None:
    box = make_box()
    box.ingest("listing", event_body("n-1"))
    recon = worker(box)
    ticket = recon.begin_refresh(PRIMARY)
    assert ticket is not None and ticket.generation == 1
    # A second connection (another thread) commits a new event while the read runs.
    other = threading.Thread(target=lambda: box.ingest("listing", event_body("n-2")))
    other.start()
    other.join()
    assert recon.complete(ticket, ReadResult(PRIMARY, {"status": "stale"})) is (
        Completion.SUPERSEDED
    )
    stale = row(box)
    assert stale.dirty and stale.document is None and stale.generation == 2
    recon.reader = reading("fresh")
    assert recon.refresh_once() is Outcome.APPLIED
    assert row(box).document_generation == 2 and "fresh" in row(box).document


def test_a_failed_read_leaves_the_key_dirty_and_the_last_document(
    box: Oncebox, clock: ManualClock
) -> None:
    box.ingest("listing", event_body("n-1"))
    worker(box, reading("first")).refresh_once()
    box.ingest("listing", event_body("n-2"))

    def broken(key: WorkKey) -> ReadResult:
        raise TimeoutError("provider timed out")

    recon = worker(box, broken)
    assert recon.refresh_once() is Outcome.FAILED
    failed = row(box)
    assert failed.dirty and "first" in failed.document and failed.document_generation == 1
    assert failed.failures == 1 and "provider timed out" in failed.last_error
    assert recon.refresh_once() is Outcome.IDLE, "the key backs off"
    clock.advance(10)
    recon.reader = reading("second")
    assert recon.refresh_once() is Outcome.APPLIED
    assert row(box).failures == 0 and "second" in row(box).document


def test_a_result_for_another_key_is_refused_and_changes_nothing(
    box: Oncebox, clock: ManualClock
) -> None:
    box.ingest("listing", event_body("n-1"))
    recon = worker(box)
    ticket = recon.begin_refresh(PRIMARY)
    assert ticket is not None
    with pytest.raises(WrongKey, match="SKU-2"):
        recon.complete(ticket, ReadResult(OTHER, {"status": "ACTIVE"}))
    assert row(box).dirty and row(box).document is None

    def wrong(key: WorkKey) -> ReadResult:
        return ReadResult(OTHER, {"status": "ACTIVE"})

    clock.advance(31)  # the first claim expires
    assert worker(box, wrong).refresh_once() is Outcome.FAILED
    assert row(box).dirty and row(box).document is None and "WrongKey" in row(box).last_error


def test_keys_are_independent(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1"))
    box.ingest("listing", event_body("n-2", sku="SKU-2"))
    box.ingest("listing", event_body("n-3", marketplace_id="A1F83G8C2ARO7P"))
    box.ingest("listing", event_body("n-4", seller_id="SELLER-B"))
    recon = worker(box, reading())
    ticket = recon.begin_refresh(PRIMARY)
    assert ticket is not None
    assert recon.complete(ticket, ReadResult(PRIMARY, {"s": 1})) is Completion.APPLIED
    assert [r.dirty for r in box.work_keys("listing")].count(True) == 3


def test_repeated_completion_is_a_no_op(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1"))
    recon = worker(box)
    ticket = recon.begin_refresh(PRIMARY)
    assert ticket is not None
    assert recon.complete(ticket, ReadResult(PRIMARY, {"v": 1})) is Completion.APPLIED
    assert recon.complete(ticket, ReadResult(PRIMARY, {"v": 2})) is Completion.REPEATED
    assert row(box).document == '{"v":1}'
    assert [e.step for e in box.log_entries()].count("complete") == 1


@pytest.mark.parametrize(
    "document,reason",
    [
        ([1, 2], "bad_shape"),
        ("[]", "bad_shape"),
        (b'{"a": 1, "a": 2}', "duplicate_member"),
        ('{"a": NaN}', "non_finite_number"),
        ({"a": float("inf")}, "bad_json"),
        ("[" * 21 + "]" * 21, "too_deep"),
        # As an object, too deep for json.dumps itself: its RecursionError escaped
        # refresh_once and stopped every worker.
        (_nested(100_000), "too_deep"),
        ({"a": "x" * 70_000}, "too_large"),
        (b"\xff{}", "invalid_unicode"),
        ("{not json", "bad_json"),
        ({"a": "\ud800"}, "invalid_unicode"),
    ],
)
def test_invalid_read_documents_are_refused(box: Oncebox, document: Any, reason: str) -> None:
    box.ingest("listing", event_body("n-1"))
    recon = worker(box)
    ticket = recon.begin_refresh(PRIMARY)
    assert ticket is not None
    with pytest.raises(InvalidDocument) as refused:
        recon.complete(ticket, ReadResult(PRIMARY, document))
    assert refused.value.reason == reason
    assert row(box).dirty and row(box).document is None


def test_an_expired_claim_is_taken_over_and_the_old_holder_is_fenced(
    box: Oncebox, clock: ManualClock
) -> None:
    box.ingest("listing", event_body("n-1"))
    slow, fast = worker(box, worker="slow", claim_ttl=30), worker(box, worker="fast")
    held = slow.begin_refresh()
    assert held is not None and fast.begin_refresh() is None, "one holder per key"
    with pytest.raises(InvalidOperation, match="held by slow"):
        fast.begin_refresh(PRIMARY)
    clock.advance(31)
    taken = fast.begin_refresh()
    assert taken is not None and taken.token > held.token
    assert slow.complete(held, ReadResult(PRIMARY, {"by": "slow"})) is Completion.STALE
    assert fast.complete(taken, ReadResult(PRIMARY, {"by": "fast"})) is Completion.APPLIED
    assert row(box).document == '{"by":"fast"}'


def test_a_key_that_keeps_failing_goes_to_review_and_back(box: Oncebox, clock: ManualClock) -> None:
    box.ingest("listing", event_body("n-1"))
    delays = []

    def broken(key: WorkKey) -> ReadResult:
        raise ConnectionError("refused")

    recon = box.reconciler(
        "listing", broken, max_failures=3, backoff=Backoff(base=2, cap=5, rng=lambda: 1.0)
    )
    for _ in range(3):
        assert recon.refresh_once() is Outcome.FAILED
        delays.append(row(box).next_attempt - clock.now)
        clock.advance(60)
    assert delays[:2] == [2.0, 4.0], "exponential"
    [waiting] = recon.review()
    assert waiting.failures == 3 and "refused" in waiting.last_error
    assert recon.refresh_once() is Outcome.IDLE, "a key in review is not retried"
    recon.retry(PRIMARY)
    with pytest.raises(InvalidOperation, match="not in review"):
        recon.retry(PRIMARY)
    recon.reader = reading()
    assert recon.refresh_once() is Outcome.APPLIED
    assert "review" in [e.step for e in box.log_entries()]
    assert "retry" in [e.step for e in box.log_entries()]


def test_backoff_is_capped_and_jittered() -> None:
    values = iter([0.0, 1.0, 0.5])
    backoff = Backoff(base=1, cap=8, rng=lambda: next(values))
    assert backoff.delay(1) == 0.5
    assert backoff.delay(10) == 8.0
    assert backoff.delay(3) == 3.0


def test_backoff_stays_capped_however_many_failures() -> None:
    """2.0 ** 1025 overflows a float: with ``max_failures`` above 1,025 (review that
    practically never comes), the key's 1,026th failure raised OverflowError inside the
    transaction that counts it, killing the worker, and every worker after it."""
    backoff = Backoff(base=1, cap=300, rng=lambda: 1.0)
    assert backoff.delay(1026) == 300.0
    assert backoff.delay(10**9) == 300.0


def test_completions_are_log_entries_and_the_log_verifies(box: Oncebox) -> None:
    box.ingest("listing", event_body("n-1"))
    box.ingest("listing", event_body("n-2", sku="SKU-2"))
    recon = worker(box, reading())
    while recon.refresh_once() is not Outcome.IDLE:
        pass
    assert [e.step for e in box.log_entries()].count("complete") == 2
    assert box.verify().ok


def test_a_key_claimed_while_the_search_read_it_is_passed_over(
    box: Oncebox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a search for a claimable key can read a key's lease as it stood
    before another worker's claim committed (found by the four-worker process test): the
    worker must pass it over and take the next, never fail."""
    box.ingest("listing", event_body("n-1"))
    box.ingest("listing", event_body("n-2", sku=OTHER.sku))
    first = worker(box, worker="first").begin_refresh(PRIMARY)
    assert first is not None
    real = generation.next_claimable
    stale = [row(box, PRIMARY)]  # what a search begun before that claim committed saw

    def searched(tx: Any, inbox_id: int, now: float) -> Any:
        return stale.pop() if stale else real(tx, inbox_id, now)

    monkeypatch.setattr(generation, "next_claimable", searched)
    ticket = worker(box, worker="second").begin_refresh()
    assert ticket is not None and tuple(ticket.key) == tuple(OTHER)


def test_a_read_that_fails_after_its_claim_ran_out_still_counts(
    box: Oncebox, clock: ManualClock
) -> None:
    """A read that hangs until the reader gives up (the CLI's default timeout is as long
    as its claim) fails after the claim ran out. Nobody took the key over meanwhile, so
    the failure is this worker's: it must back off and count towards review. It was
    dropped as someone else's: the key was due again at once, never backed off and never
    went to review, asking the remote again and again without end."""
    box.ingest("listing", event_body("n-1"))

    def hanging(key: WorkKey) -> ReadResult:
        clock.advance(31)  # past the claim
        raise TimeoutError("no answer in 30 s")

    recon = box.reconciler(
        "listing", hanging, claim_ttl=30, max_failures=2, backoff=Backoff(base=10, rng=lambda: 1.0)
    )
    assert recon.refresh_once() is Outcome.FAILED
    first = row(box)
    assert first.failures == 1 and first.next_attempt == clock.now + 10
    assert recon.refresh_once() is Outcome.IDLE, "backing off"
    clock.advance(10)
    assert recon.refresh_once() is Outcome.FAILED
    [waiting] = recon.review()
    assert waiting.failures == 2 and "no answer" in waiting.last_error


def test_a_failure_after_another_worker_took_the_key_over_is_not_counted(
    box: Oncebox, clock: ManualClock
) -> None:
    box.ingest("listing", event_body("n-1"))
    slow, fast = worker(box, worker="slow", claim_ttl=30), worker(box, worker="fast")
    held = slow.begin_refresh()
    assert held is not None
    clock.advance(31)
    taken = fast.begin_refresh()
    assert taken is not None
    slow.fail(held, "TimeoutError: late")
    assert row(box).failures == 0 and row(box).claimed_by == "fast"


@pytest.mark.parametrize("options", [{"claim_ttl": 0}, {"max_failures": 0}])
def test_run_workers_refuses_bad_options_instead_of_doing_nothing(
    box: Oncebox, options: dict[str, Any]
) -> None:
    """Each worker thread made its reconciler outside the guard that hands a thread's
    error back: a bad option killed every thread with a traceback on stderr and
    run_workers returned no outcomes, so ``oncebox reconcile --claim-ttl 0`` refreshed
    nothing and exited 0."""
    from oncebox.engine.reconciler import run_workers

    box.ingest("listing", event_body("n-1"))
    with pytest.raises(InvalidOperation):
        run_workers(box, "listing", reading(), workers=2, once=True, **options)
    assert row(box).dirty


def test_a_read_that_always_outlasts_its_claim_backs_off_and_goes_to_review(
    box: Oncebox, clock: ManualClock
) -> None:
    """A read that succeeds but only after its claim ran out is refused (the fence);
    nobody else took the key, so it was due again at once: the same slow read, refused
    again, without end, never backing off and never in review for an operator to see
    that the claim is shorter than the reads."""
    box.ingest("listing", event_body("n-1"))

    def slow(key: WorkKey) -> ReadResult:
        clock.advance(31)
        return ReadResult(key, {"status": "ACTIVE"})

    recon = box.reconciler(
        "listing", slow, claim_ttl=30, max_failures=2, backoff=Backoff(base=10, rng=lambda: 1.0)
    )
    assert recon.refresh_once() is Outcome.FAILED
    assert row(box).failures == 1 and "claim" in row(box).last_error
    assert recon.refresh_once() is Outcome.IDLE, "backing off"
    clock.advance(10)
    assert recon.refresh_once() is Outcome.FAILED
    [waiting] = recon.review()
    assert waiting.document is None and waiting.dirty


def test_a_key_or_scope_that_is_not_text_is_answered_not_a_traceback(box: Oncebox) -> None:
    """A lone surrogate (what a command line's undecodable byte becomes) in a work key
    or a lease's scope reached the store, which cannot encode it: UnicodeEncodeError
    (``oncebox work show``: "internal error"); a NUL, which PostgreSQL's text cannot
    hold, a StorageError there ("the store failed"). No key or scope holds either."""
    recon = worker(box)
    for odd in [("\udcff", "SKU-1", "ATVPDKIKX0DER"), ("SELLER-A\x00", "SKU-1", "M")]:
        assert box.work_key("listing", odd) is None
        with pytest.raises(InvalidOperation, match="not in review"):
            recon.retry(odd)
        with pytest.raises(NotFound):
            recon.begin_refresh(odd)
        with pytest.raises(InvalidOperation, match="scope"):
            box.release("feed", odd[0], 1)


def test_a_page_after_a_key_that_is_not_text_is_refused_clearly(box: Oncebox) -> None:
    """``GET .../work?after_seller_id=%00`` (or a lone surrogate in ``after``) reached the
    store: on PostgreSQL a StorageError ("the store failed", a 503), on SQLite a
    UnicodeEncodeError for the surrogate. A page cannot start after a key no store holds."""
    from oncebox.errors import InvalidQuery

    box.ingest("listing", event_body("n-1"))
    for after in [("a\x00", "b", "c"), ("\udcff", "b", "c")]:
        with pytest.raises(InvalidQuery):
            box.work_keys("listing", after=after)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda box: box.work_keys("listing", limit=-1), id="keys-negative"),
        pytest.param(lambda box: box.work_keys("listing", limit="5"), id="keys-text"),
        pytest.param(lambda box: box.work_keys("listing", limit=1.5), id="keys-float"),
        pytest.param(lambda box: worker(box).dirty_keys(-1), id="dirty-negative"),
        pytest.param(lambda box: worker(box).review(-1), id="review-negative"),
        pytest.param(lambda box: worker(box, claim_ttl="5"), id="claim-ttl-text"),
        pytest.param(lambda box: worker(box, max_failures="5"), id="max-failures-text"),
        pytest.param(lambda box: worker(box, max_failures=2.5), id="max-failures-float"),
        pytest.param(lambda box: worker(box, worker=5), id="worker-int"),
    ],
)
def test_a_bad_limit_or_option_of_the_work_keys_is_refused_clearly(box: Oncebox, call: Any) -> None:
    """``work_keys(limit=-1)`` gave every key on SQLite (its LIMIT -1 is none at all)
    and a StorageError on PostgreSQL; a text limit or option met a comparison
    (TypeError) or the store. Each is the caller's error, said as one."""
    box.ingest("listing", event_body("n-1"))
    with pytest.raises(InvalidOperation):
        call(box)


@pytest.mark.parametrize(
    "returned",
    [
        pytest.param(lambda key: {"status": "ACTIVE"}, id="the-document-alone"),
        pytest.param(lambda key: None, id="none"),
        pytest.param(lambda key: ReadResult(None, {"status": "ACTIVE"}), id="no-key"),  # type: ignore[arg-type]
        pytest.param(lambda key: ReadResult(7, {"status": "ACTIVE"}), id="int-key"),  # type: ignore[arg-type]
    ],
)
def test_a_reader_that_returns_the_wrong_type_fails_its_key_not_every_worker(
    box: Oncebox, returned: Any
) -> None:
    """A reader that returned something other than a ReadResult (the document alone, a
    forgotten return) raised AttributeError or TypeError out of ``refresh_once``: the
    worker thread died, ``run_workers`` set stop for every other worker and raised, and
    the other keys were never refreshed. It is that key's failed read: counted, backed
    off, in review after ``max_failures``, with a message that says what was returned."""
    from oncebox.engine.reconciler import run_workers

    box.ingest("listing", event_body("n-1"))
    box.ingest("listing", event_body("n-2", sku="SKU-2"))

    def reader(key: WorkKey) -> ReadResult:
        if key == PRIMARY:
            return returned(key)  # type: ignore[no-any-return]
        return ReadResult(key, {"status": "ACTIVE"})

    totals = run_workers(
        box, "listing", reader, workers=2, once=True, backoff=Backoff(rng=lambda: 0.0)
    )
    assert totals[Outcome.FAILED] == 1 and totals[Outcome.APPLIED] == 1
    bad = row(box)
    assert bad.dirty and bad.failures == 1 and "ReadResult" in bad.last_error
    assert not row(box, OTHER).dirty


@pytest.mark.parametrize("key", [("a", "b"), "abc", (1, 2, 3), ("a", "b", "c", "d")])
def test_a_work_key_that_is_not_three_strings_is_refused_clearly(box: Oncebox, key: Any) -> None:
    """A key of two parts was the store's refusal ("Incorrect number of bindings", a
    StorageError) or an IndexError; integers a TypeError; the string ``"abc"`` was read
    as the key ``("a", "b", "c")``. A work key is three strings, or the caller's error."""
    box.ingest("listing", event_body("n-1"))
    recon = worker(box)
    for call in (
        lambda: box.work_key("listing", key),
        lambda: box.work_keys("listing", after=key),
        lambda: recon.begin_refresh(key),
        lambda: recon.retry(key),
    ):
        with pytest.raises(InvalidOperation, match="three strings"):
            call()
    assert row(box).dirty and row(box).claimed_by is None
