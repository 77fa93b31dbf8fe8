"""Out-of-range client dates: repair the rows already stored, then let the database refuse new ones.

Before input was validated, a PUT or sync with ``mtime`` such as ``9999-12-31T23:59:59-14:00`` stored
a timestamp in year 10000, which Python cannot read: every page that listed the row failed. Such a
client mtime carries no usable information, so it is cleared (NULL: "unknown", as for a file pushed
without one; the search date filters then use the upload time). The repair runs in SQL, where the
value can still be compared, and reports how many rows it fixed.
"""

import datetime

from django.db import migrations, models

DATE_MIN = datetime.datetime(1900, 1, 1, tzinfo=datetime.timezone.utc)
DATE_MAX = datetime.datetime(2200, 1, 1, tzinfo=datetime.timezone.utc)


def clear_out_of_range_mtimes(apps, schema_editor):
    table = schema_editor.quote_name(apps.get_model("indexing", "MemoryFile")._meta.db_table)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET client_mtime = NULL WHERE client_mtime < %s OR client_mtime >= %s",
            [DATE_MIN, DATE_MAX],
        )
        if cursor.rowcount:
            print(f"\n  cleared {cursor.rowcount} out-of-range client mtime(s)", end="")


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0001_initial"),
        ("indexing", "0002_memoryfile_failures"),
    ]

    operations = [
        migrations.RunPython(clear_out_of_range_mtimes, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="memoryfile",
            constraint=models.CheckConstraint(
                condition=models.Q(client_mtime__isnull=True)
                | models.Q(client_mtime__gte=DATE_MIN, client_mtime__lt=DATE_MAX),
                name="memoryfile_client_mtime_range",
            ),
        ),
    ]
