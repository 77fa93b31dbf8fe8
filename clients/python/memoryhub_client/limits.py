"""The push's defaults, in a module of their own so that ``memoryhub-client --help`` shows them
without importing the push machinery (start-up time)."""

# The server's defaults (MEMORYHUB_MAX_FILE_BYTES); a server with a lower limit answers 413 and says so.
DEFAULT_MAX_FILE_BYTES = 5 * 1024 * 1024
DEFAULT_BATCH_FILES = 500
DEFAULT_BATCH_BYTES = 8 * 1024 * 1024  # JSON body per upload request; the server accepts 64 MB by default
DEFAULT_MAX_SYNC_FILES = 10_000  # the server's MEMORYHUB_MAX_SYNC_FILES default
PROGRESS_MINIMUM_FILES = 200  # smaller pushes finish before a bar would be readable
