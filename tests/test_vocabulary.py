"""Each word is spelled once (issue 20, item 1): the surfaces offer exactly the domain's
choices, the HTTP models are made from the entity types, and the note limit is the
engine's rule, the same on every surface."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated

import click
import pytest
from pydantic import BaseModel

from conftest import SESSION, BoxFactory
from oncebox import Delivery, InvalidOperation
from oncebox.domain import (
    NOTE_MAX,
    DeadLetter,
    Digest,
    Doc,
    Instant,
    Quarantined,
    QuarantineStatus,
    Record,
    Resolution,
)
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.cli import cli
from oncebox.surfaces.http.models import DeadLetterOut, QuarantineOut, RecordOut, ResolveIn
from oncebox.surfaces.http.shapes import shaped


def test_the_cli_offers_the_domains_choices() -> None:
    group = cli.commands["quarantine"]
    assert isinstance(group, click.Group)
    listing = {p.name: p for p in group.commands["list"].params}
    resolving = {p.name: p for p in group.commands["resolve"].params}
    assert isinstance(listing["status"].type, click.Choice)
    assert list(listing["status"].type.choices) == [*QuarantineStatus, "all"]
    assert isinstance(resolving["action"].type, click.Choice)
    assert list(resolving["action"].type.choices) == list(Resolution)


def test_the_api_takes_the_domains_resolutions_and_note_limit() -> None:
    schema = ResolveIn.model_json_schema()["properties"]
    assert schema["action"]["enum"] == [r.value for r in Resolution]
    assert schema["note"]["maxLength"] == NOTE_MAX


@pytest.mark.parametrize(
    ("model", "entity", "added"),
    [
        (RecordOut, Record, set()),
        (QuarantineOut, Quarantined, {"inbox", "original"}),
        (DeadLetterOut, DeadLetter, {"inbox"}),
    ],
)
def test_a_model_is_made_from_its_entity(model: type, entity: type, added: set[str]) -> None:
    assert set(model.model_fields) == {f.name for f in fields(entity)} - {"cut"} | added


@dataclass(frozen=True)
class Widened:
    """An entity with a new column: its model needs nothing more."""

    id: Annotated[int, Doc("The id.")]
    seen_at: Annotated[Instant, Doc("When.")]
    digest: Annotated[Digest | None, Doc("Its digest.")] = None


@shaped(Widened)
class WidenedOut(BaseModel):
    """A widened entity."""


def test_a_field_added_to_an_entity_reaches_its_model() -> None:
    schema = WidenedOut.model_json_schema()
    assert list(schema["properties"]) == ["id", "seen_at", "digest"]
    assert schema["properties"]["seen_at"]["type"] == "string"  # ISO 8601
    assert schema["properties"]["seen_at"]["description"] == "When."
    assert schema["required"] == ["id", "seen_at"]


def test_a_note_past_the_limit_is_refused_by_the_engine(make_box: BoxFactory) -> None:
    box = make_box()
    key, frame = SESSION[0]
    box.ingest("ussd", Delivery(frame.encode(), key=key))
    changed = make_frame(1, "Kakuma1", "MED", 9, 86).encode()
    conflict = box.ingest("ussd", Delivery(changed, key=key))
    assert conflict.quarantine_id is not None
    with pytest.raises(InvalidOperation, match="at most 4,096"):
        box.resolve(conflict.quarantine_id, "keep", "n" * (NOTE_MAX + 1))
    kept = box.resolve(conflict.quarantine_id, "keep", "n" * NOTE_MAX)
    assert kept.status == QuarantineStatus.KEPT
