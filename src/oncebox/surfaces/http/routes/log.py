"""The log: its checkpoint, and proofs an auditor checks offline against one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from oncebox.engine.segment import MAX_ENTRIES
from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces.http.access import InboxName, RowId, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.models import (
    CheckpointOut,
    ConsistencyProofOut,
    InclusionProofOut,
    SegmentOut,
)
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors
from oncebox.surfaces.http.problems import ProblemError
from oncebox.surfaces.lines import INT64_MAX

TAG = {
    "name": "log",
    "description": "The append-only checkpoint log: a signed checkpoint, inclusion proofs "
    "for records, consistency proofs between tree sizes (`oncebox verify-proof`) and feed "
    "segments (`oncebox verify-feed`).",
}
router = APIRouter(tags=["log"])


@router.get(
    "/v1/log/checkpoint",
    response_model=CheckpointOut,
    response_model_exclude_unset=True,
    summary="The latest checkpoint (signed when the service has a key)",
    response_description="The checkpoint; `signature` and `key_id` only when signed",
    responses=errors(*AUTHENTICATED),
)
@needs(TokenScope.READ)
def checkpoint(who: Authed, svc: Served) -> dict[str, Any]:
    """The tree size, Merkle root and chain head now, signed with Ed25519 when the
    service has a key (`oncebox serve --sign`)."""
    return svc.box.checkpoint(svc.private_key).to_json()


@router.get(
    "/v1/log/proofs/records/{record_id}",
    response_model=InclusionProofOut,
    response_model_exclude_unset=True,
    summary="An inclusion proof for a record's seal",
    response_description="The proof, with the record fields its entry seals",
    responses=errors(
        *AUTHENTICATED,
        404,
        409,
        422,
        e404="No such record.",
        e409="The record is not sealed yet.",
    ),
)
@needs(TokenScope.READ)
def prove_record(record_id: RowId, who: Authed, svc: Served) -> dict[str, Any]:
    """Prove that the log entry sealing the record is in the current tree; check it
    offline with `oncebox verify-proof` against a checkpoint."""
    inbox = svc.box.record_inbox(record_id)
    who.found(inbox, f"no record {record_id}")
    return svc.box.prove(record_id)


@router.get(
    "/v1/log/proofs/consistency",
    response_model=ConsistencyProofOut,
    summary="A consistency proof between two tree sizes",
    response_description="The proof",
    responses=errors(
        *AUTHENTICATED,
        409,
        422,
        e409="The sizes are not 0 < old <= new <= the tree's size.",
    ),
)
@needs(TokenScope.READ)
def prove_consistency(
    who: Authed,
    svc: Served,
    old: Annotated[int, Query(ge=0, description="The older tree size (log entries).")],
    new: Annotated[
        int | None, Query(ge=0, description="The newer tree size (default: the tree now).")
    ] = None,
) -> dict[str, Any]:
    """Prove that the tree of `new` entries extends the tree of `old` entries."""
    return svc.box.prove_consistency(old, new)


@router.get(
    "/v1/inboxes/{inbox}/feed/segment",
    response_model=SegmentOut,
    response_model_exclude_unset=True,
    summary="A feed segment: every log entry of a range, checkable offline",
    response_description="The segment",
    responses=errors(
        *AUTHENTICATED,
        404,
        409,
        422,
        e403="The token may not read the inbox, or asked for `whole` without covering `*`.",
        e404="No such inbox.",
        e409=f"The range is not 1 <= from <= to <= tree_size <= the log's size, or is over "
        f"{MAX_ENTRIES:,} entries.",
    ),
)
@needs(TokenScope.READ, on_inbox=True)
async def segment(
    inbox: InboxName,
    who: Authed,
    svc: Served,
    start: Annotated[
        int, Query(alias="from", ge=1, lt=INT64_MAX + 1, description="The first log position.")
    ],
    end: Annotated[
        int, Query(alias="to", ge=1, lt=INT64_MAX + 1, description="The last log position.")
    ],
    tree_size: Annotated[
        int | None,
        Query(
            ge=1,
            lt=INT64_MAX + 1,
            description="The tree to prove it to: a checkpoint's `tree_size` (default: now).",
        ),
    ] = None,
    whole: Annotated[
        bool,
        Query(
            description="Every other entry whole too, not as its leaf hash (a token for `*` "
            "only: it shows every inbox's entries)."
        ),
    ] = False,
) -> dict[str, Any]:
    """Every log entry from `from` to `to` (log positions, at most 1,000): the
    inbox's feed entries (records sealed, revisions accepted) whole with their content
    (left out over 1,024 bytes, its length and SHA-256 kept), every other entry as its
    leaf hash, and what ties the range to the tree of `tree_size` entries. Check it
    offline with `oncebox verify-feed` against a checkpoint of that size."""
    if whole and not who.sees_all:
        raise ProblemError(
            403, "forbidden", "a whole segment shows every inbox's entries: it needs a token "
            "for every inbox (*)"
        )  # fmt: skip
    return await svc.readers.run(
        lambda: svc.box.segment(inbox, start, end, tree_size=tree_size, whole=whole)
    )
