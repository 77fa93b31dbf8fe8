"""The database backend used when DATABASE_URL is not set: Django's PostgreSQL backend, with the
embedded server (memoryhub/embedded_postgres.py) started on the first connection, not at import.

Importing the settings must not start a server (``manage.py help``, ``check``, a test collecting
modules, a linter importing the project would each start one). So the settings name the database and
the data folder only; the first connection a process opens starts the server when it is not running
and fills in the socket folder, port and user, which later connections of the process reuse (without a
connection of its own to a server that runs: embedded_postgres.connection_params). The rest is
the backend of DATABASE_URL (memoryhub/postgresql): a pooled process (`make run`) answers at once while
its database is known to be down.
"""

from pathlib import Path

from memoryhub.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        if not self.settings_dict.get("HOST"):
            from memoryhub import embedded_postgres

            # Django's error for a server that does not answer, as for any connection (a 503, not a 500): this
            # runs outside Django's own wrapping when a pool is first made.
            with self.wrap_database_errors:
                params = embedded_postgres.connection_params(
                    Path(self.settings_dict["EMBEDDED_DATA_DIR"]),
                    connect_timeout=self.settings_dict["OPTIONS"].get("connect_timeout"),
                )
            self.settings_dict.update(HOST=params["host"], PORT=str(params["port"]), USER=params["user"])
        return super().get_connection_params()
