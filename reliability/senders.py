"""Senders as they really are, against a real ``oncebox serve`` (issue 19, items 5 and 6).

Starts ``oncebox serve --workers 1`` on a fresh SQLite file with the webhooks page's three
webhook inboxes (its ``[inboxes.hooks]``, ``[inboxes.github]`` and ``[inboxes.stripe]``
block, as written) and sends what the senders' own libraries sign, printing one line
per probe:

- **bodies over the bound** (item 5): a 70 KB Stripe event (the issue's), ``--big``
  Stripe events of 1.5 MiB (over the scheme's 1 MiB), a 5 MiB GitHub payload (under
  GitHub's 25 MB cap); each answer, and the dead letters kept (their length and SHA-256
  against what was sent);
- **the senders' spellings** (item 6): a Svix-signed message under Svix's header names,
  a Stripe event signed a day ahead of the server's clock, and the spellings the
  senders' verifiers refuse (Stripe's upper-case ``v1`` and a space after the comma,
  GitHub's upper-case digest); each answer.

    .venv/bin/python reliability/senders.py            # about a minute
    .venv/bin/python reliability/senders.py --big 50
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import httpx
import stripe
import svix

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import oncebox  # noqa: E402
from serveproc import serving  # noqa: E402

WEBHOOKS_PAGE = (ROOT / "docs" / "webhooks.md").read_text("utf-8")
SECRETS = {
    "HOOK_OLD": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "HOOK_NEW": "whsec_bmV4dCBzZWNyZXQgb2YgdGhlIHJvdGF0aW9u",
    "ONCEBOX_GITHUB_SECRET": "It's a Secret to Everybody",
    "ONCEBOX_STRIPE_SECRET": "whsec_senders_probe_stripe_secret",
}


def documented_inboxes() -> str:
    [block] = [
        b.split("```", 1)[0]
        for b in WEBHOOKS_PAGE.split("```toml\n")[1:]
        if '"HOOK_OLD", "HOOK_NEW"' in b
    ]
    return block


def stripe_event(size: int, n: int = 0) -> str:
    """A Stripe event of about ``size`` bytes (an invoice with a long description)."""
    event = {"id": f"evt_probe_{n}_{size}", "object": "event", "type": "invoice.created",
             "data": {"object": {"object": "invoice", "description": ""}}}  # fmt: skip
    pad = size - len(json.dumps(event))
    event["data"]["object"]["description"] = "x" * max(pad, 0)  # type: ignore[index]
    return json.dumps(event)


def stripe_headers(body: str, stamp: int | None = None) -> dict[str, str]:
    secret = SECRETS["ONCEBOX_STRIPE_SECRET"]
    return {"Stripe-Signature": stripe.WebhookSignature.generate_signature_header(
        body, secret, stamp)}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=20, help="Stripe events of 1.5 MiB")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="oncebox-senders-") as work:
        config = Path(work) / "oncebox.toml"
        config.write_text(documented_inboxes())
        url = f"sqlite:///{Path(work) / 'senders.db'}"
        env = {"ONCEBOX_CONFIG": str(config), **SECRETS}
        with serving(url, "--workers", "1", env=env, stderr=(Path(work) / "log").open("wb")) as s:

            def post(inbox: str, body: str | bytes, headers: dict[str, str]) -> httpx.Response:
                target = f"{s.base}/v1/inboxes/{inbox}/deliveries"
                return httpx.post(target, content=body, headers=headers, timeout=60)

            event = stripe_event(70_000)
            answer = post("stripe", event, stripe_headers(event))
            print(f"a 70 KB Stripe event: {answer.status_code} {answer.json().get('verdict')}")
            sent, statuses = [], []
            for n in range(args.big):
                big = stripe_event(1_572_864, n)
                sent.append(big.encode())
                statuses.append(post("stripe", big, stripe_headers(big)).status_code)
            counts = {code: statuses.count(code) for code in sorted(set(statuses))}
            payload = json.dumps({"zen": "y" * 5_242_880}).encode()
            signature = hmac.new(SECRETS["ONCEBOX_GITHUB_SECRET"].encode(), payload,
                                 hashlib.sha256).hexdigest()  # fmt: skip
            github = {"X-Hub-Signature-256": f"sha256={signature}",
                      "X-GitHub-Delivery": "probe-5mib"}  # fmt: skip
            answer = post("github", payload, github)
            print(f"a 5 MiB GitHub payload: {answer.status_code} {answer.json().get('verdict')}")
            # GitHub's documented test vector, its digest spelled in upper case.
            upper = {
                "X-GitHub-Delivery": "probe-upper",
                "X-Hub-Signature-256": "sha256="
                "757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17",
            }
            code = post("github", b"Hello, World!", upper).status_code
            print(f"GitHub's test vector, its digest in upper case: {code}")

            small = stripe_event(2_000, 99)
            good = stripe_headers(small)["Stripe-Signature"]
            v1 = good.split("v1=")[1]
            stamp = good.split(",")[0]
            for what, header in (("v1 in upper case", f"{stamp},v1={v1.upper()}"),
                                 ("a space after the comma", f"{stamp}, v1={v1}")):  # fmt: skip
                code = post("stripe", small, {"Stripe-Signature": header}).status_code
                print(f"Stripe, {what}: {code}")
            ahead = stripe_event(2_000, 100)
            code = post("stripe", ahead, stripe_headers(ahead, int(time.time()) + 86_400))
            print(f"Stripe, signed a day ahead of the server: {code.status_code}")
            hook = svix.Webhook(SECRETS["HOOK_NEW"])
            body = '{"type": "invoice.paid", "attempt": 1}'
            signed = hook.sign("msg_svix_probe", datetime.now(tz=UTC), body)
            svixed = {"svix-id": "msg_svix_probe", "svix-timestamp": str(int(time.time())),
                      "svix-signature": signed}  # fmt: skip
            answer = post("hooks", body, svixed)
            print(f"Svix's header names: {answer.status_code} {answer.json().get('verdict')}")

        os.environ.update(SECRETS)  # the served store, opened with the same inboxes
        opened = oncebox.open(url, config=config)
        try:
            letters = opened.dead_letters("stripe", reason="too_large", limit=10_000)
        finally:
            opened.close()
        kept = {(d.length, d.sha256) for d in letters}
        wanted = {(len(b), hashlib.sha256(b).hexdigest()) for b in sent}
        print(
            f"{args.big} Stripe events of 1.5 MiB: answered {counts}; too_large dead "
            f"letters kept {len(letters)}, length and SHA-256 matching {len(kept & wanted)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
