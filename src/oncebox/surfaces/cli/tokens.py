"""API tokens for the HTTP service: create, list, revoke."""

from __future__ import annotations

import click

from oncebox.surfaces.cli.base import Context, cli, emit
from oncebox.surfaces.cli.output import JSON, columns, show

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
@JSON
@click.pass_obj
def token_list(obj: Context) -> None:
    """Tokens with their inboxes, scopes and times (ISO 8601), never the secrets."""
    show([t.to_dict() for t in obj.reader.list_tokens()], TOKENS)


@token.command("revoke")
@click.argument("name")
@click.pass_obj
def token_revoke(obj: Context, name: str) -> None:
    """Revoke the live token NAME (or its id); it is refused from now on."""
    obj.box.revoke_token(name)
    emit({"revoked": name})
