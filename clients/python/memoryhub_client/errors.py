"""The client's two kinds of failure, each with its exit code; neither is ever shown as a traceback."""


class ConfigError(Exception):
    """Bad flags or environment (no token, a malformed URL, no such directory): exit code 2."""


class ServerError(Exception):
    """The server refused the request or could not be reached: exit code 1."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = retry_after
