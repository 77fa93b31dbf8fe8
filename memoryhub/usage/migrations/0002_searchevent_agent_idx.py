"""An index of each agent's search rows: deleting an agent deletes its rows (Django's cascade,
``DELETE … WHERE agent_id IN …``), which without it read the whole table, two days of every agent's
searches, inside the deletion's transaction. Built CONCURRENTLY, so searches keep writing their rows
while it builds (the migration runs outside a transaction)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("usage", "0001_initial"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="searchevent",
            index=models.Index(fields=["agent", "created_at"], name="searchevent_agent_idx"),
        ),
    ]
