import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("agents", "0002_teams")]

    operations = [
        migrations.AlterField(
            model_name="agent",
            name="team",
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="agents", to="agents.team"),
        ),
    ]
