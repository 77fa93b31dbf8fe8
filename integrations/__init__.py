"""How agents reach their memory: the tools (memory_search, memory_get and the write tools) in the
shapes model SDKs take, their REST endpoints, and the MCP server. Each runs the search engine
(search/) and the writes (indexing/) for the token's agent; nothing here searches or stores by itself.
"""
