"""Each memory word's nearest words, worked out by the ``memory_words`` task (search/expansion.py), so a
search reads them instead of looking them up. Null until worked out: a search then looks them up as
before."""

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
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
    ]
