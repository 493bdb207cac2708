"""BlockAssembler: folds stream chunks into the blocks of one attempt."""

from __future__ import annotations

from steerloop.llm import TokenUsage
from steerloop.llm._assembler import BlockAssembler
from steerloop.llm.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from steerloop.messages import ReasoningBlock, TextBlock, ToolCallBlock


def _fold(*chunks: StreamChunk) -> BlockAssembler:
    asm = BlockAssembler()
    for chunk in chunks:
        asm.push(chunk)
    return asm


def test_blocks_are_ordered_by_index_not_arrival() -> None:
    """Blocks are returned in index order even when their deltas interleave."""
    asm = _fold(
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="second "),
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="think "),
        TextDelta(index=1, text="part"),
        ReasoningDelta(index=0, text="more"),
    )
    assert asm.blocks() == (ReasoningBlock("think more"), TextBlock("second part"))


def test_deltas_without_block_start_create_the_block() -> None:
    """A delta for an unseen index opens a block of the delta's kind."""
    asm = _fold(TextDelta(index=0, text="a"), TextDelta(index=0, text="b"))
    assert asm.blocks() == (TextBlock("ab"),)


def test_tool_call_deltas_accumulate_arguments() -> None:
    """Tool-call deltas concatenate argument text; id and name are kept from the first delta."""
    asm = _fold(
        BlockStart(index=0, block_type="tool-call"),
        ToolCallDelta(index=0, id="c1", name="echo", arguments_delta='{"x":'),
        ToolCallDelta(index=0, id="", arguments_delta=" 1}"),
    )
    assert asm.blocks() == (ToolCallBlock("c1", "echo", '{"x": 1}'),)


def test_block_end_wins_over_deltas() -> None:
    """A ``BlockEnd`` carries the final block; it replaces what the deltas built."""
    asm = _fold(
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="draft"),
        BlockEnd(index=0, block=TextBlock("final")),
        BlockStart(index=1, block_type="reasoning"),
        ReasoningDelta(index=1, text="r"),
        BlockEnd(index=1, block=ReasoningBlock("r", replay_state={"sig": "s"})),
    )
    assert asm.blocks() == (TextBlock("final"), ReasoningBlock("r", replay_state={"sig": "s"}))


def test_block_end_without_deltas() -> None:
    """A lone ``BlockEnd`` contributes its block."""
    call = ToolCallBlock("c1", "echo", "{}")
    asm = _fold(BlockEnd(index=0, block=call))
    assert asm.blocks() == (call,)


def test_block_start_alone_gives_an_empty_block() -> None:
    """A started block with no deltas yields an empty block of its type."""
    asm = _fold(BlockStart(index=0, block_type="text"))
    assert asm.blocks() == (TextBlock(""),)


def test_usage_is_kept_last_wins() -> None:
    """The last usage chunk is the attempt's usage; none means ``None``."""
    assert _fold(TextDelta(index=0, text="x")).usage is None
    u1 = TokenUsage(input_tokens=1, output_tokens=2)
    u2 = TokenUsage(input_tokens=3, output_tokens=4, reasoning_tokens=1)
    assert _fold(UsageChunk(usage=u1), UsageChunk(usage=u2)).usage == u2


def test_finish_defaults_to_stop() -> None:
    """A stream that ends without ``Finish`` counts as ``stop`` with no replay state."""
    asm = _fold(TextDelta(index=0, text="x"))
    assert asm.finish is None
    assert asm.reason.kind == "stop"
    assert asm.replay_state is None


def test_finish_is_recorded() -> None:
    """The finish chunk's reason and replay state are exposed."""
    finish = Finish(reason=FinishReason(kind="tool-calls"), replay_state={"id": "resp-1"})
    asm = _fold(TextDelta(index=0, text="x"), finish)
    assert asm.finish == finish
    assert asm.reason.kind == "tool-calls"
    assert asm.replay_state == {"id": "resp-1"}


def test_safe_prefix_excludes_partial_tool_calls() -> None:
    """C7.8-10: the safe prefix keeps text/reasoning and never a tool call from partial JSON."""
    asm = _fold(
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="plan"),
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="Let me look"),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="c1", name="read", arguments_delta='{"path": "/et'),
    )
    assert asm.safe_prefix() == (ReasoningBlock("plan"), TextBlock("Let me look"))
    # blocks() still reports the partial call, for callers that want everything.
    assert asm.blocks()[-1] == ToolCallBlock("c1", "read", '{"path": "/et')


def test_safe_prefix_of_only_a_tool_call_is_empty() -> None:
    """C7.8-10: with only a (partial or complete) tool call streamed, the safe prefix is empty."""
    partial = _fold(ToolCallDelta(index=0, id="c1", name="read", arguments_delta="{"))
    assert partial.safe_prefix() == ()
    complete = _fold(BlockEnd(index=0, block=ToolCallBlock("c1", "read", "{}")))
    assert complete.safe_prefix() == ()


def test_safe_prefix_drops_empty_text() -> None:
    """Started-but-empty text blocks are not part of the safe prefix."""
    asm = _fold(BlockStart(index=0, block_type="text"), BlockStart(index=1, block_type="reasoning"))
    assert asm.safe_prefix() == ()
