"""The documentation keeps up with the code: every CLI command and option, HTTP route,
header and status, ``serve`` option and configuration key is in the site (``docs/``);
the README starts with its two commands, and its tour runs as written."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import typing
from collections.abc import Iterator
from pathlib import Path

import click
import httpx
import pytest
from fastapi.testclient import TestClient

import oncebox
from oncebox.engine import config, destinations
from oncebox.formats import json_codec, sp_api, webhook_config
from oncebox.store import SQLITE_OPTIONS
from oncebox.surfaces.cli import cli
from oncebox.surfaces.http import create_app
from oncebox.surfaces.http.auth import NEEDS
from openapidoc import openapi_document
from serveproc import free_port

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text("utf-8")
_HEADING = re.compile(r"^(#{1,6}) (.+?)(?: \{#[^}]*\})?$", re.MULTILINE)


def page(name: str) -> str:
    return (DOCS / name).read_text("utf-8")


def section(text: str, title: str) -> str:
    """The body under the heading ``title`` (backticks aside), up to the next heading of
    the same or a higher level; empty if there is no such heading."""
    fences = [m.span() for m in re.finditer(r"^```.*?^```", text, re.MULTILINE | re.DOTALL)]
    headings = [h for h in _HEADING.finditer(text) if not any(a < h.start() < b for a, b in fences)]
    for n, match in enumerate(headings):
        if match.group(2).replace("`", "") == title:
            level = len(match.group(1))
            end = next((h.start() for h in headings[n + 1 :] if len(h.group(1)) <= level), None)
            return text[match.end() : end]
    return ""


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        yield f"{prefix}{name}", command
        if isinstance(command, click.Group):
            yield from commands(command, f"{prefix}{name} ")


def options(command: click.Command) -> list[str]:
    """Each option's long names (``--lease-token``), ``--help`` aside."""
    return [
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts + param.secondary_opts
        if name.startswith("--") and name != "--help"
    ]


# -- the command line ------------------------------------------------------------------------
def test_every_command_has_a_section_in_the_cli_page() -> None:
    cli_page = page("cli.md")
    missing = [name for name, _ in commands(cli) if not section(cli_page, name)]
    assert missing == []


def test_every_option_is_in_its_commands_section() -> None:
    cli_page = page("cli.md")
    missing = [
        f"{name} {option}"
        for name, command in commands(cli)
        for option in options(command)
        if option not in section(cli_page, name)
    ]
    missing += [o for o in options(cli) if o not in section(cli_page, "Global options")]
    assert missing == []


def test_every_serve_option_has_its_default_in_the_configuration_page() -> None:
    table = section(page("configuration.md"), "serve options")
    serve = cli.commands["serve"]
    row = re.compile(r"^\| `(--[a-z-]+)` \| ([^|]+) \|", re.MULTILINE)
    rows = {m.group(1): m.group(2) for m in row.finditer(table)}
    assert sorted(rows) == sorted(options(serve))
    plain = [p for p in serve.params if isinstance(p, click.Option) and not p.is_flag]
    for param in plain:
        default = param.default
        if isinstance(default, int | float | str):  # not --workers: the CPUs there are
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            assert shown in rows[param.opts[0]], param.opts[0]


def test_every_option_default_is_in_its_commands_section() -> None:
    """``--batch 500``, ``--limit 100``: a default the page names is the one the code has
    (``--after``, which starts at the beginning, aside)."""
    wrong = []
    for name, command in commands(cli):
        text = section(page("cli.md"), name)
        for param in command.params:
            default = param.default
            if not isinstance(param, click.Option) or param.is_flag or param.opts[0] == "--after":
                continue
            if isinstance(default, bool) or not isinstance(default, int | float | str):
                continue
            shown = {str(default), f"{default:g}" if isinstance(default, float) else str(default)}
            before = rf"{re.escape(param.opts[0])}`? (?:\[|\((?:default:? )?`?)?"
            if not any(re.search(rf"{before}{re.escape(s)}(?![\d.])", text) for s in shown):
                wrong.append(f"{name} {param.opts[0]} {default}")
    assert wrong == []


# -- configuration ---------------------------------------------------------------------------
def documented_keys(title: str) -> set[str]:
    table = section(page("configuration.md"), title)
    return set(re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE))


def test_every_configuration_key_is_documented() -> None:
    assert {"store", "inboxes"} <= documented_keys("The TOML file")
    assert set(config._KEYS) <= documented_keys("Inboxes")  # what the loader takes
    assert set(webhook_config._KEYS) <= documented_keys("Webhook")


def test_every_destination_key_is_documented() -> None:
    table = section(page("forwarding.md"), "Destinations")
    keys = set().union(*destinations._KEYS.values())
    assert sorted(k for k in keys if f"| `{k}` |" not in table) == []


def test_every_sqlite_url_option_is_documented() -> None:
    """Every option a ``sqlite:///...?`` URL is taken with, the harness's own included:
    one that changes what a commit syncs must not be there unsaid."""
    store = section(page("configuration.md"), "The store")
    assert [o for o in SQLITE_OPTIONS if f"| `{o}` |" not in store] == []


def test_every_codec_setting_is_documented() -> None:
    codecs = page("codecs.md")
    for codec, settings in (("json", json_codec.SETTINGS), ("sp-api-listing", sp_api.SETTINGS)):
        table = section(codecs, codec)
        assert {s for s in settings if f"| `{s}` |" not in table} == set(), codec
        assert all(f"`{s}`" in section(page("configuration.md"), "Inboxes") for s in settings)


# -- the library -----------------------------------------------------------------------------
def library_calls(text: str) -> Iterator[tuple[str, list[str]]]:
    """Each ``box.NAME(...)`` the page spells in code, with its arguments as written
    (split at the commas of its own parentheses, not those of an argument's)."""
    for match in re.finditer(r"`box\.(\w+)\(", text):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        arguments, depth, current = [], 0, ""
        for char in text[match.end() : end - 1]:
            depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
            if char == "," and depth == 0:
                arguments.append(current.strip())
                current = ""
            else:
                current += char
        yield match.group(1), [a for a in [*arguments, current.strip()] if a]


def test_every_library_call_names_its_parameters_and_defaults() -> None:
    """A keyword the page shows (``prove_consistency(old_size, new_size)``) is one a
    caller can pass, and a default it gives is the one the method has."""
    wrong = []
    for name, arguments in library_calls(page("library.md")):
        method = getattr(oncebox.Oncebox, name, None)
        if method is None:
            wrong.append(name)
            continue
        parameters = {
            p.name: p
            for f in (method, *typing.get_overloads(method))
            for p in inspect.signature(f).parameters.values()
        }
        for argument in arguments:
            keyword, _, default = (part.strip() for part in argument.partition("="))
            if not re.fullmatch(r"[a-z_]+", keyword):
                continue  # *, **facts, a LogFilter(...) spelled out
            if keyword not in parameters:
                wrong.append(f"{name}({keyword})")
                continue
            real = parameters[keyword].default
            real = str(real) if isinstance(real, str) else real  # an enum's value: "newest"
            if default and default.replace('"', "'") != repr(real):
                wrong.append(f"{name}({keyword}={default})")
    assert wrong == []


# -- the HTTP API ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def app() -> Iterator[object]:
    box = oncebox.open("sqlite:///:memory:")
    yield create_app(box)
    box.close()


def routes(found: list[object]) -> Iterator[tuple[str, str]]:
    """(method, path) for every route, into included routers and mounts."""
    for route in found:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from routes(inner.routes)
            continue
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", getattr(route, "path", ""))
        methods = getattr(route, "methods", None)
        if methods is None:  # a mount (the console's static files)
            yield "MOUNT", path
        for method in sorted(methods or ()):
            if method != "HEAD":
                yield method, path


def test_every_route_is_documented(app: object) -> None:
    api, console = page("http.md"), page("console.md")
    missing = []
    for method, path in routes(app.routes):  # type: ignore[attr-defined]
        where = console if path.startswith("/console") else api
        spelled = f"`{path}/" if method == "MOUNT" else f"`{method} {path}"
        # Followed by its end, or by a query it takes: not a longer path.
        if not re.search(re.escape(spelled) + r"[`?\[]", where):
            missing.append(spelled)
    assert missing == []


# A route whose row says it takes another's filters ("the same filters"): a query
# parameter it shares with that route, spelled the same, may be named in that row alone.
LETTERS = "/v1/inboxes/{inbox}/dead-letters"
SHARED_FILTERS = {
    f"GET {LETTERS}/lines": f"GET {LETTERS}",
    f"GET {LETTERS}/preview": f"GET {LETTERS}",
    f"POST {LETTERS}/replay": f"GET {LETTERS}",
    f"POST {LETTERS}/archive": f"GET {LETTERS}",
    "POST /v1/inboxes/{inbox}/quarantine/resolve": "GET /v1/inboxes/{inbox}/quarantine/preview",
}


def test_every_query_parameter_is_in_its_routes_row() -> None:
    rows = {
        f"{m.group(1)} {m.group(2)}": m.group(0)
        for m in re.finditer(r"^\| `(\w+) ([^`?]+)[`?].*$", section(page("http.md"), "Routes"),
                             re.MULTILINE)
    }  # fmt: skip
    spec = openapi_document()
    query = {
        f"{method.upper()} {path}": {p["name"]: p["schema"] for p in op.get("parameters", [])
                                     if p["in"] == "query"}
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    }  # fmt: skip
    missing = []
    for route, parameters in query.items():
        base = SHARED_FILTERS.get(route, route)
        for name, schema in parameters.items():
            named = rf"(?<![\w-]){re.escape(name)}(?![\w-])"
            if re.search(named, rows[route]):
                continue
            if base != route and query[base].get(name) == schema and re.search(named, rows[base]):
                continue
            missing.append(f"{route} {name}")
    assert missing == []


def test_every_routes_scope_is_the_one_it_needs(app: object) -> None:
    """The routes table's scope column says what each route's ``@needs`` asks for."""
    table = section(page("http.md"), "Routes")
    row = re.compile(r"^\| `(\w+) ([^`?]+)[`?][^|]*\| ([^|]+) \|", re.MULTILINE)
    scopes = {f"{m.group(1)} {m.group(2)}": m.group(3) for m in row.finditer(table)}

    def endpoints(found: list[object]) -> Iterator[object]:
        for route in found:
            inner = getattr(route, "original_router", None)
            yield from endpoints(inner.routes) if inner is not None else [route]

    wrong = []
    for route in endpoints(app.routes):  # type: ignore[attr-defined]
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", getattr(route, "path", ""))
        if path.startswith("/console") or not hasattr(route, "endpoint"):
            continue
        need = NEEDS.get(route.endpoint)
        scope = need.scope.value if need is not None and need.scope is not None else "none"
        if need is not None and need.also is not None:
            scope = f"{scope} and {need.also.value}"
        for method in sorted(set(getattr(route, "methods", ())) - {"HEAD"}):
            if not scopes.get(f"{method} {path}", "").startswith(scope):
                wrong.append(f"{method} {path}: {scope}")
    assert wrong == []


def test_every_header_and_status_is_documented() -> None:
    api, hooks = page("http.md"), page("webhooks.md")
    statuses = section(api, "Statuses")
    spec = openapi_document()
    missing = []
    for operation in (op for ops in spec["paths"].values() for op in ops.values()):
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "header" and f"`{parameter['name']}" not in api + hooks:
                missing.append(parameter["name"])
        for status, answer in operation["responses"].items():
            if f"| {status} |" not in statuses:
                missing.append(status)
            missing += [h for h in answer.get("headers", {}) if h not in api]
    assert sorted(set(missing)) == []


def test_every_metric_is_in_the_metrics_table() -> None:
    with oncebox.open("sqlite:///:memory:") as box:
        secret = box.create_token("scraper", ["*"], ["read"]).secret
        box.consumer("reader", "ussd")  # the consumers' series show once there is one
        with TestClient(create_app(box), headers={"Authorization": f"Bearer {secret}"}) as http:
            text = http.get("/metrics").text
    families = set(re.findall(r"^# TYPE (oncebox_\w+?)(?:_created)? ", text, re.MULTILINE))
    table = section(page("http.md"), "Metrics")
    assert families and sorted(f for f in families if f"`{f}`" not in table) == []


# -- the README ------------------------------------------------------------------------------
def test_readme_starts_with_the_run_and_test_commands() -> None:
    head = README.split("\n\n", 2)[1]
    assert "`bash run.sh`" in head and "`bash test.sh`" in head
    ci = (Path(__file__).parent.parent / ".ci" / "run").read_text("utf-8")
    assert "exec bash test.sh" in ci


def test_readme_links_lead_somewhere() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links and [link for link in links if not (ROOT / link).exists()] == []


def tour() -> str:
    return section(README, "A five-minute tour")


def blocks(fence: str) -> list[str]:
    return re.findall(rf"```{fence}\n(.*?)```", tour(), re.DOTALL)


def tour_env(tmp_path: Path) -> dict[str, str]:
    """The shell of someone who ran ``source .venv/bin/activate``, in an empty directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("ONCEBOX_DB", "ONCEBOX_CONFIG")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_cli_tour(tmp_path: Path) -> str:
    [shell, _server, _client] = blocks("sh")
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", shell],
        cwd=tmp_path, env=tour_env(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_the_readme_library_tour_runs_as_written(tmp_path: Path) -> None:
    [script] = blocks("python")
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[:3] == [
        "accepted True",
        "duplicate conflict",
        "rejected bad_checksum",
    ]


@pytest.mark.slow
def test_the_readme_cli_tour_runs_as_written(tmp_path: Path) -> None:
    out = run_cli_tour(tmp_path)
    verdicts = [json.loads(line)["verdict"] for line in out.splitlines()[:4]]
    assert verdicts == ["accepted", "duplicate", "conflict", "rejected"]
    assert "Kakuma1,MED,3,1,6,2,3" in out  # the ledger: 3, where counting arrivals gives 6


@pytest.mark.slow
def test_the_readme_http_tour_runs_as_written(tmp_path: Path) -> None:
    if not shutil.which("curl"):
        pytest.skip("the README's HTTP tour needs curl")
    run_cli_tour(tmp_path)  # the tour's order: the CLI's store, then served
    [_shell, server, client] = blocks("sh")
    port = str(free_port())  # the one change: a port of its own, not 8080
    env = tour_env(tmp_path)
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(["bash", "-c", f"{server.strip()} --port {port}"], cwd=tmp_path,
                            env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "oncebox serve did not start"
            time.sleep(0.2)
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", client.replace(":8080/", f":{port}/")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    assert ran.returncode == 0, ran.stderr
    answers, text = [], ran.stdout.strip()
    while text:
        answer, end = json.JSONDecoder().raw_decode(text)
        answers.append(answer)
        text = text[end:].strip()
    assert [a["verdict"] for a in answers[:2]] == ["accepted", "duplicate"]
    assert [letter["reason"] for letter in answers[2]] == ["bad_checksum"]
