"""Every agent's memory words checked once more against its chunks, for the ASCII pieces of words with a
letter outside ASCII that were stored before search/expansion.py's ``WORD`` left them out ("réunion" gave
"union", "Müller" "ller", "café" "caf"). Marking each agent's row ``text_removed`` brings the recount the
``memory_words`` task makes after a deletion (``lexemes_recount``): a word none of whose lexemes a live chunk
holds is dropped, and those pieces are such words (the keyword index reads "réunion" as one lexeme). The
recount runs in the background task, agent by agent, not here: the migration itself is one UPDATE. A
recount took 0.73 s for an agent of 100,000 chunks (docs/search.md), and the task's runs take the agents
in turn within their time budget (search/tasks.py, MEMORY_WORDS_RUN_SECONDS)."""

from django.db import migrations


def recount_every_agents_words(apps, schema_editor):
    apps.get_model("search", "MemoryWordsState").objects.filter(text_removed=False).update(text_removed=True)


class Migration(migrations.Migration):

    dependencies = [
        ("search", "0008_memory_words_text_removed"),
    ]

    operations = [
        migrations.RunPython(recount_every_agents_words, migrations.RunPython.noop),
    ]
