"""Each agent's lexemes count the chunks that hold them, and its state the chunks read: keyword expansion's
gate reads a question word's IDF there (search/expansion.py). The agents' words already stored were read
without counting, so every agent's chunks are read again from the start (the words and their vectors
stay: nothing is embedded twice)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0008_agent_deletion_requested_at'),
        ('search', '0004_memory_words'),
    ]

    operations = [
        migrations.AddField(
            model_name='memorywordsstate',
            name='chunks',
            field=models.BigIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name='memorywordsstate',
            name='lexemes',
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.CreateModel(
            name='MemoryLexeme',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('lexeme', models.TextField()),
                ('chunks', models.PositiveIntegerField()),
                ('agent', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='agents.agent')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('agent', 'lexeme'), name='memory_lexeme_agent_lexeme_uniq')],
            },
        ),
        migrations.RunSQL("UPDATE search_memorywordsstate SET last_chunk_id = 0", reverse_sql=migrations.RunSQL.noop),
    ]
