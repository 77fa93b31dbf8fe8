"""The agent-developer snippets of docs/agents.md run as printed: against a live MemoryHub, with the model
replaced by a scripted fake that calls memory_get once and then answers with what it read."""

import json
import re
import sys
import types
from pathlib import Path

import pytest

AGENTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
FALCON = "# Project Falcon\n\nThe launch is planned for March.\nBudget: 40k.\n"
TOOL_ARGUMENTS = {"path": "memory/falcon.md", "from": 3, "lines": 1}


def agent_developer_blocks(language: str) -> list[str]:
    text = AGENTS_DOC.read_text()
    section = text.split("# Agent developers", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def snippet(marker: str) -> str:
    (code,) = [block for block in agent_developer_blocks("python") if marker in block]
    return code


def test_the_json_configs_parse():
    configs = [json.loads(block) for block in agent_developer_blocks("json")]
    assert configs and all("memoryhub" in config["mcpServers"] for config in configs)


@pytest.fixture
def live_memory(alice, index_files, live_server, monkeypatch):
    index_files(alice, {"memory/falcon.md": FALCON})
    monkeypatch.setenv("MEMORYHUB_TOKEN", alice.raw_token)
    return lambda code: code.replace("http://127.0.0.1:8000", live_server.url)


def obj(**fields):
    return types.SimpleNamespace(**fields)


@pytest.mark.django_db(transaction=True)
def test_the_openai_snippet_runs_a_tool_call_through_memoryhub(live_memory, monkeypatch, capsys):
    seen = {}

    class FakeCompletions:
        calls = 0

        def create(self, *, model, messages, tools):
            FakeCompletions.calls += 1
            if FakeCompletions.calls == 1:
                seen["tools"] = [tool["function"]["name"] for tool in tools]
                call = obj(id="call_1", function=obj(name="memory_get", arguments=json.dumps(TOOL_ARGUMENTS)))
                return obj(choices=[obj(message=obj(content=None, tool_calls=[call]))])
            seen["tool_result"] = messages[-1]
            return obj(choices=[obj(message=obj(content="In March.", tool_calls=None))])

    class FakeOpenAI:
        def __init__(self):
            self.chat = obj(completions=FakeCompletions())

    import openai

    monkeypatch.setattr(openai, "OpenAI", FakeOpenAI)
    exec(compile(live_memory(snippet("from openai import OpenAI")), "README-openai", "exec"), {})
    assert seen["tools"] == ["memory_search", "memory_get", "memory_write", "memory_append", "memory_delete"]  # a read/write token
    assert seen["tool_result"]["tool_call_id"] == "call_1"
    assert "The launch is planned for March." in seen["tool_result"]["content"]
    assert capsys.readouterr().out.strip() == "In March."


@pytest.mark.django_db(transaction=True)
def test_the_anthropic_snippet_runs_a_tool_call_through_memoryhub(live_memory, monkeypatch, capsys):
    seen = {}

    class FakeMessages:
        calls = 0

        def create(self, *, model, max_tokens, tools, messages):
            FakeMessages.calls += 1
            if FakeMessages.calls == 1:
                seen["tools"] = [tool["name"] for tool in tools]
                block = obj(type="tool_use", id="toolu_1", name="memory_get", input=TOOL_ARGUMENTS)
                return obj(content=[block], stop_reason="tool_use")
            seen["tool_results"] = messages[-1]["content"]
            return obj(content=[obj(type="text", text="In March.")], stop_reason="end_turn")

    class FakeAnthropic:
        def __init__(self):
            self.messages = FakeMessages()

    monkeypatch.setitem(sys.modules, "anthropic", types.SimpleNamespace(Anthropic=FakeAnthropic))
    exec(compile(live_memory(snippet("import anthropic")), "README-anthropic", "exec"), {})
    assert seen["tools"] == ["memory_search", "memory_get", "memory_write", "memory_append", "memory_delete"]  # a read/write token
    (result,) = seen["tool_results"]
    assert result["tool_use_id"] == "toolu_1" and result["is_error"] is False
    assert "The launch is planned for March." in result["content"]
    assert capsys.readouterr().out.strip() == "In March."
