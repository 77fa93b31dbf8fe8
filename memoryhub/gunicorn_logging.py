"""Gunicorn's access log without the secret an MCP URL carries.

Plain-text logs (MEMORYHUB_LOG_FORMAT=text, for development) keep gunicorn's access line, which prints
the request's raw path. An MCP client that cannot send a header puts its agent token in the URL
(``/mcp/<token>``, integrations/mcp.py), so that line wrote the token to the log. This logger writes
``/mcp/<token>`` in its place, in the request line, the path and the referrer. (JSON logs have no access
line: memoryhub.observability logs each request by its route, never its path.)
"""

import re

from gunicorn.glogging import Logger

# The token part of an MCP URL (memoryhub/urls.py, route "mcp-url"), and anything the same shape that a
# mistyped URL holds: a 404 must not log a token either.
MCP_URL_TOKEN = re.compile(r"(/mcp/)[^/?#\s\"]+")
REDACTED = r"\1<token>"


class AccessLogger(Logger):
    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        for key in ("r", "U", "f"):  # request line, path, referrer
            if isinstance(atoms.get(key), str):
                atoms[key] = MCP_URL_TOKEN.sub(REDACTED, atoms[key])
        return atoms
