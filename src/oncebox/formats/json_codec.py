"""``json``: any strict JSON object, with its identity and its noise configured.

Most integrations need two facts and no code: where the identity is, and what is
transport noise. ``identity`` is a list of JSON Pointers whose values together are the
identity (or ``"key"``: the delivery's key; or ``"content"``, the default: the canonical
content itself). ``witness_ignore`` names members removed before the witness, so a
redelivery whose attempt counter or receive time moved is a duplicate, not a conflict.
``fields`` hands named values to apply steps. The reader is json-event's strict one,
with its bounds by default.

The settings that decide identity and witness are spelled into the codec's name, which
the store keeps for the inbox (``json{"identity":["/id"]}``): an inbox re-declared with
other pointers or other ignored members is refused, as a change of codec is, because
identities and witnesses decided under one set mean nothing under another. Bounds,
fields and the webhook may change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from oncebox.errors import ConfigError
from oncebox.formats import json_event
from oncebox.formats.canonical import canonical, canonical_read
from oncebox.formats.codec import Decoded, Delivery, IdentityMode, check_settings
from oncebox.formats.invalid import Invalid
from oncebox.formats.jsonpointer import MISSING, Tokens, parse, remove, resolve, spell
from oncebox.formats.strictjson import JsonNumber, loads
from oncebox.formats.webhook_config import WebhookConfig

MAX_BYTES_LIMIT = 32 * 1024 * 1024  # above GitHub's 25 MB cap on a webhook's payload
MAX_DEPTH_LIMIT = 256  # deeper than this, the canonical writer's recursion is at risk
SETTINGS = frozenset({"identity", "witness_ignore", "fields", "max_bytes", "max_depth"})
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
Mode = Literal["content", "key", "pointers"]


def _pointers(value: Any, setting: str) -> list[Tokens]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"json {setting} must be a list of JSON Pointers")
    found = []
    for pointer in value:
        if not isinstance(pointer, str):
            raise ConfigError(f"json {setting}: {pointer!r} is not a JSON Pointer string")
        try:
            found.append(parse(pointer))
        except ValueError as exc:
            raise ConfigError(f"json {setting}: {exc}") from None
    return found


def _bound(value: Any, setting: str, limit: int) -> int:
    if type(value) is not int or not 1 <= value <= limit:
        raise ConfigError(f"json {setting} must be a whole number from 1 to {limit}")
    return value


def _plain(value: Any) -> Any:
    """A parsed value as apply steps (and the stored fields' JSON) take it: numbers as
    int or float, strings as plain str."""
    if isinstance(value, JsonNumber):
        return int(value) if _INTEGER.fullmatch(value) else float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _scalar_identity(value: Any) -> bool:
    # null and "" are absent in all but name: as identities they would make every such
    # message one identity, and each newcomer a conflict with the first.
    if isinstance(value, str):
        return value != ""
    return isinstance(value, bool)


class JsonCodec:
    """The ``json`` codec; ``JsonCodec()`` is the registered default (content identity,
    nothing ignored, json-event's bounds), :meth:`configure` makes an inbox's own."""

    family = "json"

    def __init__(
        self,
        identity: str | Sequence[str] = "content",
        witness_ignore: Sequence[str] = (),
        fields: Mapping[str, str] | None = None,
        max_bytes: int = json_event.MAX_BYTES,
        max_depth: int = json_event.MAX_DEPTH,
        webhook: WebhookConfig | None = None,
    ) -> None:
        self.mode: Mode
        self.pointers: list[Tokens] = []
        if identity in ("content", "key"):
            self.mode = "content" if identity == "content" else "key"
        else:
            self.mode = "pointers"
            self.pointers = _pointers(identity, "identity")
            if not self.pointers or len(set(self.pointers)) != len(self.pointers):
                raise ConfigError("json identity: name one or more distinct JSON Pointers")
        ignore = sorted(set(_pointers(witness_ignore, "witness_ignore")))
        if () in ignore:
            raise ConfigError('json witness_ignore: "" is the whole document')
        self.ignore = ignore
        if fields is not None and not isinstance(fields, Mapping):
            raise ConfigError('json fields must be a table, e.g. { site = "/site" }')
        self.fields: dict[str, Tokens] = {}
        for name, pointer in (fields or {}).items():
            if not isinstance(name, str) or not _FIELD_NAME.fullmatch(name):
                raise ConfigError(f"json fields: {name!r} is not a field name")
            [self.fields[name]] = _pointers([pointer], f"fields.{name}")
        self.max_bytes = _bound(max_bytes, "max_bytes", MAX_BYTES_LIMIT)
        self.max_depth = _bound(max_depth, "max_depth", MAX_DEPTH_LIMIT)
        self.webhook = webhook
        self.identity: IdentityMode = "content" if self.mode == "content" else "key"
        self.name = self._name()

    def _identity_setting(self) -> str | list[str]:
        return self.mode if self.mode != "pointers" else [spell(t) for t in self.pointers]

    def _name(self) -> str:
        decides: dict[str, Any] = {}
        if self.mode != "content":
            decides["identity"] = self._identity_setting()
        if self.ignore:
            decides["witness_ignore"] = [spell(t) for t in self.ignore]
        return self.family + (canonical(decides).decode("utf-8") if decides else "")

    @property
    def field_names(self) -> frozenset[str]:
        """The fields this codec hands apply steps: the configured ones."""
        return frozenset(self.fields)

    @property
    def needs_key(self) -> bool:
        """Identified by the transport's key: a webhook's verified message id, or the
        Oncebox-Key of a delivery a token sends (on a webhook inbox too)."""
        return self.mode == "key"

    @property
    def settings(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "identity": self._identity_setting(),
            "witness_ignore": [spell(t) for t in self.ignore],
            "fields": {name: spell(t) for name, t in self.fields.items()},
            "max_bytes": self.max_bytes,
            "max_depth": self.max_depth,
        }
        if self.webhook is not None:
            shown["webhook"] = self.webhook.describe()
        return shown

    def configure(self, settings: Mapping[str, Any], webhook: WebhookConfig | None) -> JsonCodec:
        """An inbox's own ``json`` codec. Without ``identity``, a webhook inbox is
        identified as its scheme says (the sender's message id, or Stripe's ``/id``)."""
        check_settings(self.family, settings, SETTINGS)
        default = webhook.default_identity if webhook is not None else "content"
        if webhook is not None and default != "key" and settings.get("identity") == "key":
            # Its key is always None: every signed event would be a missing_key dead letter.
            raise ConfigError(
                f"codec json: a {webhook.scheme} webhook sends no message id to key by; "
                f"identify it by the event's /id (the default) or other JSON Pointers"
            )
        default_bound = webhook.max_bytes if webhook is not None else json_event.MAX_BYTES
        return JsonCodec(
            identity=settings.get("identity", default),
            witness_ignore=settings.get("witness_ignore", ()),
            fields=settings.get("fields"),
            # A webhook inbox takes what its sender sends (webhooks.DEFAULT_MAX_BYTES).
            max_bytes=settings.get("max_bytes", default_bound),
            max_depth=settings.get("max_depth", json_event.MAX_DEPTH),
            webhook=webhook,
        )

    def _key(self, document: dict[str, Any], delivery: Delivery) -> str | None:
        if self.mode == "content":
            return None
        if self.mode == "key":
            if not delivery.key:
                raise Invalid("missing_key", "this json inbox is identified by the delivery's key")
            return delivery.key
        values = []
        for tokens in self.pointers:
            value = resolve(document, tokens)
            if value is MISSING or not _scalar_identity(value):
                what = "missing" if value is MISSING else "not a string, number or boolean"
                raise Invalid("missing_identity", f"{spell(tokens)[:100]} is {what}")
            values.append(value)
        return canonical(values).decode("utf-8")

    def _field(self, document: dict[str, Any], name: str, tokens: Tokens) -> Any:
        value = resolve(document, tokens)
        if value is MISSING:
            raise Invalid("missing_field", f"field {name} ({spell(tokens)[:100]}) is missing")
        if isinstance(value, str) and "\x00" in value:
            # An apply step may store it as text, which PostgreSQL cannot hold with a NUL.
            raise Invalid("bad_field", f"field {name} holds a NUL character")
        try:
            return _plain(value)
        except ValueError:  # int() past Python's digit limit (4,300 by default)
            detail = f"field {name} holds an integer too long to convert"
            raise Invalid("bad_field", detail) from None

    def decode(self, delivery: Delivery) -> Decoded:
        body = delivery.body
        if len(body) > self.max_bytes:
            raise Invalid("too_large", f"{len(body)} bytes exceeds {self.max_bytes}")
        document = loads(body, max_depth=self.max_depth)
        if not isinstance(document, dict):
            raise Invalid("bad_shape", "a json delivery must be a JSON object")
        key = self._key(document, delivery)
        # Fields first: removing the ignored members below changes the document in place.
        fields = {name: self._field(document, name, t) for name, t in self.fields.items()}
        if self.ignore:
            for tokens in self.ignore:
                remove(document, tokens)
            content = canonical(document)
        else:
            content = canonical_read(document, body.decode("utf-8"))
        if len(content) > self.max_bytes:
            size = len(content)
            raise Invalid("too_large", f"canonical form is {size} bytes, over {self.max_bytes}")
        return Decoded(content=content, key=key, fields=fields)
