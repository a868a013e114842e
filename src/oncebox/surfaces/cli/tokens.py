"""API tokens for the HTTP service: create, list, show, revoke."""

from __future__ import annotations

import click

from oncebox.surfaces import listing
from oncebox.surfaces.cli.base import AFTER, Context, cli, emit, fail
from oncebox.surfaces.cli.output import JSON, columns, show, show_pages

TOKENS = columns("id", "name", "inboxes", "scopes", "hmac", ("created", "created_at"),
                 ("expires", "expires_at"), ("last used", "last_used_at"),
                 ("revoked", "revoked_at"))  # fmt: skip


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
    type=click.Choice(["read", "write", "operator", "admin"]),
    help="Repeat; default write. operator implies read; admin implies operator (for '*').",
)
@click.option("--hmac", "with_hmac", is_flag=True, help="Also require HMAC-signed requests.")
@click.option(
    "--expires", metavar="WHEN", help="Expire after a duration (30d, 12h) or at an ISO 8601 time."
)
@click.pass_obj
def token_create(
    obj: Context,
    name: str,
    inboxes: tuple[str, ...],
    scopes: tuple[str, ...],
    with_hmac: bool,
    expires: str | None,
) -> None:
    """Create a token; prints its secret (and HMAC key) once.

    Example: oncebox token create gateway-1 --inbox ussd --scope write --hmac --expires 90d
    """
    chosen = list(scopes) or ["write"]
    created = obj.box.create_token(name, list(inboxes), chosen, hmac=with_hmac, expires=expires)
    emit(created.to_dict())


@token.command("list")
@click.option("--after", default=0, type=AFTER, help="Page on: ids after this.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1))
@JSON
@click.pass_obj
def token_list(obj: Context, after: int, limit: int) -> None:
    """Tokens in id order with their inboxes, scopes and times (ISO 8601), never the
    secrets; a page at a time (--after the last id shown), each inbox list cut to its
    first 512 characters (``cut`` says so).

    Example: oncebox token list --after 100 --limit 100
    """
    show_pages(listing.token_pages(obj.reader, limit, after), TOKENS)


@token.command("show")
@click.argument("name")
@JSON
@click.pass_obj
def token_show(obj: Context, name: str) -> None:
    """One token whole, every inbox it names included (a listing cuts long lists): the
    live token NAME, else the newest that was called NAME, else the token with that id.

    Example: oncebox token show gateway-1
    """
    found = obj.reader.token(name)
    if found is None:
        fail(f"no token named {name!r}, nor with that id")
    show(found.to_dict(), title=f"token {found.id}")


@token.command("revoke")
@click.argument("name")
@click.pass_obj
def token_revoke(obj: Context, name: str) -> None:
    """Revoke the live token NAME (or its id); it is refused from now on."""
    obj.box.revoke_token(name)
    emit({"revoked": name})
