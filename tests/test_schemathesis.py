"""A bounded schemathesis run against the live API's own ``/openapi.json``.

The app runs on uvicorn on 127.0.0.1 over a SQLite file store; every generated request
carries a token with all scopes on all inboxes. A longer run, by hand: ``schemathesis run
http://127.0.0.1:8080/openapi.json -H "Authorization: Bearer $TOKEN"`` against
``oncebox serve --demo``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import ManualClock
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.http import create_app

pytestmark = pytest.mark.slow  # a schemathesis campaign against the service

# What the API promises: no server error, and every response as /openapi.json documents
# it (schema, status code, content type). Not positive_data_acceptance: a delivery body
# is documented as any bytes on purpose, and one the codec refuses is a dead-lettered
# 422 decision, not a "valid request rejected".
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]

NAMES = [spec.name for spec in INBOXES]
# Examples per operation and mode, kept small so the suite stays quick; the long run is
# reliability/fuzz.py's (RELIABILITY.md).
MODES = [(schemathesis.GenerationMode.POSITIVE, 15), (schemathesis.GenerationMode.NEGATIVE, 5)]


@pytest.fixture(scope="module")
def live_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, secret) of a served app with some records, a conflict, a dead letter."""
    db = Path(tmp_path_factory.mktemp("schemathesis")) / "api.db"
    box = oncebox.open(f"sqlite:///{db}", inboxes=INBOXES, clock=ManualClock(1_800_000_000.0))
    frames = [
        oncebox.Delivery(make_frame(seq, "Kakuma1", "MED", seq, 86).encode(), key=f"r-{seq}")
        for seq in (1, 2, 3)
    ]
    box.ingest_batch("ussd", frames)
    box.ingest("ussd", oncebox.Delivery(make_frame(1, "Kakuma1", "MED", 9, 86).encode(), key="r-1"))
    box.ingest("ussd", oncebox.Delivery(b"H1|1|Kakuma1|MED|3|86|#00", key="bad"))
    secret = box.create_token("fuzz", ["*"], ["read", "write", "operator"]).secret

    try:
        with serving(create_app(box)) as url:
            yield url, secret
    finally:
        box.close()


def _inbox_hooks(schema: Any) -> None:
    """Mostly the declared inboxes (so requests reach the engine), sometimes whatever
    schemathesis made up (so unknown inboxes are exercised too)."""

    @schema.hook
    def before_generate_path_parameters(context: Any, strategy: Any) -> Any:
        def real_inbox(parameters: Any) -> Any:
            if not isinstance(parameters, dict) or "inbox" not in parameters:
                return st.just(parameters)
            pick = st.sampled_from([*NAMES, parameters["inbox"]])
            return pick.map(lambda name: {**parameters, "inbox": name})

        return strategy.flatmap(real_inbox)


def _fuzz(
    operation: Any, mode: Any, examples: int, url: str, auth: dict[str, str], tally: Counter[int]
) -> None:
    """Run ``examples`` generated requests against one operation; raise on a failed check."""

    @given(case=operation.as_strategy(mode))
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # no shrinking: stay bounded
    )
    def run(case: Any) -> None:
        response = case.call_and_validate(base_url=url, headers=auth, checks=CHECKS, timeout=30)
        tally[response.status_code] += 1

    run()


def test_api_conforms_to_its_openapi(live_api: tuple[str, str]) -> None:
    """Every operation of the served /openapi.json: schema-valid requests, then invalid
    ones (which must be refused as documented, never with a server error).

    (schemathesis's ``from_fixture``/``parametrize`` pytest integration trips over pytest
    9's node ids, so this drives Hypothesis directly, one operation at a time, and
    reports every failing operation with the request that broke it.)
    """
    url, secret = live_api
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", timeout=10)
    _inbox_hooks(schema)
    auth = {"Authorization": f"Bearer {secret}"}
    failures: list[str] = []
    valid: Counter[int] = Counter()  # statuses of the schema-valid requests
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode, examples in MODES:
            positive = mode is schemathesis.GenerationMode.POSITIVE
            try:
                _fuzz(operation, mode, examples, url, auth, valid if positive else Counter())
            except Unsatisfiable:
                # No invalid request exists for an operation without inputs (/healthz).
                assert not positive, operation.path
            except (Exception, BaseExceptionGroup) as exc:  # one failure hides no other
                label = f"{operation.method.upper()} {operation.path} ({mode.value})"
                failures.append(f"{label}:\n{exc}")
    assert operations >= 15, f"only {operations} operations in /openapi.json"
    assert not failures, "\n\n".join(failures)
    # The token works: plenty of valid requests got past auth into the engine.
    assert sum(n for status, n in valid.items() if 200 <= status < 300) >= 100, valid
    assert valid[401] == 0, valid
