"""MemoryHub's client for Python: the ``memoryhub-client`` command (push, watch, pull, search) and
``ApiClient``, one method per endpoint. Standard library and ``pathspec`` only; ``watch`` needs
``watchdog`` (the ``watch`` extra), the retrievers ``langchain-core`` or ``llama-index-core``.

Importing the package loads nothing else, so the command starts fast: ``from memoryhub_client.api
import ApiClient``.
"""

__version__ = "1.0.0"
