"""The Celery application. Configuration lives in Django settings under the CELERY_ namespace."""

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

app = Celery("memoryhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def warm_up_embeddings(**_) -> None:
    """The local model loads here, in the main process before the prefork pool starts: the pool's
    processes share it and no indexing job pays the load (MEMORYHUB_EMBEDDING_WARM_UP)."""
    from indexing.embeddings import provider_warm_up

    provider_warm_up()


@worker_init.connect
def lower_priority(**_) -> None:
    """Indexing yields the CPU to searches (MEMORYHUB_WORKER_NICE): set before the pool forks, so every
    worker process inherits it."""
    from django.conf import settings

    if settings.MEMORYHUB_WORKER_NICE:
        os.nice(settings.MEMORYHUB_WORKER_NICE)
