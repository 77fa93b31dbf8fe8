"""The errors the domain raises: what went wrong, in a stable code and a message for the client.

Services, selectors and pure functions (paths, attributes, search) raise these and know nothing of
HTTP. The API layer maps each kind to a status (``memoryhub/errors.py``, ``HTTP_STATUS``), the tools
and MCP hand the message back to the model, the management commands print it. One kind per way a
client has to react, not per cause: the ``code`` says the cause.

    raise NotFound(f"No file {path!r}.", code="not_found")
    raise PreconditionFailed("…", code="hash_mismatch", current_hash=current)   # details go in the body
"""


class DomainError(Exception):
    """A request the domain refuses. ``details`` are extra fields of the error body (e.g. current_hash)."""

    def __init__(self, message: str, *, code: str, **details) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details

    def __str__(self) -> str:
        return self.message


class InvalidInput(DomainError):
    """The request is malformed or a value is out of range (a bad path, hash, filter, date)."""


class Forbidden(DomainError):
    """The caller may not do this (a read-only token calling a write tool)."""


class NotFound(DomainError):
    """The thing named does not exist for this agent (another agent's things do not exist either)."""


class PreconditionFailed(DomainError):
    """A conditional write whose expected hash is not the current one; nothing was written."""


class TooLarge(DomainError):
    """A file, request or quota limit would be exceeded; the message names the limit."""


class UnsupportedContent(DomainError):
    """Content or a file type MemoryHub does not index (binary, not UTF-8, an unknown extension)."""


class Inconsistent(DomainError):
    """Well-formed values that contradict each other (``source: session`` for a ``.md`` file)."""


class Busy(DomainError):
    """A transient conflict (concurrent writers); the same request succeeds when tried again."""
