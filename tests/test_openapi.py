"""``/openapi.json`` holds its rules: valid OpenAPI, every operation and parameter
described, no free-form success body, and every error status a route answers declared.

The last is checked both ways: by what each operation must declare (the statuses every
route can answer, those of authenticated routes, of inbox routes, of bodies), and by
asking each operation the questions that get refused (no token, the wrong token, an
unknown inbox, a bad parameter, a body over the bound) and finding each answer's status
declared for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from pydantic import BaseModel

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import ManualClock, Oncebox
from oncebox.domain import DeadLetter, Quarantined, Record, WorkItem
from oncebox.surfaces.http import create_app
from oncebox.surfaces.http.listed import (
    DeadLetterListedOut,
    QuarantineListedOut,
    RecordListedOut,
    WorkKeyListedOut,
)
from oncebox.surfaces.http.models import DeadLetterOut, QuarantineOut, RecordOut, WorkKeyOut
from openapidoc import openapi_document

METHODS = {"get", "post", "put", "patch", "delete"}
TEXT_MEDIA = (
    "text/plain",
    "application/openmetrics-text",
    "application/x-ndjson",
    "text/event-stream",
)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return openapi_document()


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = doc["components"]["schemas"][name]
    return schema


def test_the_document_is_valid_openapi(doc: dict[str, Any]) -> None:
    validate(doc)
    assert doc["info"]["license"]["identifier"] == "Apache-2.0"
    assert doc["servers"] and doc["servers"][0]["url"]
    assert doc["info"]["description"]


def test_every_operation_and_parameter_is_described(doc: dict[str, Any]) -> None:
    tags = {tag["name"]: tag for tag in doc["tags"]}
    assert all(tag.get("description") for tag in tags.values())
    ids = []
    for path, method, operation in operations(doc):
        where = f"{method.upper()} {path}"
        ids.append(operation["operationId"])
        assert operation.get("summary") and operation.get("description"), where
        assert operation.get("tags") and set(operation["tags"]) <= set(tags), where
        for parameter in operation.get("parameters", []):
            assert parameter.get("description"), f"{where}: {parameter['name']}"
        if "requestBody" in operation:
            assert operation["requestBody"].get("description"), where
        for status, response in operation["responses"].items():
            assert response.get("description"), f"{where} {status}"
            assert response["description"] != "Successful Response", f"{where} {status}"
    assert len(ids) == len(set(ids)) >= 17


def free_form(doc: dict[str, Any], schema: dict[str, Any], seen: set[str]) -> list[str]:
    """Where ``schema`` allows an object of any shape. Only ``JsonValue`` (documented
    arbitrary JSON: a record's codec fields, a reader's document) may be any value."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if name == "JsonValue" or name in seen:
            return []
        return free_form(doc, resolve(doc, schema), seen | {name})
    found: list[str] = []
    for key in ("anyOf", "oneOf", "allOf"):
        for part in schema.get(key, []):
            found += free_form(doc, part, seen)
    if not schema or schema == {"type": "object"}:
        return [str(schema)]
    if schema.get("type") == "object":
        extra = schema.get("additionalProperties")
        if not schema.get("properties") and not isinstance(extra, dict):
            found.append(str(schema))
        for part in schema.get("properties", {}).values():
            found += free_form(doc, part, seen)
        if isinstance(extra, dict):
            found += free_form(doc, extra, seen)
    if schema.get("type") == "array":
        found += free_form(doc, schema.get("items", {}), seen)
    return found


def test_no_success_body_is_free_form(doc: dict[str, Any]) -> None:
    for path, method, operation in operations(doc):
        for status, response in operation["responses"].items():
            if not status.startswith("2"):
                continue
            if "content" not in response:  # only an answer with no body has none
                assert status == "204", f"{method.upper()} {path} {status}"
                continue
            for media, content in response["content"].items():
                where = f"{method.upper()} {path} {status} {media}"
                schema = content["schema"]
                # Text and line streams (metrics, NDJSON downloads) are declared as text.
                if media.startswith(TEXT_MEDIA):
                    assert schema == {"type": "string"}, where
                    continue
                assert "$ref" in schema or schema.get("type") == "array", where
                assert free_form(doc, schema, set()) == [], where


def test_every_operation_declares_the_errors_of_its_kind(doc: dict[str, Any]) -> None:
    for path, method, operation in operations(doc):
        where = f"{method.upper()} {path}"
        declared = operation["responses"]
        assert {"408", "413", "431", "500", "503"} <= set(declared), where
        assert "Retry-After" in declared["503"]["headers"], where
        assert declared["401"]["headers"]["WWW-Authenticate"], where
        for status, response in declared.items():
            if status[0] in "45":
                content = response["content"]
                assert "application/problem+json" in content or status in ("409", "422"), where
        if operation.get("security") == []:
            continue  # public
        assert operation["security"] == [{"HTTPBearer": []}], where
        assert {"401", "403"} <= set(declared), where
        names = {p["name"] for p in operation.get("parameters", [])}
        assert {"Oncebox-Timestamp", "Oncebox-Signature"} <= names, where
        if "{inbox}" in path or "{record_id}" in path or "{quarantine_id}" in path:
            assert "404" in declared, where
        if "requestBody" in operation:
            assert {"400", "413"} <= set(declared), where


# -- the statuses actually answered ------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    db = Path(tmp_path_factory.mktemp("openapi")) / "api.db"
    box: Oncebox = oncebox.open(
        f"sqlite:///{db}", inboxes=INBOXES, clock=ManualClock(1_800_000_000.0)
    )
    secrets = {
        "all": box.create_token("all", ["*"], ["read", "write", "operator"]).secret,
        "feed": box.create_token("feed", ["feed"], ["read", "write", "operator"]).secret,
        "reader": box.create_token("reader", ["*"], ["read"]).secret,
        "writer": box.create_token("writer", ["*"], ["write"]).secret,
        "signer": box.create_token("signer", ["*"], ["read", "write"], hmac=True).secret,
        "revoked": box.create_token("revoked", ["*"], ["read", "write"]).secret,
    }
    box.revoke_token("revoked")
    box.ingest("ussd", oncebox.Delivery(b"H1|1|Kakuma1|MED|3|86|#89", key="r-1"))
    try:
        with serving(create_app(box, max_body=4096)) as url:
            yield url, secrets
    finally:
        box.close()


FILLS = {"record_id": "1", "quarantine_id": "1", "scope": "S"}
QUERY = {"token": "1", "old": "1"}
BODIES = {
    "/v1/inboxes/{inbox}/leases": b'{"scope": "S"}',
    "/v1/quarantine/{quarantine_id}/resolve": b'{"action": "keep", "note": "n"}',
    "/v1/inboxes/{inbox}/work/retry": b'{"seller_id": "a", "sku": "b", "marketplace_id": "c"}',
}


def asks(path: str, method: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The refusals worth asking an operation: (token, request options).

    Each way of being refused is asked on its own, so each answer a route can give is
    seen: every token (none, unknown, revoked, each scope, signed) against each inbox
    (a served one, an unknown one, one too long to be a name), and a bad query parameter
    and a bad lease header and a body over the bound (with and without a token) against
    each; then, against the served inbox, the malformed bodies (unparsable, not UTF-8, a
    repeated member). A request wrong twice is refused for one of its faults, each
    already asked alone, so malformed bodies are not asked again of the bad inboxes; a
    path that names no inbox is the same request whatever the inbox, so it is asked
    once. That is a little over half the requests of asking every pair, and it answers the
    same (operation, status) pairs.
    """
    body = BODIES.get(path, b"H1|1|Kakuma1|MED|3|86|#89") if method != "get" else None
    json = {"Content-Type": "application/json"}
    inboxes = ("ussd", "nope", "x" * 300) if "{inbox}" in path else ("ussd",)
    for inbox in inboxes:
        url = path.replace("{inbox}", inbox)
        for name, value in FILLS.items():
            url = url.replace("{" + name + "}", value)
        plain = {"url": url, "params": dict(QUERY), "content": body, "headers": json}
        for token in ("", "obx_unknown", "revoked", "feed", "reader", "writer", "signer", "all"):
            yield token, plain
        yield "all", {**plain, "params": {**QUERY, "limit": "0", "old": "-1", "token": "x"}}
        yield "all", {**plain, "headers": {"Oncebox-Lease-Token": "-1", **json}}
        # The bound on a body may be the inbox's own, so an oversize one is asked of each.
        yield "all", {**plain, "content": b"x" * 10_000}
        yield "", {**plain, "content": b"x" * 10_000}
        if inbox == "ussd":
            for bad in (b"{" * 3000, b"\xff\xfe", b'{"a": 1, "a": 2}'):
                yield "all", {**plain, "content": bad}


def test_every_status_answered_is_declared(
    doc: dict[str, Any], served: tuple[str, dict[str, str]]
) -> None:
    url, secrets = served
    undeclared: set[str] = set()
    answered = 0
    with httpx.Client(base_url=url, timeout=30) as http:
        for path, method, operation in operations(doc):
            for token, options in asks(path, method):
                secret = secrets.get(token, token)
                headers = {"Authorization": f"Bearer {secret}"} if secret else {}
                headers.update(options["headers"])
                sent = {k: v for k, v in options.items() if k != "headers"}
                response = http.request(method.upper(), headers=headers, **sent)
                answered += 1
                if str(response.status_code) not in operation["responses"]:
                    undeclared.add(f"{method.upper()} {path}: {response.status_code}")
    assert answered > 200
    assert undeclared == set()


# -- the models say what the views are ------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "view", "added", "left_out"),
    [
        # A whole row has nothing cut; a listing's row says what it cut (issue 19).
        (RecordOut, Record, set(), {"cut"}),
        (QuarantineOut, Quarantined, {"inbox", "original"}, {"cut"}),
        (DeadLetterOut, DeadLetter, {"inbox"}, {"cut"}),
        (RecordListedOut, Record, {"content_sha256"}, set()),
        (QuarantineListedOut, Quarantined, {"inbox", "original", "content_sha256"}, set()),
        (DeadLetterListedOut, DeadLetter, {"inbox"}, set()),
        (
            WorkKeyOut,
            WorkItem,
            {"key", "dirty"},
            {
                "seller_id",
                "sku",
                "marketplace_id",
                "applied_token",
                "refreshed_at",
                "claim_token",
                "claim_generation",
                "claim_expires",
                "next_attempt",
                "document_length",  # a listing's (issue 19)
                "cut",
            },
        ),
        (
            WorkKeyListedOut,
            WorkItem,
            {"key", "dirty"},
            {
                "seller_id",
                "sku",
                "marketplace_id",
                "applied_token",
                "refreshed_at",
                "claim_token",
                "claim_generation",
                "claim_expires",
                "next_attempt",
            },
        ),
    ],
)
def test_the_models_declare_every_field_of_the_views(
    model: type[BaseModel], view: type, added: set[str], left_out: set[str]
) -> None:
    """A field added to an engine view must be declared (or left out on purpose)."""
    shown = {f.name for f in fields(view)} - left_out | added
    assert set(model.model_fields) == shown


def _bounds(node: Any, where: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(node, dict):
        for name, value in node.items():
            if name in ("maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"):
                if isinstance(value, int | float) and not isinstance(value, bool):
                    yield f"{where}/{name}", value
            else:
                yield from _bounds(value, f"{where}/{name}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _bounds(value, f"{where}/{index}")


def test_every_integer_bound_reads_the_same_as_a_double(doc: dict[str, Any]) -> None:
    """A client that reads the schema with doubles (most JSON libraries, schemathesis)
    must read the same bound: 2**63 - 1 becomes 2**63 there, which the service then
    refuses as "at most 2**63 - 1" (found by schemathesis, ST202). 64-bit ids and
    tokens are published as below 2**63."""
    found = dict(_bounds(doc))
    assert any(value == 2**63 for value in found.values())  # the 64-bit bounds are here
    assert {where: value for where, value in found.items() if float(value) != value} == {}
