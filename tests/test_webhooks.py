"""Signed webhook verification: the published vectors, each rule, and properties.

Standard Webhooks vectors come from the specification's own repository,
standard-webhooks/standard-webhooks, libraries/*/tests (the same signing vector in the
Python, Go, JavaScript, PHP, Ruby, C# and Java suites). GitHub's is the documented test
pair of docs.github.com "Validating webhook deliveries". Stripe publishes no secret with
its example header (docs.stripe.com/webhooks/signatures), so its example checks the
header's reading and the HMAC is checked against hashlib, computed here independently.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncebox.errors import ConfigError
from oncebox.formats.webhook_config import WebhookConfig, parse_webhook
from oncebox.formats.webhooks import (
    Unverified,
    sign_github,
    sign_standard_webhooks,
    sign_stripe,
    standard_secret,
    verify_github,
    verify_standard_webhooks,
    verify_stripe,
)

# -- Standard Webhooks: standard-webhooks/standard-webhooks, libraries/*/tests -----------
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIME = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
SW_WRONG = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="  # go and python suites
SW_KEY = [standard_secret(SW_SECRET)]
PROPERTY = settings(max_examples=60, deadline=None)


def sw_headers(signature: str = SW_SIGNATURE, **change: str) -> dict[str, str]:
    headers = {
        "webhook-id": SW_ID,
        "webhook-timestamp": str(SW_TIME),
        "webhook-signature": signature,
    }
    headers.update({k.replace("_", "-"): v for k, v in change.items()})
    return headers


def sw_refusal(headers: dict[str, str], body: bytes = SW_BODY, now: float = SW_TIME) -> str:
    with pytest.raises(Unverified) as refused:
        verify_standard_webhooks(headers, body, SW_KEY, now)
    return refused.value.reason


def test_standard_webhooks_signing_vector() -> None:
    assert sign_standard_webhooks(SW_KEY[0], SW_ID, SW_TIME, SW_BODY) == SW_SIGNATURE
    verified = verify_standard_webhooks(sw_headers(), SW_BODY, SW_KEY, SW_TIME)
    assert (verified.key, verified.timestamp, verified.key_signed) == (SW_ID, SW_TIME, True)


def test_standard_webhooks_secret_with_and_without_prefix_and_padding() -> None:
    assert standard_secret(SW_SECRET) == standard_secret(SW_SECRET.removeprefix("whsec_"))
    # The python suite's unpadded secrets: one and two padding characters short.
    for unpadded, padded in [
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS="),
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwBr", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwBr=="),
    ]:
        key = base64.b64decode(padded)
        assert standard_secret(unpadded) == standard_secret("whsec_" + unpadded) == key
        signature = sign_standard_webhooks(key, SW_ID, SW_TIME, SW_BODY)
        assert verify_standard_webhooks(sw_headers(signature), SW_BODY, [key], SW_TIME)
    for empty in ("", "whsec_"):
        with pytest.raises(ValueError):
            standard_secret(empty)


def test_standard_webhooks_refusals_from_the_library_suites() -> None:
    assert sw_refusal(sw_headers(SW_WRONG)) == "bad_signature"
    # python: the vector with its last character changed.
    assert sw_refusal(sw_headers("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=")) == (
        "bad_signature"
    )
    assert sw_refusal(sw_headers("v1,")) == "bad_signature"  # go: partial signature
    assert sw_refusal(sw_headers("v2," + SW_SIGNATURE[3:])) == "bad_signature"  # java: version
    assert sw_refusal(sw_headers("invalid_signature")) == "bad_signature"  # java
    assert sw_refusal(sw_headers("v1,invalid_signature")) == "bad_signature"  # java
    for missing in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        headers = sw_headers()
        del headers[missing]
        assert sw_refusal(headers) == "missing_signature"
    for stamp in ("hello", "161426533.0", "-161426533"):  # python, php
        assert sw_refusal(sw_headers(webhook_timestamp=stamp)) == "bad_signature_header"


def test_standard_webhooks_tolerance_is_five_minutes_either_way() -> None:
    assert verify_standard_webhooks(sw_headers(), SW_BODY, SW_KEY, SW_TIME + 300)
    assert verify_standard_webhooks(sw_headers(), SW_BODY, SW_KEY, SW_TIME - 300)
    assert sw_refusal(sw_headers(), now=SW_TIME + 301) == "stale_signature"  # too old
    assert sw_refusal(sw_headers(), now=SW_TIME - 301) == "stale_signature"  # too new


def test_standard_webhooks_several_signatures_and_several_secrets() -> None:
    # The go/python/java multi-signature case: one good v1 among wrong ones and a v2.
    many = " ".join([SW_WRONG, "v2," + SW_WRONG[3:], SW_SIGNATURE, SW_WRONG])
    assert verify_standard_webhooks(sw_headers(many), SW_BODY, SW_KEY, SW_TIME)
    # Rotation on our side: the old secret and the new one both configured.
    rotated = [standard_secret("whsec_" + base64.b64encode(b"n" * 24).decode()), SW_KEY[0]]
    assert verify_standard_webhooks(sw_headers(), SW_BODY, rotated, SW_TIME)
    # java: header names in any case.
    mixed = {"Webhook-Id": SW_ID, "WEBHOOK-TIMESTAMP": str(SW_TIME), "webhook-SIGNATURE": many}
    assert verify_standard_webhooks(mixed, SW_BODY, SW_KEY, SW_TIME)


def test_standard_webhooks_id_may_not_move_bytes_across_the_dots() -> None:
    assert sw_refusal(sw_headers(webhook_id="msg.1")) == "bad_signature_header"
    assert sw_refusal(sw_headers(webhook_id="msg\x00")) == "bad_signature_header"


# -- GitHub: docs.github.com, Validating webhook deliveries -------------------------------
GH_SECRET = b"It's a Secret to Everybody"
GH_BODY = b"Hello, World!"
GH_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
GH_DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"


def gh_headers(signature: str = GH_SIGNATURE) -> dict[str, str]:
    return {"X-Hub-Signature-256": signature, "X-GitHub-Delivery": GH_DELIVERY}


def test_github_documented_test_values() -> None:
    assert sign_github(GH_SECRET, GH_BODY) == GH_SIGNATURE
    verified = verify_github(gh_headers(), GH_BODY, [GH_SECRET])
    assert (verified.key, verified.timestamp, verified.key_signed) == (GH_DELIVERY, None, False)


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"X-GitHub-Delivery": GH_DELIVERY}, "missing_signature"),
        ({"X-Hub-Signature-256": GH_SIGNATURE}, "missing_signature"),
        (gh_headers(GH_SIGNATURE[7:]), "bad_signature_header"),  # no sha256= prefix
        (gh_headers("sha1=" + GH_SIGNATURE[7:]), "bad_signature_header"),
        (gh_headers(GH_SIGNATURE[:-2]), "bad_signature_header"),
        (gh_headers(GH_SIGNATURE[:-1] + "8"), "bad_signature"),
        # octokit compares the header as sent: upper-case hex is another signature.
        (gh_headers("sha256=" + GH_SIGNATURE[7:].upper()), "bad_signature_header"),
        (gh_headers(GH_SIGNATURE.upper()), "bad_signature_header"),
    ],
)
def test_github_refusals(headers: dict[str, str], reason: str) -> None:
    with pytest.raises(Unverified) as refused:
        verify_github(headers, GH_BODY, [GH_SECRET])
    assert refused.value.reason == reason


# -- Stripe: docs.stripe.com/webhooks/signatures -------------------------------------------
ST_SECRET = b"whsec_synthetic0stripe0endpoint0secret"  # the secret is the key as written
ST_DOC_HEADER = (  # the documentation's example (its secret and payload are not published)
    "t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,"
    "v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
)
ST_TIME = 1492774577
ST_BODY = b'{"id":"evt_1SynthEtic0000000000001","object":"event","type":"charge.succeeded"}'


def stripe_v1(secret: bytes, stamp: int, body: bytes) -> str:
    return hmac.new(secret, f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()


def st_refusal(header: str, now: float = ST_TIME) -> str:
    with pytest.raises(Unverified) as refused:
        verify_stripe({"Stripe-Signature": header}, ST_BODY, [ST_SECRET], now)
    return refused.value.reason


def test_stripe_signature_is_hmac_of_timestamp_dot_body() -> None:
    expected = stripe_v1(ST_SECRET, ST_TIME, ST_BODY)
    assert sign_stripe(ST_SECRET, ST_TIME, ST_BODY) == f"t={ST_TIME},v1={expected}"
    verified = verify_stripe(
        {"stripe-signature": f"t={ST_TIME},v1={expected}"}, ST_BODY, [ST_SECRET], ST_TIME
    )
    assert (verified.key, verified.timestamp) == (None, ST_TIME)


def test_stripe_documented_header_is_read_but_not_ours() -> None:
    # Its t is read and within tolerance; its v1 was made with another secret.
    assert st_refusal(ST_DOC_HEADER) == "bad_signature"
    assert st_refusal(ST_DOC_HEADER, now=ST_TIME + 301) == "stale_signature"


def test_stripe_v0_is_ignored_and_any_v1_may_match() -> None:
    good = stripe_v1(ST_SECRET, ST_TIME, ST_BODY)
    wrong = "0" * 64
    assert st_refusal(f"t={ST_TIME},v1={wrong},v0={good}") == "bad_signature"  # no downgrade
    header = f"t={ST_TIME},v1={wrong},v1={good}"
    assert verify_stripe({"Stripe-Signature": header}, ST_BODY, [ST_SECRET], ST_TIME)
    # As Stripe's libraries read it: a space after a comma makes " v1" another name,
    # and a v1 is lower-case hex.
    assert st_refusal(f"t={ST_TIME}, v1={good}") == "bad_signature"
    assert st_refusal(f"t={ST_TIME},v1={good.upper()}") == "bad_signature"
    assert st_refusal(f"v1={good}") == "bad_signature_header"
    assert st_refusal(f"t={ST_TIME},t={ST_TIME},v1={good}") == "bad_signature_header"
    assert st_refusal(f"t=01492774577,v1={good}") == "bad_signature_header"
    assert st_refusal(f"t={ST_TIME},v1={good}", now=ST_TIME + 301) == "stale_signature"
    # Only the past is bounded, as Stripe's libraries bound it: a clock behind Stripe's
    # must not refuse its events.
    assert verify_stripe({"Stripe-Signature": f"t={ST_TIME},v1={good}"}, ST_BODY, [ST_SECRET],
                         ST_TIME - 86_400)  # fmt: skip


# -- a signature over anything else is refused --------------------------------------------
VERIFIERS: dict[str, Any] = {
    "standard-webhooks": lambda h, body, secret, now: verify_standard_webhooks(
        h, body, [secret], now
    ),
    "github": lambda h, body, secret, now: verify_github(h, body, [secret]),
    "stripe": lambda h, body, secret, now: verify_stripe(h, body, [secret], now),
}


def signed(scheme: str, secret: bytes, msg_id: str, stamp: int, body: bytes) -> dict[str, str]:
    if scheme == "standard-webhooks":
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": sign_standard_webhooks(secret, msg_id, stamp, body),
        }
    if scheme == "github":
        return {"X-Hub-Signature-256": sign_github(secret, body), "X-GitHub-Delivery": msg_id}
    return {"Stripe-Signature": sign_stripe(secret, stamp, body)}


ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=30)


@PROPERTY
@given(
    scheme=st.sampled_from(sorted(VERIFIERS)),
    secret=st.binary(min_size=1, max_size=64),
    msg_id=ids,
    stamp=st.integers(1_000_000_000, 4_000_000_000),
    body=st.binary(max_size=200),
    other_body=st.binary(max_size=200),
    other_id=ids,
    shift=st.integers(-300, 300).filter(bool),
)
def test_a_signature_over_other_bytes_time_or_id_is_refused(
    scheme: str,
    secret: bytes,
    msg_id: str,
    stamp: int,
    body: bytes,
    other_body: bytes,
    other_id: str,
    shift: int,
) -> None:
    verify = VERIFIERS[scheme]
    headers = signed(scheme, secret, msg_id, stamp, body)
    assert verify(headers, body, secret, stamp)
    if other_body != body:
        with pytest.raises(Unverified, match="bad_signature"):
            verify(headers, other_body, secret, stamp)
    if scheme == "github":
        return  # GitHub signs neither a time nor the delivery id (key_signed is False)
    # The same signature with another signed time (still inside the tolerance).
    moved = {k: v.replace(f"t={stamp}", f"t={stamp + shift}") for k, v in headers.items()}
    moved = {k: str(stamp + shift) if k == "webhook-timestamp" else v for k, v in moved.items()}
    with pytest.raises(Unverified, match="bad_signature"):
        verify(moved, body, secret, stamp)
    if scheme == "standard-webhooks" and other_id != msg_id:
        with pytest.raises(Unverified, match="bad_signature"):
            verify({**headers, "webhook-id": other_id}, body, secret, stamp)


# -- an inbox's webhook declaration ----------------------------------------------------------
def test_parse_webhook_reads_inline_or_environment_secrets() -> None:
    config = parse_webhook({"scheme": "standard-webhooks", "secret": SW_SECRET}, {})
    assert config.secrets == tuple(SW_KEY) and config.tolerance == 300
    env = {"HOOK_NEW": "s3cret new", "HOOK_OLD": "old"}
    rotated = parse_webhook({"scheme": "github", "secret_env": ["HOOK_NEW", "HOOK_OLD"]}, env)
    assert rotated.secrets == (b"s3cret new", b"old")
    assert rotated.describe() == {"scheme": "github", "secrets": "env HOOK_NEW, HOOK_OLD"}
    stripe = parse_webhook({"scheme": "stripe", "secret": ["a", "b"], "tolerance": 60}, {})
    assert stripe.describe() == {
        "scheme": "stripe",
        "secrets": "inline (2)",
        "tolerance_seconds": 60,
    }
    assert stripe.default_identity == ("/id",) and rotated.default_identity == "key"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("github", "must be a table"),
        ({"scheme": "svix", "secret": "x"}, "scheme must be one of"),
        ({"scheme": "github"}, "exactly one of secret and secret_env"),
        ({"scheme": "github", "secret": "x", "secret_env": "X"}, "exactly one of"),
        ({"scheme": "github", "secret_env": "UNSET_HOOK"}, "UNSET_HOOK not set"),
        ({"scheme": "github", "secret": ""}, "is empty"),
        ({"scheme": "github", "secret": 7}, "string or a list of strings"),
        ({"scheme": "standard-webhooks", "secret": "whsec_!!!"}, "base64"),
        ({"scheme": "github", "secret": "x", "tolerance": 60}, "github signs no timestamp"),
        ({"scheme": "stripe", "secret": "x", "tolerance": "5m"}, "whole seconds"),
        ({"scheme": "stripe", "secret": "x", "tolerance": 0}, "whole seconds"),
        ({"scheme": "stripe", "secret": "x", "secrets": ["y"]}, "unknown key"),
    ],
)
def test_parse_webhook_refuses_bad_declarations(table: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_webhook(table, {})


def test_a_secret_is_never_in_a_repr_a_description_or_an_error() -> None:
    secret = "whsec_" + base64.b64encode(b"never-show-me-anywhere-x").decode()
    config = parse_webhook({"scheme": "standard-webhooks", "secret": secret}, {})
    shown = repr(config) + repr(config.describe())
    assert "never" not in shown and secret not in shown
    with pytest.raises(ConfigError) as refused:
        parse_webhook({"scheme": "standard-webhooks", "secret": "whsec_not base64 at all"}, {})
    assert "not base64 at all" not in str(refused.value)
    assert isinstance(config, WebhookConfig)


# -- checked in two halves: the head, then the body as it arrives (issue 19, item 2) ------
@PROPERTY
@given(
    scheme=st.sampled_from(sorted(VERIFIERS)),
    body=st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    tamper=st.booleans(),
)
def test_the_body_checked_in_pieces_is_the_body_checked_whole(
    scheme: str, body: bytes, cuts: list[int], tamper: bool
) -> None:
    secret = b"piecewise secret"
    text = base64.b64encode(secret).decode() if scheme == "standard-webhooks" else "x"
    config = parse_webhook({"scheme": scheme, "secret": "whsec_" + text if text != "x"
                            else secret.decode()}, {})  # fmt: skip
    headers = signed(scheme, secret, "msg_1", 1_800_000_000, body)
    sent = body + b"!" if tamper else body
    whole: Any
    try:
        whole = config.verify(headers, sent, 1_800_000_000)
    except Unverified as exc:
        whole = exc.reason
    mac = config.mac(config.head(headers, 1_800_000_000))
    edges = sorted({0, len(sent), *(c for c in cuts if c <= len(sent))})
    for start, end in itertools.pairwise(edges):
        mac.update(sent[start:end])
    pieces: Any
    try:
        pieces = mac.verdict()
    except Unverified as exc:
        pieces = exc.reason
    assert pieces == whole
    assert (whole == "bad_signature") is tamper


def test_everything_a_head_can_be_refused_for_is_refused_from_the_head() -> None:
    now = SW_TIME
    config = parse_webhook({"scheme": "standard-webhooks", "secret": SW_SECRET}, {})
    for headers, reason in [
        (sw_headers(webhook_id="msg.1"), "bad_signature_header"),
        (sw_headers(webhook_timestamp="01614265330"), "bad_signature_header"),
        (sw_headers(), "stale_signature"),  # at now + 301 below
        (sw_headers("v2,AAAA v1a,AAAA"), "bad_signature"),  # no v1 of ours to compare
    ]:
        at = now + 301 if reason == "stale_signature" else now
        with pytest.raises(Unverified) as refused:
            config.head(headers, at)  # no body at all
        assert refused.value.reason == reason
    # A good head's time is checked again later (the body may take a while to arrive).
    verified = config.mac(config.head(sw_headers(), now))
    verified.update(SW_BODY)
    facts = verified.verdict()
    assert config.still_fresh(facts, now + 300) == facts
    with pytest.raises(Unverified, match="stale_signature"):
        config.still_fresh(facts, now + 301)
