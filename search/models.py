"""Per-agent keyword statistics of large agents (search/keyword_stats.py), so a keyword search of an
agent with 100k chunks reads each query word's document frequency from a table instead of counting it."""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from agents.models import Agent


class KeywordAgentStats(models.Model):
    """Chunk count and average chunk length of one large agent when its term stats were refreshed."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, primary_key=True, related_name="keyword_stats")
    chunks = models.PositiveIntegerField()
    avg_tokens = models.FloatField()
    refreshed_at = models.DateTimeField()
    # The agent's largest chunk id when its terms' max_tf and min_tokens were last brought up to date
    # (keyword_stats_sync adds the chunks above it at each run; null: stats older than the bounds).
    last_chunk_id = models.BigIntegerField(null=True)


class KeywordTermStats(models.Model):
    """How many of the agent's chunks hold ``lexeme`` (its BM25 document frequency), as of the refresh."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    lexeme = models.TextField()
    df = models.PositiveIntegerField()
    # The most occurrences of the lexeme in one chunk, and the shortest chunk (token_count) holding it:
    # together they bound what the lexeme can add to a chunk's BM25 (null: stats older than them).
    max_tf = models.PositiveIntegerField(null=True)
    min_tokens = models.PositiveIntegerField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "lexeme"], name="keyword_term_agent_lexeme_uniq")]


class MemoryWord(models.Model):
    """One word of an agent's memory with its vector, for keyword expansion (search/expansion.py): a
    question's rare word also searches for the memory's words nearest to it in meaning."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    word = models.CharField(max_length=40)
    # provider:model:dimensions of ``embedding``; blank until the word is embedded (or after a model change
    # until it is embedded again).
    embedding_identity = models.CharField(max_length=255, blank=True)
    embedding = VectorField(null=True, blank=True)
    # The agent's words nearest to this one (search/expansion.py's ``nearest_words``), worked out once it is
    # embedded and again when a word near it is added; null: not worked out (a search looks them up).
    neighbours = ArrayField(models.CharField(max_length=40), null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "word"], name="memory_word_agent_word_uniq")]
        # The words the memory_words task has work on (search/expansion.py, _AGENTS_WITH_WORK_SQL).
        indexes = [models.Index(fields=["agent"], name="memory_word_unlisted_idx", condition=Q(neighbours__isnull=True))]


class MemoryWordsState(models.Model):
    """How far the agent's words have been read from its chunks (search/expansion.py)."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, primary_key=True, related_name="+")
    # The largest chunk id whose words were read: the next run reads the chunks written since.
    last_chunk_id = models.BigIntegerField(default=0)
    words = models.PositiveIntegerField(default=0)  # rows in MemoryWord for the agent
    chunks = models.BigIntegerField(default=0, db_default=0)  # chunks read, their lexemes counted
    lexemes = models.PositiveIntegerField(default=0, db_default=0)  # rows in MemoryLexeme for the agent
    # The model and settings the words' neighbours were worked out with (search/expansion.py,
    # ``neighbours_key``): when they change, every list is worked out again.
    neighbours_key = models.CharField(max_length=300, blank=True, default="", db_default="")
    # A file of the agent's was deleted, or edited so that words of its text went, since its words were last
    # checked: the next run counts its lexemes again and drops the words no chunk holds any more
    # (search/expansion.py, ``words_text_removed``).
    text_removed = models.BooleanField(default=False, db_default=False)


class MemoryLexeme(models.Model):
    """How many of the agent's chunks read (MemoryWordsState.chunks) hold ``lexeme`` (of the keyword
    index's configuration): its BM25 IDF, which gates keyword expansion before either search half runs
    (search/expansion.py)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    lexeme = models.TextField()
    chunks = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "lexeme"], name="memory_lexeme_agent_lexeme_uniq")]
