"""Replace the global HNSW index of indexing/vector_index.py by per-agent ones (search/vector_index.py).

The global index is useless once a query is filtered to one agent (pgvector#259); per-agent partial
indexes are built in the background by the `vector_indexes` task, and searches are exact meanwhile.

Vectors and tsvectors are kept in the row (STORAGE MAIN) rather than TOASTed out of line: every search
reads them for each candidate, and a TOAST lookup per row doubles the cost of an exact scan. Postgres
still moves them out when a row cannot fit in a page otherwise; rows already written keep their layout.
"""

from django.db import migrations

DROP_GLOBAL_INDEXES = """
DO $$
DECLARE index_name text;
BEGIN
    FOR index_name IN SELECT relname FROM pg_class WHERE relkind = 'i' AND relname LIKE 'chunk\\_embedding\\_hnsw\\_%' LOOP
        EXECUTE format('DROP INDEX IF EXISTS %I', index_name);
    END LOOP;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("indexing", "0001_initial")]

    operations = [
        migrations.RunSQL(DROP_GLOBAL_INDEXES, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(
            "ALTER TABLE indexing_chunk ALTER COLUMN embedding SET STORAGE MAIN, "
            "ALTER COLUMN search_vector SET STORAGE MAIN",
            reverse_sql="ALTER TABLE indexing_chunk ALTER COLUMN embedding SET STORAGE EXTERNAL, "
            "ALTER COLUMN search_vector SET STORAGE EXTENDED",
        ),
    ]
