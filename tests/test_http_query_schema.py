"""The query parameters the dead-letter and record routes publish say what the service
takes: a dead-letter status is one of its known values (another is still the 400 naming
them), a key or identity holds no NUL (schemathesis found both said nowhere), and an
empty reason is no filter, as in the console."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

import oncebox
from conftest import INBOXES
from oncebox.domain import LetterStatus
from oncebox.surfaces.http import create_app


@pytest.fixture(scope="module")
def app() -> Iterator[tuple[Any, str]]:
    box = oncebox.open("sqlite:///:memory:", inboxes=INBOXES)
    try:
        secret = box.create_token("reader", ["*"], ["read"]).secret
        yield create_app(box), secret
    finally:
        box.close()


def parameters(doc: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """Each operation's schema of the query parameter ``name``."""
    return {
        f"{method.upper()} {path}": p["schema"]
        for path, methods in doc["paths"].items()
        for method, operation in methods.items()
        for p in operation.get("parameters", [])
        if p["in"] == "query" and p["name"] == name
    }


def test_a_dead_letter_status_is_published_as_its_known_values(app: tuple[Any, str]) -> None:
    statuses = parameters(app[0].openapi(), "status")
    letters = {op: s for op, s in statuses.items() if "dead-letters" in op}
    assert len(letters) == 5  # listing, lines, preview, bulk replay, bulk archive
    for schema in letters.values():
        enums = [choice.get("enum") for choice in schema["anyOf"] if "enum" in choice]
        assert enums == [[s.value for s in LetterStatus]]


def test_another_status_is_still_the_400_naming_the_known_ones(app: tuple[Any, str]) -> None:
    created, secret = app
    with TestClient(created, headers={"Authorization": f"Bearer {secret}"}) as http:
        answer = http.get("/v1/inboxes/ussd/dead-letters/preview", params={"status": "closed"})
    assert answer.status_code == 400
    assert answer.json()["known"] == ["open", "replayed", "archived"]


def test_an_empty_reason_is_no_filter(app: tuple[Any, str]) -> None:
    created, secret = app
    with TestClient(created, headers={"Authorization": f"Bearer {secret}"}) as http:
        for route in ("", "/preview", "/lines"):
            target = f"/v1/inboxes/ussd/dead-letters{route}"
            assert http.get(target, params={"reason": ""}).status_code == 200
            assert http.get(target, params={"reason": "bad_chksum"}).status_code == 400


def test_a_key_or_identity_is_published_without_nul(app: tuple[Any, str]) -> None:
    created, secret = app
    doc = created.openapi()
    found = [*parameters(doc, "key").items(), *parameters(doc, "identity").items()]
    on_records = [s for op, s in found if op.endswith(("/records", "/lookup"))]
    assert len(on_records) == 3  # records ?key= and ?identity=, lookup ?key=
    for schema in on_records:
        pattern = next(c for c in schema.get("anyOf", [schema]) if c.get("type") == "string")
        assert re.search(pattern["pattern"], "gw-1") and not re.search(pattern["pattern"], "a\x00b")
    with TestClient(created, headers={"Authorization": f"Bearer {secret}"}) as http:
        assert http.get("/v1/inboxes/ussd/lookup", params={"key": "a\x00b"}).status_code == 422
        assert http.get("/v1/inboxes/ussd/lookup", params={"key": "gw-1"}).status_code == 200


def test_a_limit_in_the_query_of_a_route_that_takes_none_there_is_refused() -> None:
    """The bulk actions take their limit in the body, the preview none: `?limit=5` on
    them was accepted and not applied (a bulk replay then replayed up to 100, its body's
    default), where docs/http.md says an unknown query parameter is a 400."""
    box = oncebox.open("sqlite:///:memory:", inboxes=INBOXES)
    try:
        secret = box.create_token("ops", ["*"], ["operator"]).secret
        with TestClient(create_app(box), headers={"Authorization": f"Bearer {secret}"}) as http:
            letters = "/v1/inboxes/ussd/dead-letters"
            for method, path in (("GET", "/preview"), ("POST", "/replay"), ("POST", "/archive")):
                answer = http.request(method, letters + path, params={"limit": 5})
                assert answer.status_code == 400, (method, path, answer.text)
                assert "limit" not in answer.json()["known"]
            for path in ("", "/lines"):  # these page by it
                assert http.get(letters + path, params={"limit": 5}).status_code == 200
    finally:
        box.close()
