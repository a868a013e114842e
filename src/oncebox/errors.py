"""One error root for oncebox, with branches a caller can act on.

An error's default message is its class docstring, so ``raise StorageUnavailable()``
still says something useful; pass a message to add the specifics.
"""

from __future__ import annotations


class OnceboxError(Exception):
    """oncebox failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(OnceboxError):
    """The configuration is not valid."""


class UnknownInbox(ConfigError):
    """No inbox of that name is declared."""


class StorageError(OnceboxError):
    """The store failed; nothing was decided, so the delivery must not be acknowledged."""


class SchemaBehind(StorageError):
    """The store's schema is older than this version of oncebox, and the store was opened
    only to read: reading never upgrades it (a command that writes, or ``oncebox
    migrate``, does)."""

    def __init__(self, message: str | None = None, missing: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.missing = missing


class StorageUnavailable(StorageError):
    """The store is busy or unreachable; retrying later is safe."""

    retryable = True


class RetryTransaction(StorageUnavailable):
    """Another writer changed what this transaction decided against; the store runs the
    work again from the start (a bounded number of times) before giving up."""


class ReadTimedOut(StorageUnavailable):
    """A read (a listing, a search) ran past its time budget and was stopped; nothing
    changed. Narrow it, or retry when the store is less busy."""


class UnsafeSQLite(StorageError):
    """This SQLite library has a known corruption bug and is refused."""


class ApplyError(OnceboxError):
    """An inbox's apply step failed; its transaction rolled back and nothing was stored.

    ``index`` is the failing delivery's place in its batch, or None where a step that
    takes a whole batch at once failed and cannot say which one it was. ``inbox`` names
    the inbox, so a surface can say what failed without repeating why: the message may
    hold the step's own words (a driver's, naming tables), which stay in the server's
    log and out of any answer to a client.
    """

    def __init__(
        self, message: str | None = None, *, index: int | None = 0, inbox: str = ""
    ) -> None:
        super().__init__(message)
        self.index = index
        self.inbox = inbox


class NotFound(OnceboxError):
    """No such item."""


class TokenExpired(OnceboxError):
    """The API token has expired; it is refused everywhere from its expiry on."""


class InvalidOperation(OnceboxError):
    """The operation does not apply to the item in its current state."""


class InvalidQuery(InvalidOperation):
    """The read asks for what no read can give (a page after a record not there, a key
    no delivery can have)."""


class UnknownValue(InvalidOperation):
    """A filter or a setting names a value that is not one of the known ones."""

    def __init__(self, message: str, *, known: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.known = known


class WrongKey(OnceboxError):
    """A read result names another work key than the ticket it completes."""


class InvalidDocument(OnceboxError):
    """A read document is not a bounded, strict JSON object."""

    def __init__(self, message: str | None = None, *, reason: str = "bad_document") -> None:
        super().__init__(message)
        self.reason = reason


class ReadFailed(OnceboxError):
    """A reader could not read the work key; the key stays dirty."""
