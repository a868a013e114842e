"""oncebox's webhook verification against the senders' own verifiers (issue 19, item 6).

The same cases go to oncebox and to the PyPI packages the senders publish: Standard
Webhooks' ``standardwebhooks`` (1.1), Svix's ``svix`` (2.9) and ``stripe`` (16.1), each
case signed by the library's own signer (``Webhook.sign``,
``WebhookSignature.generate_signature_header``). GitHub publishes no Python verifier:
its documented test vector stands for it, with the upper-case digest octokit refuses.

Where oncebox and a library part, the case must be one of :data:`DIFFERENCES`, each a
row of the README's table (section "Signed webhooks") with its reason, and the parting
must go the way the row says: oncebox stricter (it refuses what the library takes) or
looser (it takes what the library refuses, or raises on).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import standardwebhooks
import stripe

from oncebox.formats import Unverified, parse_webhook

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the specification's test secret
ST_SECRET = "whsec_synthetic0stripe0endpoint0secret"
GH_SECRET = "It's a Secret to Everybody"  # docs.github.com, "Validating webhook deliveries"
GH_BODY = b"Hello, World!"
GH_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
BODY = '{"type": "invoice.paid", "id": "evt_1", "data": {"amount": 2432232314}}'
README = (Path(__file__).parent.parent / "docs" / "webhooks.md").read_text("utf-8")

# Where oncebox parts from the sender's library on purpose: the README's table has a row
# for each (its first column is the name here). "stricter": oncebox refuses what the
# library accepts; "looser": oncebox accepts what the library refuses or raises on.
DIFFERENCES = {
    "timestamp spelled otherwise": "stricter",
    "id with a dot": "stricter",
    "lenient base64": "stricter",
    "entry without a comma": "looser",
    "body not UTF-8": "looser",
    "t spelled otherwise": "stricter",
    "two t": "stricter",
    "v1 with a second =": "stricter",
}


def _svix() -> Any:
    """svix, imported by the tests that use it: its 300 modules cost each pytest worker
    half a second at collection, and only one worker runs them."""
    import svix

    return svix


def oncebox_takes(scheme: str, secret: str, headers: dict[str, str], body: bytes) -> bool:
    webhook = parse_webhook({"scheme": scheme, "secret": secret}, {})
    try:
        webhook.verify(headers, body, time.time())
    except Unverified:
        return False
    return True


def library_takes(verify: Callable[[], Any]) -> bool | str:
    """True, False for the library's refusal, or the name of what else it raised."""
    try:
        verify()
    except (standardwebhooks.webhooks.WebhookVerificationError, stripe.SignatureVerificationError):
        return False
    except Exception as exc:  # a crash on input it does not expect: a refusal of sorts
        return type(exc).__name__
    return True


def agree(case: str, ours: bool, theirs: bool | str, difference: str | None = None) -> None:
    """``ours`` and ``theirs`` agree, or part exactly as the named difference says."""
    if difference is None:
        assert ours is theirs, f"{case}: oncebox {ours}, the library {theirs}"
        return
    direction = DIFFERENCES[difference]
    if direction == "stricter":
        assert (ours, theirs) == (False, True), f"{case}: {difference} ({ours}, {theirs})"
    else:
        assert ours and theirs is not True, f"{case}: {difference} ({ours}, {theirs})"


# -- Standard Webhooks and Svix -------------------------------------------------------------
def sw_signed(msg_id: str, stamp: int, body: str = BODY, names: str = "webhook") -> dict[str, str]:
    at = datetime.fromtimestamp(stamp, tz=UTC)
    signature = standardwebhooks.Webhook(SW_SECRET).sign(msg_id, at, body)
    return {f"{names}-id": msg_id, f"{names}-timestamp": str(stamp),
            f"{names}-signature": signature}  # fmt: skip


def sw_case(
    case: str,
    headers: dict[str, str],
    body: bytes | str = BODY,
    difference: str | None = None,
    library: str = "standardwebhooks",
) -> None:
    raw = body.encode() if isinstance(body, str) else body
    ours = oncebox_takes("standard-webhooks", SW_SECRET, headers, raw)
    if library == "standardwebhooks":
        hook: Any = standardwebhooks.Webhook(SW_SECRET)
        theirs = library_takes(lambda: hook.verify(raw, headers, json_parse=False))
    else:
        hook = _svix().Webhook(SW_SECRET)
        theirs = library_takes(lambda: hook.verify(raw, headers))
    agree(f"{library}: {case}", ours, theirs, difference)


@pytest.mark.parametrize("library", ["standardwebhooks", "svix"])
def test_standard_webhooks_agrees_with_its_libraries(library: str) -> None:
    now = int(time.time())
    good = sw_signed("msg_p5jXN8AQM9LWM0D4loKWxJek", now)
    sw_case("signed by the library", good, library=library)
    sw_case("another body", good, BODY.replace("2432", "2433"), library=library)
    for age in (-290, 290):  # inside five minutes either way (ten seconds of margin)
        sw_case(f"signed {age} s ago", sw_signed("msg_a", now - age), library=library)
    for age in (-310, 310, 86_400):
        sw_case(f"signed {age} s ago", sw_signed("msg_a", now - age), library=library)
    other = standardwebhooks.Webhook("whsec_" + "c3RyYW5nZXIgc2VjcmV0IG5vdCBvdXJz")
    wrong = other.sign("msg_w", datetime.fromtimestamp(now, tz=UTC), BODY)
    many = f"{wrong} v1a,bm90IG91cnM= {good['webhook-signature']} v2,{wrong[3:]}"
    sw_case("one good v1 among others", {**good, "webhook-signature": many}, library=library)
    sw_case("another secret", {**good, "webhook-signature": wrong}, library=library)
    sw_case("v2 only", {**good, "webhook-signature": "v2," + good["webhook-signature"][3:]},
            library=library)  # fmt: skip
    sw_case("another id", {**good, "webhook-id": "msg_other"}, library=library)
    for header in good:
        sw_case(f"no {header}", {k: v for k, v in good.items() if k != header}, library=library)
    # Where oncebox parts from the library, as the README's table says.
    respelled = {**sw_signed("msg_t", now), "webhook-timestamp": f"0{now}"}
    sw_case("timestamp with a leading zero", respelled, difference="timestamp spelled otherwise",
            library=library)  # fmt: skip
    sw_case("timestamp with a fraction", {**sw_signed("msg_t", now), "webhook-timestamp":
            f"{now}.0"}, difference="timestamp spelled otherwise", library=library)  # fmt: skip
    sw_case("an id with a dot", sw_signed("msg.1", now), difference="id with a dot",
            library=library)  # fmt: skip
    junk = {**good, "webhook-signature": good["webhook-signature"] + "!"}
    sw_case("base64 with a stray character", junk, difference="lenient base64", library=library)
    lone = {**good, "webhook-signature": "v1a " + good["webhook-signature"]}
    sw_case("an entry without a comma", lone, difference="entry without a comma",
            library=library)  # fmt: skip
    latin = b'{"name": "\xe9"}'
    mac = standardwebhooks.webhooks.hmac_data(
        standardwebhooks.Webhook(SW_SECRET)._whsecret, f"msg_l.{now}.".encode() + latin
    )
    signature = "v1," + base64.b64encode(mac).decode()
    latin_headers = {"webhook-id": "msg_l", "webhook-timestamp": str(now),
                     "webhook-signature": signature}  # fmt: skip
    sw_case("a body that is not UTF-8", latin_headers, latin, difference="body not UTF-8",
            library=library)  # fmt: skip


def test_svix_header_names_are_taken_as_svix_takes_them() -> None:
    now = int(time.time())
    svixed = sw_signed("msg_svix", now, names="svix")
    assert _svix().Webhook(SW_SECRET).verify(BODY.encode(), svixed) is None
    sw_case("svix-* names", svixed, library="svix")
    # Both sets at once: each header read under Svix's name first, as its library does.
    both = {**sw_signed("msg_std", now), **svixed}
    sw_case("svix-* and webhook-* names", both, library="svix")
    forged = {**svixed, **{k.replace("svix", "webhook"): v for k, v in svixed.items()},
              "svix-signature": "v1,AAAA"}  # fmt: skip
    sw_case("a bad svix-signature beside a good webhook-signature", forged, library="svix")
    mixed = {"svix-id": "msg_mixed", **{k: v for k, v in sw_signed("msg_mixed", now).items()
             if k != "webhook-id"}}  # fmt: skip
    sw_case("svix-id with webhook-timestamp and webhook-signature", mixed, library="svix")


# -- Stripe ---------------------------------------------------------------------------------
def st_header(stamp: int, body: str = BODY) -> str:
    return str(stripe.WebhookSignature.generate_signature_header(body, ST_SECRET, stamp))


def st_case(
    case: str, header: str, body: bytes | str = BODY, difference: str | None = None
) -> None:
    raw = body.encode() if isinstance(body, str) else body
    ours = oncebox_takes("stripe", ST_SECRET, {"Stripe-Signature": header}, raw)
    theirs = library_takes(
        lambda: stripe.WebhookSignature.verify_header(raw, header, ST_SECRET, tolerance=300)
    )
    agree(f"stripe: {case}", ours, theirs, difference)


def test_stripe_agrees_with_its_library() -> None:
    now = int(time.time())
    good = st_header(now)
    v1 = good.split("v1=", 1)[1]
    st_case("signed by the library", good)
    st_case("another body", good, BODY.replace("2432", "2433"))
    st_case("signed 290 s ago", st_header(now - 290))
    st_case("signed 310 s ago", st_header(now - 310))
    # Stripe bounds only the past: a clock behind Stripe's must not refuse its events.
    for ahead in (310, 86_400):
        st_case(f"signed {ahead} s ahead", st_header(now + ahead))
    st_case("upper-case v1", f"t={now},v1={v1.upper()}")
    st_case("a space after the comma", f"t={now}, v1={v1}")
    st_case("v0 only", f"t={now},v0={v1}")
    st_case("one good v1 among others", f"t={now},v1={'0' * 64},v1={v1},v0={'1' * 64}")
    st_case("no t", f"v1={v1}")
    st_case("no v1", f"t={now}")
    st_case("another secret", str(stripe.WebhookSignature.generate_signature_header(
        BODY, "whsec_not_ours", now)))  # fmt: skip
    # Where oncebox parts from the library, as the README's table says.
    st_case("t with a leading zero", f"t=0{now},v1={v1}", difference="t spelled otherwise")
    st_case("t with a plus", f"t=+{now},v1={v1}", difference="t spelled otherwise")
    st_case("two t", f"t={now},t=1,v1={v1}", difference="two t")
    st_case("v1 with a second =", f"t={now},v1={v1}=x", difference="v1 with a second =")
    latin = b'{"id": "evt_\xe9"}'
    digest = hmac.new(ST_SECRET.encode(), f"{now}.".encode() + latin, hashlib.sha256).hexdigest()
    st_case("a body that is not UTF-8", f"t={now},v1={digest}", latin,
            difference="body not UTF-8")  # fmt: skip


# -- GitHub ---------------------------------------------------------------------------------
def test_github_documented_vector_and_the_upper_case_digest_octokit_refuses() -> None:
    delivery = {"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
    assert oncebox_takes("github", GH_SECRET, {**delivery, "X-Hub-Signature-256":
                         GH_SIGNATURE}, GH_BODY)  # fmt: skip
    # octokit compares the header as sent with sha256= and the lower-case hex digest.
    for spelled in (
        "sha256=" + GH_SIGNATURE[7:].upper(),
        GH_SIGNATURE.upper(),
        "sha256=" + GH_SIGNATURE[7:].title(),
    ):
        headers = {**delivery, "X-Hub-Signature-256": spelled}
        assert not oncebox_takes("github", GH_SECRET, headers, GH_BODY), spelled


def test_each_difference_is_a_row_of_the_readmes_table() -> None:
    rows = re.findall(r"^\| ([^|]+?) \| (stricter|looser) \|", README, flags=re.MULTILINE)
    assert dict(rows) == DIFFERENCES
