"""Each memory word's nearest words, worked out by the ``memory_words`` task (search/expansion.py), so a
search reads them instead of looking them up. Null until worked out: a search then looks them up as
before. The partial index finds the words the task has work on without reading the others."""

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0008_agent_deletion_requested_at'),
        ('search', '0006_memory_word_partitioned'),
    ]

    operations = [
        migrations.AddField(
            model_name='memoryword',
            name='neighbours',
            field=django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=40), blank=True, null=True, size=None),
        ),
        migrations.AddField(
            model_name='memorywordsstate',
            name='neighbours_key',
            field=models.CharField(blank=True, db_default='', default='', max_length=300),
        ),
        migrations.AddIndex(
            model_name='memoryword',
            index=models.Index(condition=models.Q(('neighbours__isnull', True)), fields=['agent'], name='memory_word_unlisted_idx'),
        ),
    ]
