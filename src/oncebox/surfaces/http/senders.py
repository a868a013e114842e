"""Webhook senders at the HTTP edge: who may deliver without a bearer token, and how.

A webhook's sender cannot hold an oncebox token, so on an inbox whose codec declares a
webhook it authenticates each delivery by its signature instead. Two halves, both here
so that the gate and the route read one rule:

- from the head (:func:`sender_of`, for the gate): the headers the scheme cannot verify
  without, and the most body such a request may send (the codec's own bound, within the
  server's), so that an unsigned stranger's body is never read and a signed one is read
  only as far as the inbox could take it;
- after the body (:func:`signed`, for the group commit turn): the signature checked at
  the server clock's time; a refusal is a 401 naming its reason, and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from oncebox.engine.box import Oncebox
from oncebox.errors import OnceboxError
from oncebox.formats import Delivery, Unverified, WebhookConfig
from oncebox.surfaces.http.groupcommit import Signed
from oncebox.surfaces.http.problems import ProblemError


@dataclass(frozen=True)
class Sender:
    """What the gate asks of a sender-signed request's head."""

    headers: tuple[bytes, ...]  # lower case, as ASGI gives them
    max_body: int


def webhook_of(box: Oncebox, inbox: str) -> WebhookConfig | None:
    """The webhook a declared inbox's codec takes, if any."""
    try:
        codec = box.inbox(inbox).codec
    except OnceboxError:
        return None
    found = getattr(codec, "webhook", None)
    return found if isinstance(found, WebhookConfig) else None


def sender_of(box: Oncebox, inbox: str, max_body: int) -> Sender | None:
    webhook = webhook_of(box, inbox)
    if webhook is None:
        return None
    bound = min(max_body, box.inbox(inbox).codec.max_bytes)
    return Sender(tuple(name.encode() for name in webhook.headers), bound)


def refused(reason: str, detail: str) -> ProblemError:
    """A 401 for a sender's signature, with its reason (``missing_signature``,
    ``bad_signature_header``, ``stale_signature``, ``bad_signature``) as a member."""
    return ProblemError(
        401,
        "unauthorized",
        detail or reason,
        headers={"WWW-Authenticate": "Bearer"},  # a token is the other way in
        extra={"reason": reason},
    )


def missing_headers(sender: Sender) -> ProblemError:
    names = ", ".join(name.decode() for name in sender.headers)
    return refused("missing_signature", f"send Authorization: Bearer <token>, or sign ({names})")


def signed(
    webhook: WebhookConfig,
    headers: Mapping[str, str],
    body: bytes,
    count: Callable[[str], None] = lambda _reason: None,
) -> Signed:
    """The group commit's check of one signed request: the delivery it stands for
    (the webhook's own id as its key, the signature's facts recorded beside it).
    ``count`` hears each refusal's reason, for operators (nothing else records it)."""

    def verify(now: float) -> Delivery:
        try:
            verified = webhook.verify(headers, body, now)
        except Unverified as exc:
            count(exc.reason)
            raise refused(exc.reason, exc.detail) from None
        return Delivery(body=body, key=verified.key, signature=verified)

    return Signed(verify)
