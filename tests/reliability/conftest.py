"""Reliability tests: what the service does with hostile input and failing dependencies."""

import pytest


@pytest.fixture(autouse=True)
def eager_tasks(eager_tasks):  # tests/conftest.py's: indexing runs in the test process, on commit
    return eager_tasks


@pytest.fixture(autouse=True)
def fake_embeddings(fake_embeddings):
    return fake_embeddings
