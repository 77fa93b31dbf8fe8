# Failed indexing attempts in a row, for the capped, backed-off retry of failed files.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('indexing', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='memoryfile',
            name='failures',
            field=models.PositiveIntegerField(default=0),
        ),
    ]
