"""The ``oncebox`` command: a thin layer over the library; every rule lives in the engine."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

import oncebox
from oncebox.engine.checkpoint import Checkpoint, generate_key
from oncebox.engine.inboxes import parse_duration
from oncebox.engine.proofs import verify_consistency_document, verify_inclusion_document
from oncebox.engine.reconciler import Outcome, default_worker_name, run_workers
from oncebox.engine.sealing import Sealer
from oncebox.errors import OnceboxError
from oncebox.formats import codec_settings
from oncebox.surfaces.lines import delivery_from_line
from oncebox.surfaces.readers import CommandReader
from oncebox.surfaces.views import as_json, work_key_json

DEFAULT_DB = "sqlite:///oncebox.db"
PROGRESS_FROM_BYTES = 1_000_000


def _fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"oncebox: error: {message}", err=True)
    sys.exit(code)


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


class Context:
    def __init__(self, db: str | None, config: str | None) -> None:
        self.db = db
        self.config = config
        self._box: oncebox.Oncebox | None = None

    @property
    def box(self) -> oncebox.Oncebox:
        if self._box is None:
            config = self.config
            if config is None and Path("oncebox.toml").exists():
                config = "oncebox.toml"
            url = self.db
            if url is None and config is None:
                url = DEFAULT_DB
            self._box = oncebox.open(url, config=config)
        return self._box

    def forget(self) -> None:
        """Close the store, if open; the next use opens it again (in a forked worker)."""
        if self._box is not None:
            self._box.close()
            self._box = None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    envvar="ONCEBOX_DB",
    metavar="URL",
    help=f"Store URL, e.g. sqlite:///intake.db [env ONCEBOX_DB; default {DEFAULT_DB}]",
)
@click.option(
    "--config",
    envvar="ONCEBOX_CONFIG",
    metavar="PATH",
    help="TOML file declaring inboxes [env ONCEBOX_CONFIG; default ./oncebox.toml "
    "if present, else the built-in inboxes ussd, listing and feed]",
)
@click.version_option(oncebox.__version__, prog_name="oncebox")
@click.pass_context
def cli(ctx: click.Context, db: str | None, config: str | None) -> None:
    """oncebox: exactly-once effects from at-least-once, out-of-order deliveries."""
    ctx.obj = Context(db, config)
    ctx.call_on_close(lambda: ctx.obj._box.close() if ctx.obj._box else None)


def _lines(stream: IO[bytes], size: int | None) -> Iterator[bytes]:
    if size is None or size < PROGRESS_FROM_BYTES:
        yield from stream
        return
    progress = Progress(
        TextColumn("ingesting"),
        BarColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        task = progress.add_task("ingest", total=size)
        for line in stream:
            progress.advance(task, len(line))
            yield line


@cli.command()
@click.argument("inbox")
@click.argument("source", default="-", metavar="[FILE|-]")
@click.option(
    "--batch",
    default=500,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Deliveries decided per transaction.",
)
@click.pass_obj
def ingest(obj: Context, inbox: str, source: str, batch: int) -> None:
    """Deliver NDJSON lines to INBOX; print one decision per line as JSON.

    \b
    Line forms (one delivery per line):
      json-event  the event object itself (json, sp-api-listing: the object too)
      ussd-h1     {"frame_id": "rec1-1", "frame": "H1|1|Kakuma1|MED|3|86|#89"}
      feed        {"payload": "...", "snapshot_id": "S1"}, or the bare payload
      other       {"body": "...", "key": "..."} (or body_b64)

    Example: oncebox ingest ussd frames.ndjson
    """
    box = obj.box
    codec = box.inbox(inbox).codec.name
    if source == "-":
        stream, size = sys.stdin.buffer, None
    else:
        try:
            stream, size = open(source, "rb"), os.path.getsize(source)  # noqa: SIM115
        except OSError as exc:
            _fail(f"cannot read {source}: {exc.strerror}")
    out = sys.stdout
    pending = []
    with stream:
        for line in _lines(stream, size):
            if not line.strip():
                continue
            pending.append(delivery_from_line(codec, line))
            if len(pending) >= batch:
                _decide(box, inbox, pending, out)
                pending = []
        if pending:
            _decide(box, inbox, pending, out)


def _decide(
    box: oncebox.Oncebox, inbox: str, pending: list[oncebox.Delivery], out: IO[str]
) -> None:
    for decision in box.ingest_batch(inbox, pending):
        out.write(json.dumps(decision.to_dict(), separators=(",", ":")) + "\n")
    out.flush()


def _inbox_names(box: oncebox.Oncebox) -> dict[int, str]:
    return {active.row.id: active.name for active in box.inboxes}


@cli.command()
@click.argument("inbox", required=False)
@click.pass_obj
def stats(obj: Context, inbox: str | None) -> None:
    """Counts by verdict and reason, sizes, retention; for one inbox or all."""
    names = [inbox] if inbox else [a.name for a in obj.box.inboxes]
    _emit([obj.box.stats(name) for name in names])


@cli.command()
@click.argument("inbox")
@click.pass_obj
def triage(obj: Context, inbox: str) -> None:
    """The headcount ledger of a triage inbox: totals and priority ranking."""
    _emit(obj.box.triage(inbox))


@cli.group()
def quarantine() -> None:
    """Conflicting newcomers kept for an operator."""


@quarantine.command("list")
@click.option("--inbox")
@click.option(
    "--status",
    type=click.Choice(["open", "kept", "accepted", "all"]),
    default="open",
    show_default=True,
)
@click.option("--limit", default=100, show_default=True)
@click.pass_obj
def quarantine_list(obj: Context, inbox: str | None, status: str, limit: int) -> None:
    """List quarantined newcomers, with the original record's content beside each."""
    rows = obj.box.quarantined(inbox, None if status == "all" else status, limit)
    names = _inbox_names(obj.box)
    _emit(
        [
            as_json(
                row,
                inbox=names.get(row.inbox_id, f"#{row.inbox_id}"),
                original=obj.box.original(row),
            )
            for row in rows
        ]
    )


@quarantine.command("resolve")
@click.argument("quarantine_id", type=int)
@click.argument("action", type=click.Choice(["keep", "accept"]))
@click.option("--note", required=True, help="Why; kept with the resolution.")
@click.pass_obj
def quarantine_resolve(obj: Context, quarantine_id: int, action: str, note: str) -> None:
    """keep the original, or accept the newcomer as the record's next revision.

    Example: oncebox quarantine resolve 3 accept --note "field team confirmed 9"
    """
    _emit(as_json(obj.box.resolve(quarantine_id, action, note)))


@cli.command("dead-letters")
@click.option("--inbox")
@click.option("--limit", default=100, show_default=True)
@click.pass_obj
def dead_letters(obj: Context, inbox: str | None, limit: int) -> None:
    """Invalid deliveries: a bounded copy, its length, SHA-256 and the reason."""
    names = _inbox_names(obj.box)
    _emit(
        [
            as_json(row, inbox=names.get(row.inbox_id, f"#{row.inbox_id}"))
            for row in obj.box.dead_letters(inbox, limit)
        ]
    )


@cli.command()
@click.option("--inbox")
@click.pass_obj
def evict(obj: Context, inbox: str | None) -> None:
    """Evict records past their inbox's retention (age only), keeping tombstones."""
    _emit(
        [
            {"inbox": e.inbox, "records": e.records, "tombstones": e.tombstones}
            for e in obj.box.evict(inbox)
        ]
    )


@cli.command()
@click.pass_obj
def inboxes(obj: Context) -> None:
    """The declared inboxes."""
    _emit(
        [
            {
                "name": a.name,
                "codec": a.codec.name,
                "identity": a.codec.identity,
                "settings": codec_settings(a.codec),
                "apply": a.row.apply,
                "retention_seconds": a.row.retention_seconds,
                "tombstone_seconds": a.row.tombstone_seconds,
            }
            for a in obj.box.inboxes
        ]
    )


@cli.command()
@click.argument("inbox")
@click.argument("scope")
@click.option("--ttl", default="60", show_default=True, help="Seconds (or 90s, 5m, 1h).")
@click.option(
    "--release",
    "release_token",
    type=int,
    metavar="TOKEN",
    help="Give up the lease held by TOKEN instead of taking one.",
)
@click.pass_obj
def lease(obj: Context, inbox: str, scope: str, ttl: str, release_token: int | None) -> None:
    """Take the next fencing token for SCOPE of a lease-fenced INBOX (or release one).

    Example: oncebox lease feed S1 --ttl 60
    """
    if release_token is not None:
        obj.box.release(inbox, scope, release_token)
        _emit({"inbox": inbox, "scope": scope, "released": release_token})
        return
    seconds = parse_duration(ttl)
    if seconds is None:
        _fail("a lease needs a finite ttl")
    _emit(obj.box.lease(inbox, scope, seconds).to_dict())


@cli.command()
@click.option(
    "--against",
    type=click.Path(dir_okay=False),
    metavar="CHECKPOINT",
    help="Also check the log against an exported checkpoint (catches truncation).",
)
@click.pass_obj
def verify(obj: Context, against: str | None) -> None:
    """Replay the log's chain and find records it does not cover.

    \b
    Exit status: 0 all good; 3 the chain is broken (tampering); 4 records are not
    covered (run recover); 5 the log does not match the checkpoint.
    """
    checkpoint = Checkpoint.from_json(_read_json(against)) if against else None
    report = obj.box.verify(checkpoint)
    _emit(report.to_dict())
    if report.broken_at is not None:
        sys.exit(3)
    if report.checkpoint_ok is False:
        sys.exit(5)
    if report.uncovered:
        sys.exit(4)


@cli.command()
@click.pass_obj
def recover(obj: Context) -> None:
    """Seal every committed record the log does not cover (also done at every open)."""
    _emit({"recovered": obj.box.recovered_at_open + obj.box.recover()})


@cli.command()
@click.option("--follow", is_flag=True, help="Keep sealing as events arrive (Ctrl-C stops).")
@click.option("--interval", default=1.0, show_default=True, help="Seconds between passes.")
@click.option("--ttl", default=30.0, show_default=True, help="Seconds the sealer lease lasts.")
@click.pass_obj
def seal(obj: Context, follow: bool, interval: float, ttl: float) -> None:
    """Append queued log events; with --follow, be the store's one dedicated sealer.

    Example: oncebox --db postgresql://intake@db/oncebox seal --follow
    """
    if not follow:
        _emit({"sealed": len(obj.box.seal())})
        return
    if interval >= ttl:
        _fail("--interval must be shorter than --ttl, or the lease lapses between passes")
    sealer = Sealer(obj.box.store, default_worker_name(), ttl=ttl)
    sealer.acquire()
    total = 0
    try:
        while True:
            total += sealer.seal()
            time.sleep(interval)
    except KeyboardInterrupt:
        sealer.release()
        _emit({"sealed": total})


@cli.command()
@click.option(
    "--sign",
    "key_file",
    type=click.Path(dir_okay=False),
    metavar="KEYFILE",
    help="Ed25519 private key (PEM) to sign the checkpoint with.",
)
@click.pass_obj
def checkpoint(obj: Context, key_file: str | None) -> None:
    """Print the log's checkpoint: tree size, Merkle root and chain head.

    Example: oncebox checkpoint --sign oncebox.key > cp.json
    """
    key = _read_bytes(key_file) if key_file else None
    _emit(obj.box.checkpoint(key).to_json())


@cli.command()
@click.argument("key_file", type=click.Path(dir_okay=False), metavar="KEYFILE")
def keygen(key_file: str) -> None:
    """Write a new Ed25519 key pair: KEYFILE (private) and KEYFILE.pub."""
    private, public = generate_key()
    path = Path(key_file)
    if path.exists():
        _fail(f"{key_file} exists; refusing to overwrite a key")
    path.write_bytes(private)
    path.chmod(0o600)
    Path(f"{key_file}.pub").write_bytes(public)
    _emit({"private": str(path), "public": f"{key_file}.pub"})


@cli.command()
@click.argument("record_id", type=int, required=False)
@click.option("--from-size", type=int, help="A consistency proof from this tree size instead.")
@click.option("--to-size", type=int, help="With --from-size: to this size (default: now).")
@click.pass_obj
def prove(obj: Context, record_id: int | None, from_size: int | None, to_size: int | None) -> None:
    """An inclusion proof for RECORD_ID, or a consistency proof between two tree sizes.

    Example: oncebox prove 5 > proof.json (then verify-proof it with --public-key)
    """
    if from_size is not None:
        _emit(obj.box.prove_consistency(from_size, to_size))
    elif record_id is not None:
        _emit(obj.box.prove(record_id))
    else:
        _fail("give a RECORD_ID, or --from-size for a consistency proof")


@cli.command("verify-proof")
@click.argument("proof_file", type=click.Path(dir_okay=False), metavar="PROOF")
@click.option(
    "--checkpoint",
    "checkpoint_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="The checkpoint (for a consistency proof: the newer one).",
)
@click.option(
    "--old-checkpoint",
    type=click.Path(dir_okay=False),
    help="For a consistency proof: the older checkpoint.",
)
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False),
    help="Ed25519 public key (PEM); the checkpoints must be signed by it.",
)
@click.option(
    "--unsigned",
    is_flag=True,
    help="Without a key: check the proof against the checkpoint anyway, reported as "
    'untrusted ("trusted": false). Anyone can make an unsigned checkpoint.',
)
def verify_proof(
    proof_file: str,
    checkpoint_file: str,
    old_checkpoint: str | None,
    public_key: str | None,
    unsigned: bool,
) -> None:
    """Check a proof offline: nothing but the proof, checkpoint(s) and the public key.

    Prints what was proven; `"trusted": true` only when the checkpoints' signatures were
    checked with --public-key. Without a key it refuses unless told --unsigned.

    Example: oncebox verify-proof proof.json --checkpoint cp.json --public-key oncebox.key.pub
    """
    if public_key and unsigned:
        _fail("give --public-key or --unsigned, not both")
    if not public_key and not unsigned:
        # A checkpoint is only as good as its signature: unchecked, anyone could have
        # made it up (with a tree size and a root to fit a made-up proof).
        _fail(
            "no --public-key: the checkpoint's signature cannot be checked, so nothing "
            "it says can be trusted; give --public-key, or --unsigned to check the proof "
            "against an untrusted checkpoint"
        )
    document = _read_json(proof_file)
    new = Checkpoint.from_json(_read_json(checkpoint_file))
    key = _read_bytes(public_key) if public_key else None
    if isinstance(document, dict) and document.get("type") == "oncebox-consistency-proof":
        if old_checkpoint is None:
            _fail("a consistency proof needs --old-checkpoint as well")
        old = Checkpoint.from_json(_read_json(old_checkpoint))
        report = verify_consistency_document(document, old, new, key)
    else:
        report = verify_inclusion_document(document, new, key)
    _emit({"ok": True, "trusted": report.signed, **asdict(report)})


def _read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror}")


def _read_json(path: str) -> Any:
    try:
        return json.loads(_read_bytes(path))
    except ValueError:
        _fail(f"{path} is not JSON")


@cli.command()
@click.option("--inbox", default="listing", show_default=True)
@click.option(
    "--reader",
    "command",
    required=True,
    metavar="COMMAND",
    help="Run per key: key JSON on stdin, document JSON on stdout.",
)
@click.option("--once", is_flag=True, help="Stop when no dirty key is due.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--claim-ttl", default=30.0, show_default=True, help="Seconds a claim lasts.")
@click.option(
    "--max-failures",
    default=5,
    show_default=True,
    type=click.IntRange(1),
    help="Failures in a row before a key goes to operator review.",
)
@click.option("--timeout", default=30.0, show_default=True, help="Seconds per read.")
@click.pass_obj
def reconcile(
    obj: Context,
    inbox: str,
    command: str,
    once: bool,
    workers: int,
    claim_ttl: float,
    max_failures: int,
    timeout: float,
) -> None:
    """Refresh dirty work keys through a reader command, with N workers.

    Example: oncebox reconcile --reader "python3 fetch_listing.py" --workers 4 --once
    """
    box = obj.box
    reader = CommandReader(command, timeout=timeout)
    worker = box.reconciler(inbox)
    counts: dict[str, int] = {o.value: 0 for o in Outcome}
    console = Console(stderr=True)
    lock = threading.Lock()

    def line() -> str:
        figures = worker.figures()
        return (
            f"dirty {figures['dirty']}  applied {counts['applied']}  superseded "
            f"{counts['superseded']}  failed {counts['failed']}  in review "
            f"{figures['in_review']}"
        )

    with console.status(line()) as status:

        def seen(outcome: Outcome) -> None:
            with lock:
                counts[outcome.value] += 1
                if outcome is not Outcome.IDLE:
                    status.update(line())

        run_workers(
            box,
            inbox,
            reader,
            workers=workers,
            once=once,
            on_outcome=seen,
            claim_ttl=claim_ttl,
            max_failures=max_failures,
        )
    _emit({"inbox": inbox, **{k: v for k, v in counts.items() if k != "idle"}, **worker.figures()})


@cli.group()
def work() -> None:
    """Work keys of the reconciler: list, review, retry."""


@work.command("list")
@click.option("--inbox", default="listing", show_default=True)
@click.option("--dirty", is_flag=True, help="Only dirty keys.")
@click.pass_obj
def work_list(obj: Context, inbox: str, dirty: bool) -> None:
    """Work keys with their generations, documents and failures."""
    rows = obj.box.work_keys(inbox)
    _emit([work_key_json(row) for row in rows if row.dirty or not dirty])


@work.command("review")
@click.option("--inbox", default="listing", show_default=True)
@click.pass_obj
def work_review(obj: Context, inbox: str) -> None:
    """Keys that kept failing and wait for an operator, with their last error."""
    _emit([work_key_json(row) for row in obj.box.reconciler(inbox).review()])


@work.command("retry")
@click.argument("seller_id")
@click.argument("sku")
@click.argument("marketplace_id")
@click.option("--inbox", default="listing", show_default=True)
@click.pass_obj
def work_retry(obj: Context, seller_id: str, sku: str, marketplace_id: str, inbox: str) -> None:
    """Send a key back from review to be refreshed again."""
    obj.box.reconciler(inbox).retry((seller_id, sku, marketplace_id))
    _emit({"retried": [seller_id, sku, marketplace_id]})


@cli.group()
def token() -> None:
    """API tokens for the HTTP service (stored hashed; the secret is shown once)."""


@token.command("create")
@click.argument("name")
@click.option("--inbox", "inboxes", multiple=True, required=True, help="Repeat; '*' for all.")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    type=click.Choice(["read", "write", "operator"]),
    help="Repeat; default write. operator implies read.",
)
@click.option("--hmac", "with_hmac", is_flag=True, help="Also require HMAC-signed requests.")
@click.pass_obj
def token_create(
    obj: Context, name: str, inboxes: tuple[str, ...], scopes: tuple[str, ...], with_hmac: bool
) -> None:
    """Create a token; prints its secret (and HMAC key) once.

    Example: oncebox token create gateway-1 --inbox ussd --scope write --hmac
    """
    created = obj.box.create_token(name, list(inboxes), list(scopes) or ["write"], hmac=with_hmac)
    _emit(created.to_dict())


@token.command("list")
@click.pass_obj
def token_list(obj: Context) -> None:
    """Tokens with their inboxes and scopes (never the secrets)."""
    _emit([t.to_dict() for t in obj.box.list_tokens()])


@token.command("revoke")
@click.argument("name")
@click.pass_obj
def token_revoke(obj: Context, name: str) -> None:
    """Revoke the live token NAME (or its id); it is refused from now on."""
    obj.box.revoke_token(name)
    _emit({"revoked": name})


@cli.command()
@click.option("--json", "as_json_output", is_flag=True, help="Print the full JSON result.")
def demo(as_json_output: bool) -> None:
    """Replay the founding scenarios (USSD session, listing inbox) on a fresh store."""
    from oncebox.surfaces.demo import run_demo, summary

    logging.getLogger("oncebox").setLevel(logging.ERROR)
    result = run_demo()
    if as_json_output:
        _emit(result)
    else:
        click.echo(summary(result))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="oncebox: %(message)s", stream=sys.stderr)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except click.ClickException as exc:
        _fail(f"{exc.format_message()} (try --help)", exc.exit_code)
    except OnceboxError as exc:
        _fail(str(exc))
    except BrokenPipeError:
        sys.exit(1)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:  # a bug: still one line, never a traceback
        _fail(f"internal error: {type(exc).__name__}: {exc}", 70)


from oncebox.surfaces.consume import consume  # noqa: E402  (the Redis Streams adapter)
from oncebox.surfaces.serve import serve  # noqa: E402  (the HTTP service)

cli.add_command(consume)
cli.add_command(serve)
