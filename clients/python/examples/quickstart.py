"""The README's example: write a note, wait until it is searchable, search it, run a tool.

    MEMORYHUB_URL=http://127.0.0.1:8000 MEMORYHUB_TOKEN=mh_... python examples/quickstart.py
"""

import os
import time

from memoryhub_client.api import ApiClient

hub = ApiClient(url=os.environ["MEMORYHUB_URL"], token=os.environ["MEMORYHUB_TOKEN"])

hub.file_put(
    path="memory/2026-03-01.md",
    content="# 2026-03-01\n\n## Decisions\nWe chose Postgres for the billing service.\n",
    attributes={"project": "billing"},
)
hub.file_append(path="memory/2026-03-01.md", text="Dana owns the migration.")
while hub.status()["pending"]:  # indexing runs in the background; usually well under a second
    time.sleep(0.2)

answer = hub.search("which database did we choose?", filters={"type": "eq", "key": "project", "value": "billing"})
for result in answer["results"]:
    print(f"{result['path']}#L{result['start_line']}-L{result['end_line']} ({result['score']:.2f}): {result['snippet']}")

# The same search as a model's tool call would run it (tool_definitions() gives the schemas).
print(hub.tool_run("memory_search", {"query": "who owns the migration?"})["content"])
