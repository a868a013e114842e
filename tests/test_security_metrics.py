"""Issue 13, item 7: a token for some inboxes sees only those inboxes' series.

Before the fix a reader token for one inbox saw the unlabelled process-wide series too:
the group-commit counters and the seal lag (every inbox's traffic) and the request
latency of every route, the console's included. Those now go only to tokens for every
inbox (``*``). ``Accept: application/openmetrics-text`` gets OpenMetrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as text_families

import oncebox
from conftest import INBOXES
from httpserver import serving
from oncebox import Oncebox
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.http import create_app
from openapidoc import openapi_document

PROCESS_WIDE = (
    "oncebox_seal_lag",
    "oncebox_group_commit_transactions",
    "oncebox_group_commit_deliveries",
    "oncebox_http_request_duration_seconds",
)
OPENMETRICS = "application/openmetrics-text"


@dataclass
class Served:
    box: Oncebox
    url: str

    def scrape(self, secret: str, accept: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {secret}"}
        if accept:
            headers["Accept"] = accept
        response = httpx.get(f"{self.url}/metrics", headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response


# One service for the module: each test makes its own token (under its own name) and
# asserts only on which series a scrape shows, never on a count, so none reads another's.
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("metrics") / "metrics.db"
    box = oncebox.open(f"sqlite:///{db}", inboxes=INBOXES)
    with serving(create_app(box)) as url:
        writer = box.create_token("writer", ["*"], ["write"]).secret
        headers = {"Authorization": f"Bearer {writer}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            for seq in (1, 2):
                frame = make_frame(seq, "Kakuma1", "MED", 3, 86).encode()
                sent = http.post(
                    "/v1/inboxes/ussd/deliveries",
                    content=frame,
                    headers={"Oncebox-Key": f"r{seq}-{seq}"},
                )
                assert sent.status_code == 201
            http.get("/console/signin")  # a console route, timed like any other
        yield Served(box, url)
    box.close()


def names(text: str) -> set[str]:
    return {family.name for family in text_families(text)}


def test_a_token_for_one_inbox_sees_no_process_wide_series(served: Served) -> None:
    secret = served.box.create_token("ussd-reader", ["ussd"], ["read"]).secret
    text = served.scrape(secret).text
    found = names(text)
    assert "oncebox_deliveries" in found and 'inbox="ussd"' in text
    assert 'inbox="listing"' not in text and 'inbox="feed"' not in text
    leaked = [name for name in PROCESS_WIDE if name in found]
    assert leaked == [], text
    assert "/console" not in text and "route=" not in text
    # An explicit list of every inbox declared today is still not every inbox.
    listed = served.box.create_token("listed", ["ussd", "listing", "feed"], ["read"]).secret
    assert not [name for name in PROCESS_WIDE if name in names(served.scrape(listed).text)]


def test_a_token_for_every_inbox_sees_everything(served: Served) -> None:
    secret = served.box.create_token("all-reader", ["*"], ["read"]).secret
    text = served.scrape(secret).text
    found = names(text)
    assert all(name in found for name in PROCESS_WIDE), found
    assert 'route="/console/signin"' in text
    assert 'inbox="ussd"' in text and 'inbox="listing"' in text


def test_openmetrics_when_asked(served: Served) -> None:
    for scope, inboxes in (("all", ["*"]), ("one", ["ussd"])):
        secret = served.box.create_token(f"om-{scope}", inboxes, ["read"]).secret
        response = served.scrape(secret, accept=f"{OPENMETRICS}; version=1.0.0")
        assert response.headers["content-type"].startswith(OPENMETRICS)
        assert response.text.endswith("# EOF\n")
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
        assert families["oncebox_deliveries"].type == "counter"
        assert ("oncebox_seal_lag" in families) is (scope == "all")
    plain = served.scrape(secret)
    assert plain.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# EOF" not in plain.text


def test_the_openapi_document_declares_both_media_types() -> None:
    schema = openapi_document()
    content = schema["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert "text/plain" in content and OPENMETRICS in content
