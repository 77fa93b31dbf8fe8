"""Whether an agent's text was removed since its memory words were last checked (search/expansion.py,
``words_text_removed``): a flag set when a file is deleted, so that the ``memory_words`` task drops the
words of its text at its next run, not only once the chunk count drifts. One row per agent; the column has
a database default, so adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('search', '0007_memory_word_neighbours'),
    ]

    operations = [
        migrations.AddField(
            model_name='memorywordsstate',
            name='text_removed',
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
