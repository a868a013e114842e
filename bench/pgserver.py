# ruff: noqa: E402  (sys.path is set before the imports it decides)
"""The server's time a delivery on PostgreSQL, per statement: pg_stat_statements' execution
and planning time over ``--n`` single deliveries, new and then the same again
(duplicates), json-event with the ``generation`` step, on a throwaway server started
with the extension loaded. Timed on the server, so it moves with the machine's load;
compare rounds run one after another (``--src DIR``: another checkout's ``src/``).

    .venv/bin/python bench/pgserver.py --n 1000
    .venv/bin/python bench/pgserver.py --n 1000 --src=/work/main/src
"""

from __future__ import annotations

import sys
from pathlib import Path

_src = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--src=")), None)
if _src:
    sys.path.insert(0, _src)
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import argparse
import re

import psycopg

import oncebox
from helpers import event_body
from oncebox import Delivery, InboxSpec
from pgcluster import throwaway_server

INBOX = InboxSpec("listing", codec="json-event", apply="generation")
STATS = (
    "SELECT calls, total_exec_time, total_plan_time, query FROM pg_stat_statements"
    " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC"
)


def event(i: int) -> Delivery:
    payload = {"status": "BUYABLE", "issues": [], "price": 1}
    return Delivery(event_body(f"n-{i:08d}", sku=f"SKU-{i % 50:03d}", payload=payload))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--src", help="another checkout's src/ (--src=DIR)")
    args = parser.parse_args()
    print(f"oncebox from {Path(oncebox.__file__).parent}")
    with throwaway_server("oncebox-bench-pgserver-") as server:
        if not hasattr(server, "data_dir"):
            raise SystemExit("needs a throwaway cluster (ONCEBOX_TEST_PG unset)")
        with (server.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("shared_preload_libraries = 'pg_stat_statements'\n")
            conf.write("pg_stat_statements.track_planning = on\n")
        server.stop("fast")
        server.start_again()
        url = server.create_database("server")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        box = oncebox.open(url, inboxes=[INBOX])
        try:
            for i in range(50):
                box.ingest("listing", event(-1_000 - i))
            deliveries = [event(i) for i in range(args.n)]
            for case in ("new", "duplicate"):
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("SELECT pg_stat_statements_reset()")
                for delivery in deliveries:
                    box.ingest("listing", delivery)
                with psycopg.connect(url, autocommit=True) as conn:
                    rows = conn.execute(STATS).fetchall()
                total = sum(run + plan for _, run, plan, _ in rows) / args.n * 1000
                print(f"single {case}: {total:.0f} us of the server's a delivery (exec + plan)")
                for calls, run, plan, sql in rows:
                    text = re.sub(r"\s+", " ", sql)[:70]
                    run, plan = run / args.n * 1e3, plan / args.n * 1e3
                    print(f"  {calls:>6} {run:7.1f} us exec {plan:6.1f} us plan  {text}")
        finally:
            box.close()


if __name__ == "__main__":
    main()
