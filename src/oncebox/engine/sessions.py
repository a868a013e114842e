"""Operator console sessions, kept on the server.

The console's cookie holds a random session id and nothing else: never a credential.
The store keeps the id's SHA-256 (so a leaked database holds no usable session), the
token the session belongs to and its expiry on the server clock. So the cookie's holder
cannot stretch its age (there is no age in it to rewrite), signing out ends the session
for every copy of the cookie, and revoking the token ends all of its sessions at once:
the lookup only finds a session whose token is live, and revocation drops its rows.

Who may sign in is decided here too (:func:`refusal`): a token with the ``read`` scope
(which ``operator`` and ``admin`` imply) that does not sign its requests (a browser cannot
sign, and letting such a token in would drop the protection its owner asked for). What
a session may do follows from its token: only an operator's acts (:attr:`Session.may_act`),
only an admin's manages tokens (:attr:`Session.may_manage_tokens`). A token's expiry
ends its sessions: the lookup finds none past it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from oncebox.engine.tokens import ALL_INBOXES, Scope, Token, from_row
from oncebox.store.base import Access, Store

SESSION_SECONDS = 8 * 3600
_ID = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Session:
    """A live console session: whose it is, its forms' CSRF value, when it ends."""

    token: Token
    csrf: str
    expires_at: float

    @property
    def may_act(self) -> bool:
        """Whether any form that changes something is this session's to send: a
        read-only session (a ``read`` token) sees everything its inboxes hold, and acts
        on nothing."""
        return self.token.has(Scope.OPERATOR)

    @property
    def may_manage_tokens(self) -> bool:
        return self.token.has(Scope.ADMIN)

    @property
    def may_verify_log(self) -> bool:
        """Whether the whole log's verify is this session's to run: it replays every
        inbox's entries, and a broken log's answer names records of any inbox, so only
        an operator of every inbox (``*``)."""
        return self.may_act and ALL_INBOXES in self.token.inboxes


def refusal(token: Token) -> str | None:
    """Why this token may not sign in to the console, or None."""
    if not token.has(Scope.READ):
        return "this token lacks the read scope the console needs"
    if token.signs:
        return "this token signs its requests (HMAC); a browser cannot, use an unsigned one"
    return None


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("ascii")).digest()


def _csrf(session_id: str) -> str:
    """The session's CSRF value: derived from its secret id, so it cannot be computed
    without the cookie, and another session's value does not fit this one."""
    return hmac.new(session_id.encode("ascii"), b"oncebox-console-csrf", "sha256").hexdigest()


class Sessions:
    """Console sessions in ``store``, each lasting ``lifetime`` seconds of server clock."""

    def __init__(self, store: Store, lifetime: float = SESSION_SECONDS) -> None:
        self._store = store
        self.lifetime = lifetime

    def open(self, token: Token) -> str:
        """A new session for ``token`` (one :func:`refusal` let in): the cookie's value."""
        if refusal(token) is not None:
            raise ValueError(f"token {token.name!r} may not sign in to the console")
        session_id = secrets.token_urlsafe(32)

        def keep(tx: Access) -> None:
            now = tx.now()
            tx.forget_sessions(now)
            tx.insert_session(_digest(session_id), token.id, now, now + self.lifetime)

        self._store.atomic(keep)
        return session_id

    def find(self, session_id: str) -> Session | None:
        """The live session with this id; None for an unknown, ended or expired one, or
        one whose token was revoked."""
        if not _ID.fullmatch(session_id):
            return None
        with self._store.reading() as tx:
            row = tx.session_token(_digest(session_id), tx.now())
        if row is None:
            return None
        token = from_row(row)
        if refusal(token) is not None:
            return None
        return Session(token, _csrf(session_id), row.session_ends)

    def end(self, session_id: str) -> None:
        """Sign out: the session is gone for every copy of its cookie."""
        if _ID.fullmatch(session_id):
            self._store.atomic(lambda tx: tx.end_session(_digest(session_id)))
