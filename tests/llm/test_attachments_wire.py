"""Images and files on the wire: each adapter's exact request body, through the official SDK
against a loopback server, for a user message with an image, a PDF and a text file, and for
a tool result with an image. Each part is also validated against the SDK's own request
types (``TypeAdapter`` over the SDK's ``TypedDict``s)."""

from __future__ import annotations

import base64
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
from pydantic import TypeAdapter

from steerloop import AgentOptions, ImageBlock, Runtime, TextBlock, ToolResult, tool, user_message
from steerloop.llm.anthropic import AnthropicAdapter
from steerloop.llm.openai import OpenAIChatAdapter, OpenAIResponsesAdapter
from steerloop.messages import FileBlock

from ..conftest import settle
from ..media import pdf, png
from ..support import last_reason
from . import anthropic_wire as aw
from .openai_wire import DONE, chunk, text_reply, tool_call_events, usage
from .responses_wire import Wire, reply
from .sse_server import SSEServer, sse_reply

PNG = png(4, 3)
PDF = pdf(1)
NOTES = "line one\nline two\n"
B64_PNG = base64.b64encode(PNG).decode()
B64_PDF = base64.b64encode(PDF).decode()
URL = "https://example.com/cat.png"


def first_message() -> Any:
    return user_message(
        [
            TextBlock("what are these?"),
            ImageBlock("image/png", PNG, name="shot.png"),
            FileBlock("application/pdf", PDF, "spec.pdf"),
            FileBlock("text/plain", NOTES.encode(), "notes.txt"),
            ImageBlock("image/png", url=URL),
        ]
    )


@tool
async def screenshot() -> ToolResult:
    """Take a screenshot."""
    return ToolResult(content=[TextBlock("here it is"), ImageBlock("image/png", PNG)])


async def drive(rt: Runtime, provider: str, adapter: Any, model: str) -> Any:
    rt.llm.register_adapter([provider], adapter)

    def setup(scope: Any) -> None:
        scope.tools.register(screenshot)

    handle = await rt.agents.create(
        session_id="s-1",
        agent_options=AgentOptions(provider=provider, model=model),
        setup=setup,
    )
    agent = handle.agent
    agent.followup(first_message())
    await settle(agent, 30)
    assert last_reason(agent).kind == "completed", last_reason(agent)
    return agent


NOTES_TEXT = f'<file name="notes.txt" type="text/plain">\n{NOTES}\n</file>'


async def test_openai_chat_parts(rt: Runtime, server: SSEServer) -> None:
    """Chat completions: ``image_url`` with a data URL (or the URL), ``file`` with a PDF
    data URL, a text file as text; a tool message takes text only, so the tool's image
    follows the run of tool messages as one user message."""
    server.add(
        sse_reply(
            [
                *tool_call_events("call_1", "screenshot", {}),
                chunk({}, "tool_calls"),
                usage(10, 5),
                DONE,
            ]
        ),
        text_reply("done"),
    )
    adapter = OpenAIChatAdapter(base_url=server.url, api_key="sk-test")
    await drive(rt, "openai", adapter, "gpt-4o")
    messages = server.requests[1].json()["messages"]
    assert messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what are these?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
            {
                "type": "file",
                "file": {
                    "filename": "spec.pdf",
                    "file_data": f"data:application/pdf;base64,{B64_PDF}",
                },
            },
            {"type": "text", "text": NOTES_TEXT},
            {"type": "image_url", "image_url": {"url": URL}},
        ],
    }
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": f"here it is\n\n[attached below: image (unnamed) (image/png, {len(PNG)} B)]",
    }
    assert messages[3] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Attachments of the result of tool call call_1:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
        ],
    }
    assert len(messages) == 4
    check: TypeAdapter[Any] = TypeAdapter(openai.types.chat.ChatCompletionMessageParam)
    for message in messages:
        check.validate_python(message)


async def test_openai_responses_parts(rt: Runtime, server: SSEServer) -> None:
    """Responses: ``input_image`` / ``input_file`` in the user message, and the same parts
    in a ``function_call_output``'s output list."""
    wire = Wire()
    events = wire.created()
    events += wire.function_call(0, "screenshot", ["{}"], id="fc_1", call_id="call_1")
    events.append(wire.completed(Wire.usage(10, 5)))
    done = wire.created() + wire.message(0, ["done"])
    done.append(wire.completed(Wire.usage(20, 5)))
    server.add(reply(events), reply(done))
    adapter = OpenAIResponsesAdapter(base_url=server.url, api_key="sk-test")
    await drive(rt, "openai", adapter, "o4-mini")
    items = server.requests[1].json()["input"]
    user = next(i for i in items if i.get("role") == "user")
    assert user["content"] == [
        {"type": "input_text", "text": "what are these?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{B64_PNG}", "detail": "auto"},
        {
            "type": "input_file",
            "filename": "spec.pdf",
            "file_data": f"data:application/pdf;base64,{B64_PDF}",
        },
        {"type": "input_text", "text": NOTES_TEXT},
        {"type": "input_image", "image_url": URL, "detail": "auto"},
    ]
    output = next(i for i in items if i.get("type") == "function_call_output")
    assert output == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [
            {"type": "input_text", "text": "here it is"},
            {
                "type": "input_image",
                "image_url": f"data:image/png;base64,{B64_PNG}",
                "detail": "auto",
            },
        ],
    }
    check: TypeAdapter[Any] = TypeAdapter(openai.types.responses.ResponseInputItemParam)
    for item in items:
        check.validate_python(item)


async def test_anthropic_parts_and_cache_breakpoints(rt: Runtime, server: SSEServer) -> None:
    """Anthropic: ``image`` with a base64 (or URL) source, ``document`` with a base64 PDF or a
    plain-text source; the tool's image inside its ``tool_result``. The prompt-cache
    breakpoint sits on the last block of the last message, and the second request repeats
    the first one's messages byte for byte (the cached prefix holds the images)."""
    server.add(
        aw.streamed(
            aw.message(aw.tool_use(0, "toolu_1", "screenshot", "{}"), stop_reason="tool_use")
        ),
        aw.streamed(aw.message(aw.text(0, "done"))),
    )
    adapter = AnthropicAdapter(base_url=server.url, api_key="sk-ant-test")
    await drive(rt, "anthropic", adapter, aw.MODEL)
    first = server.requests[0].json()["messages"]
    second = server.requests[1].json()["messages"]
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG},
    }
    user_content: list[dict[str, Any]] = [
        {"type": "text", "text": "what are these?"},
        image,
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": B64_PDF},
            "title": "spec.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": NOTES},
            "title": "notes.txt",
        },
        {"type": "image", "source": {"type": "url", "url": URL}},
    ]
    cache = {"type": "ephemeral"}
    assert first == [
        {
            "role": "user",
            "content": [*user_content[:-1], {**user_content[-1], "cache_control": cache}],
        }
    ]
    assert second[0] == {"role": "user", "content": user_content}
    assert second[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "here it is"}, image],
                "cache_control": cache,
            }
        ],
    }
    check: TypeAdapter[Any] = TypeAdapter(anthropic.types.MessageParam)
    for message in second:
        check.validate_python(message)
