"""Signed requests at the HTTP edge: what a request's signature is checked over, and the
OpenAPI description of the two signing headers.

The rule itself (the signed string, the strict header, the window) is pure and lives in
:mod:`oncebox.engine.tokens`; this module only takes the request apart the way it was
sent (the raw target and header bytes, not a decoded copy) and documents it.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Scope

from oncebox.engine.tokens import SIGNATURE_VERSION, SIGNATURE_WINDOW, SIGNED_HEADERS

SIGNED_STRING = (
    "For a token created with `--hmac` only (other tokens ignore it): "
    "`sha256=` and the 64 lowercase hex digits of HMAC-SHA256(key, signed string), "
    "nothing else (any other spelling is refused). The signed string is these lines, "
    "each ending in a newline, then the body's bytes: "
    f"`{SIGNATURE_VERSION}`; the method; the path and query exactly as sent; then one line "
    f"per header, in this order: {', '.join(f'`{h}`' for h in SIGNED_HEADERS)}, spelled "
    "`name:value` when the request carries it and the bare `name` when it does not. A "
    "signed request may carry no other `Oncebox-*` header and none of these twice. Each "
    "signature is accepted once."
)
TIMESTAMP = (
    "For a token created with `--hmac` only: unix seconds, within "
    f"{int(SIGNATURE_WINDOW)} s of the server's clock; signed as `oncebox-timestamp`."
)


def request_target(scope: Scope) -> bytes:
    """The path and query exactly as the client sent them (what the client signed)."""
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    return raw_path + b"?" + query if query else raw_path


def document_signing(schema: dict[str, Any]) -> None:
    """Declare the signing headers on every authenticated operation of ``schema``.

    No ``pattern``: tokens without an HMAC key ignore both headers, so a schema that
    called a malformed one invalid would be wrong for them.
    """
    headers = [
        {
            "in": "header",
            "name": "Oncebox-Timestamp",
            "required": False,
            "description": TIMESTAMP,
            "schema": {"type": "string"},
        },
        {
            "in": "header",
            "name": "Oncebox-Signature",
            "required": False,
            "description": SIGNED_STRING,
            "schema": {"type": "string"},
        },
    ]
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            if operation.get("security"):
                operation.setdefault("parameters", []).extend(dict(h) for h in headers)
