"""Fuzzing: codecs, HMAC check, NDJSON lines under atheris; the service under schemathesis.

Why: the codecs and the signature check are where untrusted bytes first meet oncebox.
A codec may refuse input only with :class:`oncebox.Invalid` and a documented reason,
must never hang, and what it accepts must hold up (see reliability/_fuzz_targets.py for
the oracles). The service must never answer with a server error, and the hostile JSON
cases the README promises to refuse get their documented status over real HTTP.

1. Coverage-guided fuzzing with atheris (libFuzzer) for a fixed number of executions
   per target: the JSON event codec (seeded with every JSONTestSuite parsing file, read
   where it lies), the H1 codec, the HMAC signature check, the NDJSON line adapter in
   front of every codec (no line may fail its batch), the configured json codec (JSON
   Pointer identity, witness_ignore, fields), sp-api-listing (seeded with the SP-API
   fixtures in tests/fixtures/sp_api) and the three webhook signature schemes. Without
   atheris, the seeded mutation fuzzer in _fuzz_targets.py runs instead (and says so).
2. Negative controls: a deliberately broken target must be caught crashing, and lax
   variants of the json codec, sp-api-listing and the webhook verifiers must be caught
   by the oracles.
3. ``schemathesis run --checks all`` against ``oncebox serve`` started here on 127.0.0.1
   with a token, plus explicit probes: duplicate members, depth over the limit, integers
   over 4,300 digits, NaN/Infinity, oversized bodies.

    .venv/bin/python reliability/fuzz.py
    .venv/bin/python reliability/fuzz.py --runs 20000 --examples 30    # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _fuzz_targets as targets
from oncebox.formats import SpApiListingCodec

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
ONCEBOX = str(Path(PYTHON).parent / "oncebox")
SCHEMATHESIS = str(Path(PYTHON).parent / "schemathesis")
MAX_LEN = {"json-event": 8_192, "ussd-h1": 400, "hmac-signature": 4_096, "ndjson-lines": 8_192,
           "json-codec": 8_192, "sp-api": 8_192, "webhook-signatures": 4_096}  # fmt: skip
PROBLEM = "application/problem+json"


# -- 1. fuzz targets ---------------------------------------------------------------------------
def atheris_available() -> bool:
    return importlib.util.find_spec("atheris") is not None


@dataclass
class FuzzResult:
    stats: targets.Stats
    engine: str
    seconds: float
    libfuzzer: str = ""  # libFuzzer's own verdict line, if it stopped on something
    seeds: int = 0


def run_atheris(target: str, runs: int, seed: int, workdir: Path) -> FuzzResult:
    """One libFuzzer run in a child process; figures from the summary it writes."""
    base = workdir / target
    corpus = base / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    initial = targets.seeds(target)
    for i, data in enumerate(initial):
        (corpus / f"seed-{i:04d}").write_bytes(data)
    dictionary = base / "dict.txt"
    dictionary.write_text(targets.libfuzzer_dictionary(target))
    summary = base / "summary.json"
    command = [
        PYTHON,
        str(HERE / "_fuzz_atheris.py"),
        target,
        str(summary),
        str(runs),
        f"-seed={seed}",
        "-timeout=30",  # backstop only: the wrapper counts anything over 1 s as a hang
        f"-max_len={MAX_LEN[target]}",
        f"-dict={dictionary}",
        f"-artifact_prefix={base}/",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        str(corpus),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=6 * 3600)
    seconds = time.perf_counter() - started
    errors = re.findall(r"==\d+== ERROR: libFuzzer: [^\n]*|ERROR: libFuzzer: [^\n]*", done.stderr)
    if not summary.exists():
        tail = done.stderr[-3000:]
        raise RuntimeError(f"atheris wrote no summary (exit {done.returncode}):\n{tail}")
    stats = targets.Stats.from_json(json.loads(summary.read_text()))
    verdict = errors[0] if errors else ""
    if done.returncode != 0 and not verdict:
        verdict = f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    return FuzzResult(stats, "atheris (libFuzzer)", seconds, verdict, len(initial))


def run_mutation(target: str, runs: int, seed: int) -> FuzzResult:
    started = time.perf_counter()
    stats = targets.mutation_fuzz(target, runs, seed)
    seconds = time.perf_counter() - started
    return FuzzResult(stats, "seeded mutation fuzzer", seconds, "", len(targets.seeds(target)))


def print_fuzz(result: FuzzResult) -> None:
    s = result.stats
    rate = s.executions / result.seconds if result.seconds else 0.0
    top = ", ".join(f"{k} {n:,}" for k, n in s.outcomes.most_common())
    print(
        f"  {s.target}: {s.executions:,} executions ({result.engine}, {result.seeds} seed "
        f"inputs, {result.seconds:.0f} s, {rate:,.0f}/s); crashes {s.crashes}; hangs "
        f"(over {targets.HANG_SECONDS:.0f} s of CPU) {s.hangs}; slowest input "
        f"{s.slowest * 1000:.0f} ms of CPU"
    )
    print(f"    outcomes: {top}")
    if result.libfuzzer:
        print(f"    libFuzzer stopped: {result.libfuzzer}")
    if s.first_crash:
        print(f"    first crash: {s.first_crash[-600:]}")
    if s.first_hang:
        print(f"    first hang: {s.first_hang[-300:]}")


def broken_target(data: bytes) -> str:
    """Negative control: a "codec" with a bug the fuzzer must find (it crashes on any
    input holding ``NaN``), wrapped around the real json-event target."""
    if b"NaN" in data:
        raise KeyError("deliberate bug")
    return targets.json_target(data)


def negative_control(runs: int, seed: int) -> targets.Stats:
    targets.TARGETS["broken"] = broken_target
    targets.DICTIONARY["broken"] = targets.DICTIONARY["json-event"]
    try:
        corpus = [s for s in targets.seeds("json-event") if b"NaN" not in s]
        stats = targets.Stats("broken")
        mutator = targets.Mutator(seed, corpus, [b"NaN"])
        for data in mutator.inputs(runs):
            outcome = stats.run(broken_target, data)
            if outcome is not None:
                mutator.learn(data, outcome)
        return stats
    finally:
        del targets.TARGETS["broken"], targets.DICTIONARY["broken"]


def _pointers_unescaped_backwards() -> Any:
    """The json codec with its identity pointers read ~0 first (so "~01" names "/")."""
    lax = copy.copy(targets.JSON_CODEC)
    lax.pointers = [
        tuple(t.replace("~0", "~").replace("~1", "/") for t in pointer[1:].split("/"))
        for pointer in targets.JSON_SETTINGS["identity"]
    ]
    return lax


def _witness_ignore_dropped() -> Any:
    """The json codec with its witness_ignore forgotten (every member is witnessed)."""
    lax = copy.copy(targets.JSON_CODEC)
    lax.ignore = []
    return lax


class _AnyApplication(SpApiListingCodec):
    """sp-api-listing that takes any ApplicationId (checks everything else)."""

    def _metadata(self, value: Any) -> dict[str, Any]:
        if isinstance(value, dict) and "ApplicationId" in value:
            value = {**value, "ApplicationId": self.application_id}
        return super()._metadata(value)


def _any_application() -> Any:
    return _AnyApplication(targets.SP_APP, targets.SP_SUBS)


def _no_time_bound() -> Any:
    """Webhook verifiers that take a signed time up to an hour away, whatever the inbox."""
    return {key: dataclasses.replace(c, tolerance=3600) for key, c in targets.WEBHOOKS.items()}


# (what is lax, the target, the module global replaced, what replaces it)
LAX_CONTROLS = [
    ("json pointers unescaped ~0 first", "json-codec", "JSON_CODEC", _pointers_unescaped_backwards),
    ("json witness_ignore forgotten", "json-codec", "JSON_CODEC", _witness_ignore_dropped),
    ("sp-api-listing taking any ApplicationId", "sp-api", "SP_CODEC", _any_application),
    ("webhook signed times not bounded by the tolerance", "webhook-signatures", "WEBHOOKS",
     _no_time_bound),
]  # fmt: skip


def lax_control(index: int, runs: int, seed: int) -> targets.Stats:
    """The mutation fuzzer on a real target whose codec or verifier is made lax: its
    oracles must fail (each failure counts as a crash)."""
    _, target, name, make = LAX_CONTROLS[index]
    real = getattr(targets, name)
    setattr(targets, name, make())
    try:
        return targets.mutation_fuzz(target, runs, seed)
    finally:
        setattr(targets, name, real)


def oracle_failures(stats: targets.Stats) -> int:
    return sum(n for kind, n in stats.crash_kinds.items() if kind.startswith("OracleFailure"))


# -- 3. the live service -----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def service(workdir: Path) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    """``oncebox serve --demo`` on 127.0.0.1 over a fresh SQLite file: (URL, token, process)."""
    port = free_port()
    db = workdir / "service.db"
    log = (workdir / "service.log").open("wb")
    process = subprocess.Popen(
        [ONCEBOX, "--db", f"sqlite:///{db}", "serve", "--demo", "--port", str(port)],
        stdout=log,
        stderr=log,
        cwd=workdir,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        secret = None
        while time.monotonic() < deadline:
            found = re.search(r"obx_[A-Za-z0-9_-]+", (workdir / "service.log").read_text())
            if found and process.poll() is None:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        secret = found.group()
                        break
            if process.poll() is not None:
                break
            time.sleep(0.1)
        if secret is None:
            started = (workdir / "service.log").read_text()
            raise RuntimeError(f"oncebox serve did not start:\n{started}")
        yield url, secret, process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


SCHEMATHESIS_CONFIG = """
# Real inbox names (and the demo's row ids) most of the time, so generated requests reach
# the engine instead of stopping at 404; sometimes schemathesis's own values.
[dictionaries.inboxes]
values = ["ussd", "listing", "feed"]

[dictionaries.ids]
values = [1, 2, 3, 4]

[parameters]
"path.inbox" = { dictionary = "inboxes", probability = 0.9 }
"path.quarantine_id" = { dictionary = "ids", probability = 0.7 }
"path.record_id" = { dictionary = "ids", probability = 0.7 }
"""

# Check findings that are the documented design, not defects, by check and operation;
# each is still reported, and the same check on any other operation fails the run.
EXPECTED = {
    ("ST202", "POST /v1/inboxes/{inbox}/deliveries"): "a delivery body is documented as "
    "any bytes; one the codec refuses is a dead-lettered 422 decision, and a key-identity "
    "inbox sent no Oncebox-Key is a 400 (README, HTTP API)",
    ("ST202", "GET /v1/inboxes/{inbox}/dead-letters"): "a time filter's pattern cannot "
    "know month lengths: 2027-02-30 matches it and is refused 422 as no such day",
    ("ST202", "GET /v1/inboxes/{inbox}/dead-letters/lines"): "the same time filters",
    ("ST202", "GET /v1/inboxes/{inbox}/records"): "the same time filters; and a page's "
    "after must name a record of the inbox (records page by when each was first seen, read "
    "from that record), else 422, which no schema can say of an id",
    ("ST202", "GET /v1/inboxes/{inbox}/dead-letters/preview"): "the same time filters; and "
    "a reason filter names a reason the codecs refuse for or one the inbox's dead letters "
    "hold (a user's codec adds its own), known only at run time, else 400 naming them",
    ("ST202", "POST /v1/inboxes/{inbox}/dead-letters/replay"): "the same time filters and "
    "reasons; and a body's integers are taken written as integers only (models.STRICT): "
    "JSON Schema's integer is a value, so the generator sends a limit of 263.0 as one",
    ("ST202", "POST /v1/inboxes/{inbox}/dead-letters/archive"): "the same as the bulk replay",
    ("ST202", "POST /v1/inboxes/{inbox}/quarantine/resolve"): "the same time filters, and "
    "the same integers written as integers only (a limit of 263.0)",
    ("ST202", "GET /v1/inboxes/{inbox}/quarantine/preview"): "the same time filters",
    ("ST202", "POST /v1/dead-letters/{letter_id}/replay"): "the generator works in doubles "
    "and sends 2**63 as a lease_token under the bound 2**63 (exclusive), which a double "
    "cannot tell from 2**63 - 1; the service refuses it with 422 as the schema says",
    ("ST202", "PUT /v1/consumers/{name}"): "the same doubles: a start position of 2**63",
    ("ST202", "POST /v1/consumers/{name}/ack"): "the same doubles: a position of 2**63",
    ("ST112", "GET /v1/inboxes/{inbox}/feed"): "wait long-polls up to 30 s when nothing is "
    "there: a slow answer is what was asked for",
    ("ST112", "GET /v1/consumers/{name}/next"): "the same long poll",
}


def expected(failure: dict[str, Any]) -> str | None:
    """Why a schemathesis finding is expected (on every operation it names), else None."""
    code = failure.get("code", "")
    reasons = [EXPECTED.get((code, operation)) for operation in failure.get("operations", [])]
    if not reasons or None in reasons:
        return None
    return "; ".join(dict.fromkeys(r for r in reasons if r))


@dataclass
class SchemathesisResult:
    command: str
    exit_code: int
    generated: int
    requests: int
    statuses: Counter[int]
    failures: list[dict[str, Any]]
    errors: list[Any]
    seconds: float

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def unexpected(self) -> list[dict[str, Any]]:
        return [f for f in self.failures if expected(f) is None]


def run_schemathesis(
    url: str, secret: str, examples: int, seed: int, workdir: Path
) -> SchemathesisResult:
    config = workdir / "schemathesis.toml"
    config.write_text(SCHEMATHESIS_CONFIG)
    reports = workdir / "schemathesis-report"
    command = [
        SCHEMATHESIS,
        "--config-file",
        str(config),
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--continue-on-failure",
        "-H",
        f"Authorization: Bearer {secret}",
        "--max-examples",
        str(examples),
        "--seed",
        str(seed),
        "--workers",
        "1",
        # The feed's long poll may answer after 30 s (wait=30): past schemathesis' 10 s
        # default, a slow answer that was asked for would be a network error.
        "--request-timeout",
        "35",
        "--no-color",
        "--report",
        "json,har",
        "--report-dir",
        str(reports),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=workdir, timeout=6 * 3600)
    seconds = time.perf_counter() - started
    (workdir / "schemathesis.out").write_text(done.stdout + done.stderr)
    report = json.loads(next(reports.glob("json-*.json")).read_text())
    har = json.loads(next(reports.glob("har-*.json")).read_text())
    statuses = Counter(int(e["response"]["status"]) for e in har["log"]["entries"])
    shown = " ".join("Bearer <token>" if part.startswith("Authorization") else part
                     for part in command[1:])  # fmt: skip
    return SchemathesisResult(
        command=f"schemathesis {shown}",
        exit_code=done.returncode,
        generated=int(report["test_cases"]["generated"]),
        requests=sum(statuses.values()),
        statuses=statuses,
        failures=list(report["failures"]),
        errors=list(report["errors"]),
        seconds=seconds,
    )


# -- explicit probes -------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe:
    name: str
    expected: str
    got: str
    ok: bool


def _event(payload_text: str = "{}", **fields: str) -> bytes:
    """A json-event body as text, so hostile JSON can be spliced in where it lies."""
    base = {
        "schema_version": "1",
        "source": '"fuzz-probes"',
        "subscription": '"sub"',
        "notification_id": '"n-1"',
        "seller_id": '"S"',
        "sku": '"K"',
        "marketplace_id": '"M"',
        "notification_type": '"listing_status_changed"',
        "event_time": '"2030-01-01T00:00:00Z"',
        "payload": payload_text,
    }
    base.update(fields)
    return ("{" + ",".join(f'"{k}":{v}' for k, v in base.items()) + "}").encode()


def probes(url: str, secret: str) -> list[Probe]:
    """Hostile requests with the status the README documents for each; through HTTP."""
    found: list[Probe] = []
    headers = {"Authorization": f"Bearer {secret}"}
    deliveries = "/v1/inboxes/listing/deliveries"
    big = "1" + "0" * 5_000  # over CPython's 4,300-digit int conversion limit
    run = uuid.uuid4().hex[:8]  # fresh identities: probes may run twice on one store

    def nid(name: str) -> str:
        return f'"{run}-{name}"'

    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:

        def decision(
            name: str, body: Any, status: int, verdict: str, reason: str | None = None
        ) -> None:
            response = http.post(deliveries, content=body)
            got = f"{response.status_code} {response.headers.get('content-type', '')}"
            ok = response.status_code == status
            if ok and response.headers.get("content-type") == "application/json":
                doc = response.json()
                got = f"{response.status_code} {doc.get('verdict')}"
                got += f"/{doc['reason']}" if doc.get("reason") else ""
                got += f" may_ack={doc.get('may_ack')}"
                ok = (doc.get("verdict"), doc.get("reason")) == (verdict, reason)
                ok = ok and doc.get("may_ack") is True
            else:
                ok = False
            want = f"{status} {verdict}" + (f"/{reason}" if reason else "") + " may_ack=True"
            found.append(Probe(name, want, got, ok))

        def problem(name: str, response: httpx.Response, *statuses: int) -> None:
            got = f"{response.status_code} {response.headers.get('content-type', '')}"
            ok = (
                response.status_code in statuses
                and response.headers.get("content-type") == PROBLEM
                and response.json().get("status") == response.status_code
                and "Traceback" not in response.text
            )
            if ok:
                got += f" ({response.json().get('detail', '')[:70]})"
            want = " or ".join(map(str, statuses)) + " problem document"
            found.append(Probe(name, want, got, ok))

        # Duplicate members, at the top and deep inside the payload.
        dup_top = _event(notification_id=nid("dup")).replace(b'"sku":"K"', b'"sku":"K","sku":"L"')
        decision("duplicate member (top level)", dup_top, 422, "rejected", "duplicate_member")
        decision(
            "duplicate member (in payload)",
            _event('{"a":{"b":1,"b":1}}', notification_id=nid("dup2")),
            422,
            "rejected",
            "duplicate_member",
        )
        # Depth: 20 levels in all is the bound; 21, and 30,000 (still under 64 KiB).
        at_bound = "[" * 18 + "]" * 18
        decision(
            "nesting at the bound (20)",
            _event(f'{{"x":{at_bound}}}', notification_id=nid("depth20")),
            201,
            "accepted",
        )
        over = "[" * 19 + "]" * 19
        decision(
            "nesting over the bound (21)",
            _event(f'{{"x":{over}}}', notification_id=nid("depth21")),
            422,
            "rejected",
            "too_deep",
        )
        deep = "[" * 30_000 + "]" * 30_000
        decision(
            "nesting 30,000 deep",
            _event(f'{{"x":{deep}}}', notification_id=nid("deep")),
            422,
            "rejected",
            "too_deep",
        )
        # Integers over 4,300 digits: kept as spelled in a payload (docs/json-decisions.md),
        # refused where the schema wants the integer 1.
        decision(
            "5,001-digit integer in the payload (accepted, kept as spelled)",
            _event(f'{{"n":{big}}}', notification_id=nid("big")),
            201,
            "accepted",
        )
        decision(
            "  ... delivered again: a duplicate",
            _event(f'{{"n":{big}}}', notification_id=nid("big")),
            200,
            "duplicate",
        )
        decision(
            "  ... last digit changed: a conflict (no digit was lost or rounded)",
            _event(f'{{"n":{big[:-1]}1}}', notification_id=nid("big")),
            200,
            "conflict",
            "same_identity_different_content",
        )
        decision(
            "5,001-digit schema_version",
            _event(schema_version=big, notification_id=nid("big-schema")),
            422,
            "rejected",
            "bad_schema_version",
        )
        for number in ("NaN", "Infinity", "-Infinity", "1e999"):
            decision(
                f"{number} in the payload",
                _event(f'{{"n":{number}}}', notification_id=nid(number)),
                422,
                "rejected",
                "non_finite_number",
            )
        # Control requests: JSON bodies and numbers in headers, paths and queries.
        leases = "/v1/inboxes/feed/leases"
        as_json = {"Content-Type": "application/json"}
        for number in ("NaN", "Infinity", "1e999"):
            text = f'{{"scope":"S","ttl":{number}}}'.encode()
            problem(f"lease ttl {number}", http.post(leases, content=text, headers=as_json), 422)
        # The control plane reads JSON with FastAPI's parser, not the strict reader: a
        # 5,001-digit number fails there as "error parsing the body" (400, listed for the
        # route in /openapi.json), where other malformed control bodies get 422.
        text = f'{{"scope":"S","ttl":{big}}}'.encode()
        problem(
            "lease ttl of 5,001 digits", http.post(leases, content=text, headers=as_json), 400, 422
        )
        twice = http.post(leases, content=b'{"scope":"S","scope":"T","ttl":5}', headers=as_json)
        found.append(
            Probe(
                "lease body with a duplicate member (observation: control bodies are not "
                "read strictly)",
                "201 (last member wins) or 422",
                f"{twice.status_code} {twice.text[:60]}",
                twice.status_code in (201, 422),
            )
        )
        problem("release token of 5,001 digits", http.delete(f"{leases}/S?token={big}"), 422)
        problem(
            "Oncebox-Lease-Token of 5,001 digits",
            http.post("/v1/inboxes/feed/deliveries", content=b"x",
                      headers={"Oncebox-Lease-Token": big}),
            400,
        )  # fmt: skip
        problem("record id of 5,001 digits", http.get(f"/v1/log/proofs/records/{big}"), 422)
        problem(
            "consistency proof old= 5,001 digits",
            http.get(f"/v1/log/proofs/consistency?old={big}"),
            422,
        )
        batch = http.post(
            "/v1/inboxes/ussd/batch",
            content=f'{{"frame_id":"r-1","frame":"H1|1|A|MED|1|1|#00","lease_token":{big}}}',
            headers={"Content-Type": "application/x-ndjson"},
        )
        found.append(
            Probe(
                "batch line with a 5,001-digit lease_token",
                "200 with one decision",
                f"{batch.status_code}",
                batch.status_code == 200 and len(batch.json()["decisions"]) == 1,
            )
        )
        # Oversized bodies: 413 before anything parses them, declared or streamed; one
        # delivery over its inbox's bound, from a token that may write there, is read to
        # its end and kept as a too_large dead letter (issue 19, item 5).
        mib = 1_048_576
        decision("delivery of 1 MiB + 1", b"{" * (mib + 1), 413, "rejected", "too_large")
        streamed = iter([b"x" * 600_000, b"x" * 600_000])
        decision("delivery streamed without a length, 1.2 MB", streamed, 413, "rejected",
                 "too_large")  # fmt: skip
        oversized_batch = http.post("/v1/inboxes/ussd/batch", content=b"\n" * (mib + 1))
        problem("batch of 1 MiB + 1", oversized_batch, 413)
        problem("lease body of 1 MiB + 1", http.post(leases, content=b" " * (mib + 1)), 413)
        decision(
            "json-event of 65,537 bytes (under the server's body bound)",
            _event('{"pad":"' + "x" * 65_537 + '"}'),
            413,
            "rejected",
            "too_large",
        )
    return found


# -- the run ---------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--runs", type=int, default=200_000, help="executions per fuzz target")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--engine", choices=["auto", "atheris", "mutation"], default="auto")
    p.add_argument("--examples", type=int, default=150, help="schemathesis --max-examples")
    p.add_argument("--skip-service", action="store_true", help="fuzz targets only")
    p.add_argument(
        "--target", action="append", choices=list(targets.TARGETS), help="only these targets"
    )
    args = p.parse_args(argv)
    started = time.perf_counter()
    failed: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="oncebox-fuzz-"))
    try:
        engine = args.engine
        if engine == "auto":
            engine = "atheris" if atheris_available() else "mutation"
        if engine == "mutation" and args.engine == "auto":
            print("atheris is not installed: using the seeded mutation fuzzer instead")
        print(f"fuzz targets ({args.runs:,} executions each, seed {args.seed}):")
        for name in args.target or targets.TARGETS:
            if engine == "atheris":
                result = run_atheris(name, args.runs, args.seed, workdir)
            else:
                result = run_mutation(name, args.runs, args.seed)
            print_fuzz(result)
            s = result.stats
            if s.crashes or s.hangs or result.libfuzzer or s.executions < args.runs:
                failed.append(f"{name}: {s.crashes} crashes, {s.hangs} hangs {result.libfuzzer}")
        control_runs = 20_000
        control = negative_control(control_runs, args.seed)
        print(
            f"  negative control: a target with a planted bug (crashes on 'NaN'): "
            f"{control.crashes:,} crashes found in {control.executions:,} executions"
        )
        if control.crashes == 0:
            failed.append("the fuzzer did not find the planted bug")
        for index, (what, target, _, _) in enumerate(LAX_CONTROLS):
            lax = lax_control(index, control_runs, args.seed)
            caught = oracle_failures(lax)
            print(
                f"  negative control: {what} ({target}): {caught:,} oracle failures in "
                f"{lax.executions:,} executions"
            )
            if caught == 0:
                failed.append(f"the {target} oracles did not catch: {what}")
        if not args.skip_service:
            with service(workdir) as (url, secret, process):
                print(f"service: oncebox serve --demo on {url} (SQLite file, demo token)")
                checked = run_schemathesis(url, secret, args.examples, args.seed, workdir)
                print(
                    f"  {checked.command}\n  {checked.generated:,} test cases, "
                    f"{checked.requests:,} requests in {checked.seconds:.0f} s; statuses: "
                    + ", ".join(f"{k} {v:,}" for k, v in sorted(checked.statuses.items()))
                )
                print(f"  server errors (5xx): {checked.server_errors}")
                for failure in checked.failures:
                    why = expected(failure) or "UNEXPECTED"
                    print(
                        f"  check failure {failure.get('code')} {failure.get('title')} x"
                        f"{failure.get('count')} on {', '.join(failure.get('operations', []))}:"
                        f" {why}"
                    )
                print(f"  errors: {len(checked.errors)}; unexpected check failures: "
                      f"{len(checked.unexpected())}")  # fmt: skip
                if checked.server_errors or checked.unexpected() or checked.errors:
                    failed.append("schemathesis found server errors or unexpected failures")
                found = probes(url, secret)
                passed = sum(probe.ok for probe in found)
                print(f"  explicit probes through HTTP: {passed} of {len(found)} as documented")
                for probe in found:
                    mark = "ok  " if probe.ok else "FAIL"
                    print(f"    {mark} {probe.name}: want {probe.expected}; got {probe.got}")
                if passed != len(found):
                    failed.append(f"{len(found) - passed} probes not as documented")
                if process.poll() is not None:
                    failed.append("the service died during the run")
        print(f"wall time {time.perf_counter() - started:.0f} s")
    finally:
        if os.environ.get("ONCEBOX_FUZZ_KEEP"):
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        print("FAILED: " + "; ".join(failed))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
