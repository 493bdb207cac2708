"""Steering while an answer streams, in Chromium (API.md "Web chat"; issue 28): the live
answer never loses a word.

A steer lands in the log (``agent/inbox/spliced``) in the middle of the model's stream, and
the frames after it are numbered after its seq. A word streamed just before the splice, not
yet read by an SSE reader when the splice woke it, used to be skipped: the reader read the
events after its cursor first and jumped past the frames it had not read. The model here
steers its own agent right after yielding a word (the splice lands in the same turn of the
event loop as that word's frame: deterministic), and the page steers through its composer
while words flow; after every word the live answer must read exactly what was streamed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from steerloop import AgentOptions, Runtime, user_message
from steerloop.llm import GenerateRequest, ModelInfo
from steerloop.llm.chunks import BlockEnd, BlockStart, Finish, FinishReason, StreamChunk, TextDelta
from steerloop.messages import TextBlock
from steerloop.service import Profile, create_app

from .served import served
from .test_webchat import Chat, base_of, browser, page, store  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.timeout(180), pytest.mark.asyncio(loop_scope="module")]

ANSWERS = 5  # steps: each steer makes the turn take one more
WORDS = 8
SELF_STEER_AT = 2  # the model steers right after yielding this word (same loop turn)
PAGE_STEER_AT = 5  # the page steers while this word is released


class Words:
    """Each request streams ``WORDS`` words, one chunk each, waiting for a permit per word;
    ``said`` is what the open answer has streamed so far."""

    def __init__(self) -> None:
        self.rt: Runtime | None = None
        self.permits: asyncio.Queue[None] = asyncio.Queue()
        self.streamed: asyncio.Queue[int] = asyncio.Queue()
        self.answer = 0
        self.said: list[str] = []

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        return ModelInfo()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        self.answer += 1
        self.said = []
        yield BlockStart(index=0, block_type="text")
        for j in range(WORDS):
            await self.permits.get()
            word = f"a{self.answer}w{j}"
            self.said.append(word)
            yield TextDelta(index=0, text=word if j == 0 else f" {word}")
            if j == SELF_STEER_AT and self.answer < ANSWERS:
                assert self.rt is not None and request.session_id is not None
                agent = self.rt.agents.get(request.session_id)
                assert agent is not None
                agent.steer(user_message(f"model-side steer {self.answer}"))
            self.streamed.put_nowait(j)
        yield BlockEnd(index=0, block=TextBlock(" ".join(self.said)))
        yield Finish(reason=FinishReason(kind="stop"))

    def profiles(self, rt: Runtime) -> list[Profile]:
        self.rt = rt
        rt.llm.register_adapter(["mock"], self)
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]

    async def next_word(self) -> None:
        self.permits.put_nowait(None)
        async with asyncio.timeout(15):
            await self.streamed.get()


async def test_steering_during_streaming_never_drops_a_streamed_word(
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    model = Words()
    async with served(create_app(store(tmp_path), model.profiles)) as client:
        chat = Chat(page, base_of(client), tmp_path)
        await chat.open()
        await chat.type_and_enter("count")
        live = chat.streaming.locator(".text")
        steers = 0
        for answer in range(1, ANSWERS + 1):
            for j in range(WORDS):
                if j == PAGE_STEER_AT and answer < ANSWERS:
                    # released and steered at once: the word's frame and the splice race
                    text = f"page steer {answer}"
                    await asyncio.gather(model.next_word(), chat.type_and_enter(text))
                    await expect(chat.composer).to_have_value("")
                    steers += 1
                else:
                    await model.next_word()
                    steers += j == SELF_STEER_AT and answer < ANSWERS
                if j < WORDS - 1:  # the last word settles the answer at once: checked below
                    assert model.answer == answer
                    await expect(live).to_have_text(" ".join(model.said))
            await expect(chat.entries("assistant").nth(answer - 1)).to_have_text(
                "assistant" + " ".join(f"a{answer}w{k}" for k in range(WORDS))
            )
        await expect(chat.turn_end).to_have_text("turn ended")
        await chat.shot("steered-stream")
        assert steers == 2 * (ANSWERS - 1)
        assert chat.errors == []
