"""Indexing tests run tasks eagerly (in the test process) with the counting fake embedding provider.

``indexed()`` runs the on-commit callbacks of its block, which is where uploads enqueue their jobs:
``with indexed(): alice.client.put(...)`` returns with the file indexed (or failed).
"""

import pytest



@pytest.fixture(autouse=True)
def eager_tasks(eager_tasks):  # tests/conftest.py's, for every test here
    return eager_tasks


@pytest.fixture
def indexed(django_capture_on_commit_callbacks):
    return lambda: django_capture_on_commit_callbacks(execute=True)
