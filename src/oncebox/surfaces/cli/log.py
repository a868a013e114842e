"""The log: verify, recover, seal, checkpoints, keys, proofs and checking them offline."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import click

from oncebox.engine.checkpoint import Checkpoint, ProofError, generate_key
from oncebox.engine.proofs import verify_consistency_document, verify_inclusion_document
from oncebox.engine.reconciler import default_worker_name
from oncebox.engine.sealing import Sealer
from oncebox.engine.segment_check import verify_segment
from oncebox.errors import SchemaBehind
from oncebox.surfaces.cli.base import Context, cli, emit, fail, read_bytes, read_json
from oncebox.surfaces.lines import INT64_MAX


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
    checkpoint = Checkpoint.from_json(read_json(against)) if against else None
    report = obj.box.verify(checkpoint)
    emit(report.to_dict())
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
    emit({"recovered": obj.box.recovered_at_open + obj.box.recover()})


@cli.command()
@click.pass_obj
def migrate(obj: Context) -> None:
    """Bring the store's schema up to date with this version of oncebox, and nothing
    else: no inbox is declared. Commands that only read never upgrade a store; they ask
    for this first. Prints the schema version and the migrations it applied.

    Example: oncebox --db sqlite:///intake.db migrate
    """
    try:
        obj.reader  # noqa: B018 (opened to read: the schema checked, nothing written)
        lacked: tuple[int, ...] = ()
    except SchemaBehind as behind:
        lacked = behind.missing
    box = obj.upgraded()
    emit({"schema_version": box.store.schema_version(), "applied": list(lacked)})


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
        emit({"sealed": len(obj.box.seal())})
        return
    if interval >= ttl:
        fail("--interval must be shorter than --ttl, or the lease lapses between passes")
    sealer = Sealer(obj.box.store, default_worker_name(), ttl=ttl)
    sealer.acquire()
    total = 0
    try:
        while True:
            total += sealer.seal()
            time.sleep(interval)
    except KeyboardInterrupt:
        sealer.release()
        emit({"sealed": total})


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
    key = read_bytes(key_file) if key_file else None
    emit(obj.box.checkpoint(key).to_json())


@cli.command()
@click.argument("key_file", type=click.Path(dir_okay=False), metavar="KEYFILE")
def keygen(key_file: str) -> None:
    """Write a new Ed25519 key pair: KEYFILE (private) and KEYFILE.pub."""
    private, public = generate_key()
    path = Path(key_file)
    try:  # made 0600 and new at once: never readable by others, never another's file
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fail(f"{key_file} exists; refusing to overwrite a key")
    except OSError as exc:
        fail(f"cannot write {key_file}: {exc.strerror}")
    with os.fdopen(fd, "wb") as out:
        out.write(private)
    Path(f"{key_file}.pub").write_bytes(public)
    emit({"private": str(path), "public": f"{key_file}.pub"})


@cli.command()
@click.argument("record_id", type=click.IntRange(1, INT64_MAX), required=False)
@click.option("--from-size", type=int, help="A consistency proof from this tree size instead.")
@click.option("--to-size", type=int, help="With --from-size: to this size (default: now).")
@click.pass_obj
def prove(obj: Context, record_id: int | None, from_size: int | None, to_size: int | None) -> None:
    """An inclusion proof for RECORD_ID, or a consistency proof between two tree sizes.

    Example: oncebox prove 5 > proof.json (then verify-proof it with --public-key)
    """
    if from_size is not None:
        emit(obj.box.prove_consistency(from_size, to_size))
    elif record_id is not None:
        emit(obj.box.prove(record_id))
    else:
        fail("give a RECORD_ID, or --from-size for a consistency proof")


@cli.command()
@click.argument("inbox")
@click.option("--from", "start", type=int, required=True, help="The first log position.")
@click.option("--to", "end", type=int, required=True, help="The last log position.")
@click.option(
    "--tree-size",
    type=int,
    help="Prove it to the tree of this many entries: a checkpoint's tree_size (default: now).",
)
@click.option(
    "--whole", is_flag=True, help="Give every other entry whole too, not as its leaf hash."
)
@click.pass_obj
def segment(
    obj: Context, inbox: str, start: int, end: int, tree_size: int | None, whole: bool
) -> None:
    """A feed segment: every log entry from --from to --to (at most 1,000), INBOX's
    records whole with their content, to check offline with verify-feed.

    Example: oncebox segment ussd --from 1 --to 500 --tree-size 812 > seg.json
    """
    emit(obj.box.segment(inbox, start, end, tree_size=tree_size, whole=whole))


def _trust(public_key: str | None, unsigned: bool) -> bytes | None:
    """The public key to check checkpoints with; refuses to go on with neither a key nor
    --unsigned: unchecked, anyone could have made a checkpoint up to fit."""
    if public_key and unsigned:
        fail("give --public-key or --unsigned, not both")
    if not public_key and not unsigned:
        fail(
            "no --public-key: the checkpoint's signature cannot be checked, so nothing "
            "it says can be trusted; give --public-key, or --unsigned to check against an "
            "untrusted checkpoint"
        )
    return read_bytes(public_key) if public_key else None


@cli.command("verify-feed")
@click.argument("segment_file", type=click.Path(dir_okay=False, allow_dash=True), metavar="FILE")
@click.option("--from", "start", type=int, required=True, help="The first log position asked.")
@click.option("--to", "end", type=int, required=True, help="The last log position asked.")
@click.option(
    "--checkpoint",
    "checkpoint_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="The checkpoint the segment was proven to.",
)
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False),
    help="Ed25519 public key (PEM); the checkpoint must be signed by it.",
)
@click.option("--unsigned", is_flag=True, help='Without a key: check anyway, as "trusted": false.')
@click.option("--inbox", help="The inbox the segment must be of.")
@click.option(
    "--whole",
    is_flag=True,
    help="Refuse an entry given by its leaf hash only (for a segment asked for --whole).",
)
def verify_feed(
    segment_file: str,
    start: int,
    end: int,
    checkpoint_file: str,
    public_key: str | None,
    unsigned: bool,
    inbox: str | None,
    whole: bool,
) -> None:
    """Check a feed segment offline: that FILE (- for standard input) holds every log
    entry from --from to --to, none left out, moved or changed, and its records with the
    content their entries seal. Prints the records in log order.

    \b
    Exit status: 0 it holds; 2 it does not, with the reason first on the error line
    (withheld, reordered, altered, foreign_entry, bad_signature, ...).

    Example: oncebox verify-feed --from 1 --to 500 --checkpoint cp.json --public-key k.pub seg.json
    """
    key = _trust(public_key, unsigned)
    raw = sys.stdin.buffer.read() if segment_file == "-" else read_bytes(segment_file)
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):  # nested past the reader's depth: not JSON either
        fail(f"{segment_file} is not JSON")
    found = read_json(checkpoint_file)
    try:
        checkpoint = Checkpoint.from_json(found)
        report = verify_segment(
            document, checkpoint, key, start=start, end=end, inbox=inbox, whole=whole
        )
    except ProofError as refused:
        fail(f"{refused.reason}: {refused.message}")
    shown = asdict(report)
    shown["from"], shown["to"] = shown.pop("start"), shown.pop("end")
    emit({"ok": True, "trusted": report.signed, **shown})


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
    key = _trust(public_key, unsigned)
    document = read_json(proof_file)
    new = Checkpoint.from_json(read_json(checkpoint_file))
    if isinstance(document, dict) and document.get("type") == "oncebox-consistency-proof":
        if old_checkpoint is None:
            fail("a consistency proof needs --old-checkpoint as well")
        old = Checkpoint.from_json(read_json(old_checkpoint))
        report = verify_consistency_document(document, old, new, key)
    else:
        report = verify_inclusion_document(document, new, key)
    emit({"ok": True, "trusted": report.signed, **asdict(report)})
