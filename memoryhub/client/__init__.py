"""The workspace sync client: ``python -m memoryhub.client`` or ``memoryhub-client``.

Standard library only (``watch`` also needs ``watchdog``: the ``client`` extra). See ``cli.py``.
"""
