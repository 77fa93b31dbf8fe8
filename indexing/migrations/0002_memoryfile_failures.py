# Failed indexing attempts in a row, for the capped, backed-off retry of failed files (a database default,
# so rows written with COPY or raw SQL get 0 too).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('indexing', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='memoryfile',
            name='failures',
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
    ]
