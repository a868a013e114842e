"""Checkpoint-log benchmark: what sealing costs ingest, and what a proof costs beside a replay.

The spec: sealing must not halve ingest. Batched ingest with sealing on is at least 0.7
of the rate with sealing deferred, measured in the same run; an inclusion proof for a
log of 1,000,000 entries is produced in under 1% of the time a full replay of that log
takes. The targets are printed beside the figures; nothing here asserts on a timing
(the only checks are that each pass did what it claims, so the figures mean something).

Part 1, sealing: N new ``json-event`` deliveries into a ``listing`` inbox, 1,000 per
``ingest_batch``, into a fresh SQLite file with ``seal=True`` and into another with
``seal=False`` (records left unsealed). The deferred side is not free: the time its
final ``recover()`` takes to seal them all is reported separately. The two modes run
``--repeats`` times each, alternating which goes first, and the best rate of each is
compared.

Part 2, proofs: a log of ``--log-size`` entries, built either by ingesting that many
deliveries with sealing on (``--build ingest``, the default: one ``accept`` entry per
record, exactly as production builds it) or by appending entries straight through
``oncebox.engine.log.chain`` (``--build append``, faster; fair because a proof's cost
depends only on the log and its Merkle nodes). Then, on a freshly reopened store,
inclusion proofs for random entries (``Oncebox.prove`` per record, and the bare
``merkle.inclusion_proof``), consistency proofs between random sizes, and last the
full replay (``Oncebox.verify``: chain from genesis, Merkle root, coverage).

    .venv/bin/python bench/log.py                          # N=100,000, log of 1,000,000
    .venv/bin/python bench/log.py --n 5000 --log-size 20000
    .venv/bin/python bench/log.py --build append --json > figures.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import apsw

import oncebox
from oncebox.engine import log as chain
from oncebox.engine import merkle
from synthetic import json_body

INBOX = "listing"
INBOXES = [oncebox.InboxSpec(INBOX, codec="json-event", apply="generation")]

# Targets from the spec: printed beside the figures, never asserted.
TARGET_SEAL_RATIO = 0.7  # seal-on rate >= 0.7 x the seal-deferred rate
TARGET_PROOF_SHARE = 0.01  # inclusion proof < 1% of a full replay



def deliveries(start: int, count: int) -> list[oncebox.Delivery]:
    return [oncebox.Delivery(body=json_body(i)) for i in range(start, start + count)]


# -- helpers -------------------------------------------------------------------------------
def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def url_of(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def log_size(box: oncebox.Oncebox) -> int:
    with box.store.reading() as tx:
        head = tx.log_head()
    return head.seq if head else 0


def unsealed(box: oncebox.Oncebox) -> int:
    with box.store.reading() as tx:
        return sum(1 for _, seq in tx.record_seals() if seq is None)


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "count": len(ordered),
        "median_s": statistics.median(ordered),
        "p95_s": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max_s": ordered[-1],
        "min_s": ordered[0],
        "total_s": sum(ordered),
    }


def timed_each(calls: Sequence[Callable[[], object]]) -> list[float]:
    out = []
    for call in calls:
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


# -- part 1: sealing on versus deferred ------------------------------------------------------
def ingest_pass(
    box: oncebox.Oncebox, items: list[oncebox.Delivery], batch: int
) -> tuple[float, list[oncebox.Decision]]:
    ingest_batch = box.ingest_batch
    results = []
    started = time.perf_counter()
    for j in range(0, len(items), batch):
        results.append(ingest_batch(INBOX, items[j:j + batch]))
    seconds = time.perf_counter() - started
    return seconds, [d for chunk in results for d in chunk]


def sealing_run(
    mode: str, items: list[oncebox.Delivery], batch: int, path: Path
) -> dict[str, Any]:
    n = len(items)
    box = oncebox.open(url_of(path), inboxes=INBOXES, seal=mode == "on")
    try:
        seconds, decisions = ingest_pass(box, items, batch)
        accepted = sum(1 for d in decisions if d.verdict is oncebox.Verdict.ACCEPTED)
        if accepted != n:
            raise SystemExit(f"sealing {mode}: expected {n} accepted, got {accepted}")
        run: dict[str, Any] = {"mode": mode, "n": n, "seconds": seconds, "eps": n / seconds,
                               "log_after_ingest": log_size(box)}
        if mode == "deferred":
            left = unsealed(box)
            if left != n or run["log_after_ingest"] != 0:
                raise SystemExit(f"sealing deferred: {left} unsealed records and "
                                 f"{run['log_after_ingest']} log entries after ingest")
            started = time.perf_counter()
            sealed = box.recover(grace=0)  # this process is the only writer
            run["recover_seconds"] = time.perf_counter() - started
            if sealed != n:
                raise SystemExit(f"sealing deferred: recover sealed {sealed}, expected {n}")
            run["total_seconds"] = seconds + run["recover_seconds"]
            run["eps_with_recover"] = n / run["total_seconds"]
        if log_size(box) != n or unsealed(box):
            raise SystemExit(f"sealing {mode}: the log does not cover the {n} records")
    finally:
        box.close()
        remove_db(path)
    return run


def part_sealing(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    items = deliveries(0, args.n)
    runs = []
    for r in range(args.repeats):
        order = ("on", "deferred") if r % 2 == 0 else ("deferred", "on")
        for mode in order:
            run = sealing_run(mode, items, args.batch, workdir / f"seal-{mode}-{r}.db")
            run["repeat"] = r
            runs.append(run)
            extra = (f", then recover {run['recover_seconds']:.2f}s"
                     if mode == "deferred" else "")
            note(f"  repeat {r + 1}/{args.repeats} sealing {mode:8}: {run['seconds']:.2f}s "
                 f"= {run['eps']:,.0f} ev/s{extra}")
    on = [r for r in runs if r["mode"] == "on"]
    deferred = [r for r in runs if r["mode"] == "deferred"]
    best_on = max(on, key=lambda r: r["eps"])
    best_def = max(deferred, key=lambda r: r["eps"])
    return {
        "n": args.n,
        "batch": args.batch,
        "repeats": args.repeats,
        "runs": runs,
        "best_on_eps": best_on["eps"],
        "best_deferred_eps": best_def["eps"],
        "ratio": best_on["eps"] / best_def["eps"],
        "median_on_eps": statistics.median(r["eps"] for r in on),
        "median_deferred_eps": statistics.median(r["eps"] for r in deferred),
        "median_ratio": statistics.median(r["eps"] for r in on)
        / statistics.median(r["eps"] for r in deferred),
        "best_recover_seconds": min(r["recover_seconds"] for r in deferred),
        "best_deferred_with_recover_eps": max(r["eps_with_recover"] for r in deferred),
        "target": TARGET_SEAL_RATIO,
    }


# -- part 2: proofs versus a replay ----------------------------------------------------------
def build_by_ingest(box: oncebox.Oncebox, size: int, batch: int) -> list[int]:
    """Ingest ``size`` new deliveries with sealing on; returns the record ids."""
    record_ids: list[int] = []
    step = max(size // 10, batch)
    started = time.perf_counter()
    for j in range(0, size, batch):
        decisions = box.ingest_batch(INBOX, deliveries(j, min(batch, size - j)))
        record_ids.extend(d.record_id for d in decisions
                          if d.verdict is oncebox.Verdict.ACCEPTED and d.record_id)
        done = min(j + batch, size)
        if done % step < batch and done < size:
            note(f"  built {done:,}/{size:,} ({time.perf_counter() - started:.0f}s)")
    if len(record_ids) != size:
        raise SystemExit(f"build: expected {size} accepted records, got {len(record_ids)}")
    return record_ids


def build_by_append(box: oncebox.Oncebox, size: int, chunk: int) -> None:
    """Append ``size`` record-shaped entries straight to the log, ``chunk`` per tx."""
    step = max(size // 10, chunk)
    started = time.perf_counter()
    for j in range(0, size, chunk):
        with box.store.transaction() as tx:
            chain.chain(tx, [("accept", chain.state_text({
                "inbox": INBOX, "record": i + 1, "identity": f'["sp-api","sub-eu-1","n-{i}"]',
                "witness": f"{i:064x}", "revision": 1, "snapshot_id": None,
            })) for i in range(j, min(j + chunk, size))])
        done = min(j + chunk, size)
        if done % step < chunk and done < size:
            note(f"  built {done:,}/{size:,} ({time.perf_counter() - started:.0f}s)")


def check_proofs(
    box: oncebox.Oncebox, size: int, indexes: list[int], pairs: list[tuple[int, int]]
) -> None:
    """Untimed: the proofs timed must actually verify against the tree's roots."""
    with box.store.reading() as tx:
        get = chain.Nodes(tx)
        root = merkle.tree_root(get, size)
        for index in indexes[:20]:
            entry = next(iter(tx.log_entries(index + 1, index + 2)), None)
            if entry is None:
                raise SystemExit(f"log entry {index + 1} is missing")
            proof = merkle.inclusion_proof(get, index, size)
            if not merkle.verify_inclusion(chain.leaf_of(entry), index, size, proof, root):
                raise SystemExit(f"inclusion proof for leaf {index} does not verify")
        for old, new in pairs[:20]:
            proof = merkle.consistency_proof(get, old, new)
            old_root, new_root = merkle.tree_root(get, old), merkle.tree_root(get, new)
            if not merkle.verify_consistency(old, new, old_root, new_root, proof):
                raise SystemExit(f"consistency proof {old} -> {new} does not verify")


def part_proofs(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    path = workdir / "log.db"
    size = args.log_size
    rng = random.Random(args.seed)
    box = oncebox.open(url_of(path), inboxes=INBOXES, seal=True)
    unit = "ingest_batch" if args.build == "ingest" else "transaction"
    note(f"  building a log of {size:,} entries by {args.build} "
         f"({args.build_batch:,} per {unit})")
    started = time.perf_counter()
    record_ids: list[int] = []
    if args.build == "ingest":
        record_ids = build_by_ingest(box, size, args.build_batch)
    else:
        build_by_append(box, size, args.build_batch)
    build_seconds = time.perf_counter() - started
    entries = log_size(box)
    box.close()
    db_mb = sum(Path(f"{path}{s}").stat().st_size for s in ("", "-wal")
                if Path(f"{path}{s}").exists()) / 1e6
    note(f"  built in {build_seconds:.1f}s ({size / build_seconds:,.0f} entries/s); "
         f"log has {entries:,} entries; files {db_mb:.0f} MB")

    # Reopen: SQLite's page cache starts empty (the OS cache is whatever the build left).
    box = oncebox.open(url_of(path), inboxes=INBOXES, seal=True)
    results: dict[str, Any] = {
        "log_size": size, "entries": entries, "build": args.build,
        "build_batch": args.build_batch, "build_seconds": build_seconds,
        "build_eps": size / build_seconds, "db_mb": db_mb, "proofs": args.proofs,
    }
    try:
        indexes = [rng.randrange(entries) for _ in range(args.proofs)]
        pairs = []
        for _ in range(args.proofs):
            old = rng.randrange(1, entries)
            pairs.append((old, rng.randrange(old + 1, entries + 1)))
        pairs[0] = (entries // 2 + 1, entries)  # a ragged old tree against the full one
        check_proofs(box, entries, indexes, pairs)

        if record_ids:
            picks = [rng.choice(record_ids) for _ in range(args.proofs)]
            docs: list[dict[str, Any]] = []
            times = timed_each([lambda rid=rid: docs.append(box.prove(rid)) for rid in picks])
            if any(doc["tree_size"] != entries for doc in docs):
                raise SystemExit("Oncebox.prove answered for another tree size")
            results["prove_record"] = summary(times)
            results["prove_record_path_len"] = max(len(doc["path"]) for doc in docs)

        with box.store.reading() as tx:
            get = chain.Nodes(tx)
            results["inclusion_proof"] = summary(timed_each(
                [lambda i=i: merkle.inclusion_proof(get, i, entries) for i in indexes]))
        results["inclusion_proof_last"] = summary(timed_each(
            [lambda: _last_proof(box, entries) for _ in range(min(args.proofs, 20))]))
        results["prove_consistency"] = summary(timed_each(
            [lambda p=p: box.prove_consistency(*p) for p in pairs]))

        replays = []
        for r in range(args.replays):
            started = time.perf_counter()
            report = box.verify()
            replays.append(time.perf_counter() - started)
            if not report.ok or report.entries != entries:
                raise SystemExit(f"replay {r + 1}: {report.to_dict()}")
            note(f"  replay {r + 1}/{args.replays}: {replays[-1]:.2f}s")
        root = box.checkpoint().root
        if root != report.root:
            raise SystemExit("the replayed root differs from the stored tree's root")
    finally:
        box.close()
        remove_db(path)
    replay = min(replays)
    results["replay_seconds"] = replays
    results["replay_best_s"] = replay
    main = results.get("prove_record", results["inclusion_proof"])
    results["proof_kind_for_target"] = "prove_record" if record_ids else "inclusion_proof"
    results["proof_median_share"] = main["median_s"] / replay
    results["proof_max_share"] = main["max_s"] / replay
    results["consistency_median_share"] = results["prove_consistency"]["median_s"] / replay
    results["consistency_max_share"] = results["prove_consistency"]["max_s"] / replay
    results["target"] = TARGET_PROOF_SHARE
    return results


def _last_proof(box: oncebox.Oncebox, size: int) -> list[bytes]:
    """The newest entry's proof in its own read transaction (the path a fresh seal asks)."""
    with box.store.reading() as tx:
        return merkle.inclusion_proof(chain.Nodes(tx), size - 1, size)


# -- the report ------------------------------------------------------------------------------
def yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def report(out: TextIO, figures: dict[str, Any]) -> None:
    meta = figures["meta"]
    print("", file=out)
    print(f"oncebox log benchmark: APSW {meta['apsw']}, SQLite {meta['sqlite']}, Python "
          f"{meta['python']}, {meta['cpus']} CPUs; load average {meta['load_average_before']}"
          f" before, {meta['load_average_after']} after", file=out)
    print("store: SQLite, WAL, synchronous=FULL, a fresh file per run in a temp dir", file=out)
    seal = figures.get("sealing")
    if seal:
        print("", file=out)
        print(f"1. sealing: N={seal['n']:,} new json-event deliveries, {seal['batch']:,} per "
              f"ingest_batch, {seal['repeats']} repeat(s) per mode, alternating which mode "
              f"goes first; best rate of each compared", file=out)
        for run in seal["runs"]:
            extra = ""
            if run["mode"] == "deferred":
                extra = (f"; recover() afterwards {run['recover_seconds']:.2f}s, "
                         f"ingest+recover {run['eps_with_recover']:,.0f} ev/s")
            print(f"   repeat {run['repeat'] + 1} sealing {run['mode']:8} "
                  f"{run['seconds']:7.2f}s  {run['eps']:9,.0f} ev/s{extra}", file=out)
        print(f"   best: sealing on {seal['best_on_eps']:,.0f} ev/s, deferred "
              f"{seal['best_deferred_eps']:,.0f} ev/s; ratio on/deferred "
              f"{seal['ratio']:.3f} (median ratio {seal['median_ratio']:.3f}); "
              f"target >= {seal['target']}: {yes(seal['ratio'] >= seal['target'])}", file=out)
        print(f"   deferred is not free: sealing the {seal['n']:,} records afterwards took "
              f"{seal['best_recover_seconds']:.2f}s (best); deferred ingest + recover = "
              f"{seal['best_deferred_with_recover_eps']:,.0f} ev/s, sealing on / that = "
              f"{seal['best_on_eps'] / seal['best_deferred_with_recover_eps']:.3f}", file=out)
    proofs = figures.get("proofs")
    if proofs:
        print("", file=out)
        unit = "ingest_batch" if proofs["build"] == "ingest" else "transaction"
        print(f"2. proofs: a log of {proofs['entries']:,} entries built by {proofs['build']} "
              f"({proofs['build_batch']:,} per {unit}) in {proofs['build_seconds']:.1f}s "
              f"({proofs['build_eps']:,.0f}/s), {proofs['db_mb']:.0f} MB on disk", file=out)
        print(f"   timed on the reopened store, {proofs['proofs']} random picks each (seed "
              f"{meta['seed']}); proofs before the replay", file=out)

        def row(name: str, s: dict[str, float]) -> None:
            print(f"   {name:34} median {ms(s['median_s']):>12}  p95 {ms(s['p95_s']):>12}  "
                  f"max {ms(s['max_s']):>12}", file=out)

        if "prove_record" in proofs:
            row("Oncebox.prove(record) [document]", proofs["prove_record"])
        row("merkle.inclusion_proof [bare]", proofs["inclusion_proof"])
        row("inclusion of the newest entry", proofs["inclusion_proof_last"])
        row("Oncebox.prove_consistency", proofs["prove_consistency"])
        replays = ", ".join(f"{s:.2f}s" for s in proofs["replay_seconds"])
        print(f"   full replay Oncebox.verify(): {replays} (best {proofs['replay_best_s']:.2f}s)",
              file=out)
        share, worst = proofs["proof_median_share"], proofs["proof_max_share"]
        print(f"   inclusion proof ({proofs['proof_kind_for_target']}) / replay: median "
              f"{share:.5%}, max {worst:.5%}; target < {proofs['target']:.0%}: median "
              f"{yes(share < proofs['target'])}, max {yes(worst < proofs['target'])}", file=out)
        print(f"   consistency proof / replay: median {proofs['consistency_median_share']:.5%}, "
              f"max {proofs['consistency_max_share']:.5%}", file=out)
    print("", file=out)
    print(f"wall time {meta['wall_seconds']:.0f}s", file=out)


# -- command line ----------------------------------------------------------------------------
def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--n", type=int, default=100_000,
                   help="deliveries per sealing pass (default 100,000)")
    p.add_argument("--batch", type=int, default=1_000,
                   help="deliveries per ingest_batch in the sealing passes (default 1,000)")
    p.add_argument("--repeats", type=int, default=2,
                   help="passes per sealing mode, alternating the order (default 2)")
    p.add_argument("--log-size", type=int, default=1_000_000,
                   help="entries in the log the proofs are timed on (default 1,000,000)")
    p.add_argument("--build", choices=("ingest", "append"), default="ingest",
                   help="build the log by ingesting with sealing on, or by log.chain")
    p.add_argument("--build-batch", type=int, default=10_000,
                   help="deliveries or entries per transaction while building (default 10,000)")
    p.add_argument("--proofs", type=int, default=200,
                   help="proofs timed per kind (default 200)")
    p.add_argument("--replays", type=int, default=2,
                   help="full replays timed; the best is the denominator (default 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip-sealing", action="store_true", help="run part 2 only")
    p.add_argument("--skip-proofs", action="store_true", help="run part 1 only")
    p.add_argument("--dir", default=None, help="where to make the temp dir (default: system)")
    p.add_argument("--json", action="store_true",
                   help="print figures as JSON on stdout (the report goes to stderr)")
    args = p.parse_args(argv)
    for name in ("n", "batch", "repeats", "build_batch", "proofs", "replays"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.log_size < 2:
        p.error("--log-size must be at least 2")
    return args


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    started, load_before = time.perf_counter(), load_average()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="oncebox-logbench-", dir=args.dir) as tmp:
        workdir = Path(tmp)
        note(f"working in {workdir}")
        if not args.skip_sealing:
            note("part 1: sealing on versus deferred")
            figures["sealing"] = part_sealing(args, workdir)
        if not args.skip_proofs:
            note("part 2: proofs versus a full replay")
            figures["proofs"] = part_proofs(args, workdir)
    figures["meta"] = {
        "apsw": apsw.apsw_version(), "sqlite": apsw.sqlite_lib_version(),
        "python": sys.version.split()[0], "cpus": os.cpu_count(), "seed": args.seed,
        "oncebox": str(Path(oncebox.__file__).parent), "load_average_before": load_before,
        "load_average_after": load_average(), "wall_seconds": time.perf_counter() - started,
    }
    report(sys.stderr if args.json else sys.stdout, figures)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
