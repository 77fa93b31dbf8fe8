from django.apps import AppConfig
from django.db.models.signals import post_migrate


class IndexingConfig(AppConfig):
    name = "indexing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from indexing.vector_index import ensure_vector_index_after_migrate

        post_migrate.connect(ensure_vector_index_after_migrate, sender=self)
