"""python manage.py embedding_model_check — check now that the model behind the configured name still gives
the index's vectors (indexing/model_check.py); exits 1 when it does not."""

from django.core.management.base import BaseCommand, CommandError

from indexing.embedding_identity import configured_identity
from indexing.model_check import SAME_MODEL, model_check


class Command(BaseCommand):
    help = (
        "Embed a few indexed chunks' texts again and compare the vectors with the stored ones: 'same', "
        "'changed' (exit status 1: set MEMORYHUB_EMBEDDING_REVISION to embed the index again), 'unchecked' or 'failed'."
    )

    def handle(self, *args, **options):
        identity = configured_identity()
        if not identity.has_vectors:
            self.stdout.write("no embedding provider is configured: nothing to check")
            return
        outcome = model_check()
        line = f"{identity.key}: {outcome.state}"
        if outcome.compared:
            line += (
                f"; {outcome.differed} of {outcome.compared} chunks embedded by another model "
                f"(lowest cosine similarity {outcome.lowest_similarity:.4f}, the same model at {SAME_MODEL} or more)"
            )
        elif outcome.state == "unchecked":
            line += "; no indexed chunk with a vector of this identity to compare"
        if outcome.error:
            line += f"; the provider failed: {outcome.error}"
        if outcome.state == "changed":
            raise CommandError(
                f"{line}. Set MEMORYHUB_EMBEDDING_REVISION to a new value and restart to embed every chunk again."
            )
        self.stdout.write(line)
