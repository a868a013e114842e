"""The log: its checkpoint, and proofs an auditor checks offline against one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from oncebox.engine.tokens import Scope as TokenScope
from oncebox.surfaces.http.access import RowId, Served
from oncebox.surfaces.http.auth import Authed, needs
from oncebox.surfaces.http.models import CheckpointOut, ConsistencyProofOut, InclusionProofOut
from oncebox.surfaces.http.openapi import AUTHENTICATED, errors

TAG = {
    "name": "log",
    "description": "The append-only checkpoint log: a signed checkpoint, inclusion proofs "
    "for records and consistency proofs between tree sizes (`oncebox verify-proof`).",
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
