"""``Inputs`` on its own (the agent side of input requests, without a server): a wait is
answered once, validated against its schema; a request an earlier process logged can be
adopted and answered; an aborted wait refuses late answers."""

from __future__ import annotations

import asyncio

import pytest

from steerloop import AbortController
from steerloop.errors import InputError
from steerloop.session import pending_inputs
from steerloop.session._input_events import InputAnswered, InputRequest

from ..conftest import Harness

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


async def test_a_wait_is_answered_once_and_its_seq_returned(h: Harness) -> None:
    agent = await h.agent()
    request = InputRequest(id="i1", server="s", message="n?", schema=SCHEMA)
    waiting = asyncio.ensure_future(agent.inputs.wait(request, AbortController().signal))
    await asyncio.sleep(0)
    assert agent.pending_inputs == (request,)
    seq = agent.answer_input("i1", "accept", {"n": 3}, by="me")
    answer = await waiting
    assert answer == InputAnswered(id="i1", action="accept", content={"n": 3}, by="me")
    assert agent.session.events[seq - 1].data == answer
    with pytest.raises(InputError, match="already answered"):
        agent.answer_input("i1", "cancel")


async def test_an_aborted_wait_is_answered_cancel_and_refuses_late_answers(h: Harness) -> None:
    agent = await h.agent()
    controller = AbortController()
    request = InputRequest(id="i1", server="s", message="n?", schema=SCHEMA)
    waiting = asyncio.ensure_future(agent.inputs.wait(request, controller.signal))
    await asyncio.sleep(0)
    controller.abort("stop")
    with pytest.raises(Exception, match="aborted"):
        await waiting
    answered = [e.data for e in agent.session.events if e.type == "input/answered"]
    assert answered == [InputAnswered(id="i1", action="cancel")]
    assert agent.pending_inputs == ()


async def test_a_schema_that_is_not_an_objects_is_refused_before_anything_is_written(
    h: Harness,
) -> None:
    agent = await h.agent()
    for schema in ({"type": "string"}, {"type": "object", "properties": 3}):
        request = InputRequest(id="bad", server="s", message="?", schema=schema)
        with pytest.raises(ValueError, match="schema"):
            await agent.inputs.wait(request, AbortController().signal)
    assert [e.type for e in agent.session.events if e.type.startswith("input/")] == []


async def test_a_logged_request_is_adopted_and_answered(h: Harness) -> None:
    """What a transport that finishes calls after a restart does: the request is in the
    log (with its resume state), pending; adopt waits for it again without writing."""
    agent = await h.agent()
    request = InputRequest(id="i9", server="s", message="n?", schema=SCHEMA, resume={"k": 1})
    agent.session.append(request)  # as the earlier process wrote it
    assert pending_inputs(agent.session.events) == (request,)
    before = len(agent.session.events)
    answered = agent.inputs.adopt(request, AbortController().signal)
    assert len(agent.session.events) == before and agent.pending_inputs == (request,)
    with pytest.raises(ValueError, match="cannot be adopted"):
        agent.inputs.adopt(request, AbortController().signal)
    agent.answer_input("i9", "accept", {"n": 1})
    assert (await answered).content == {"n": 1}
    with pytest.raises(ValueError, match="it is answered"):
        agent.inputs.adopt(request, AbortController().signal)
    other = InputRequest(id="never", server="s", message="?")
    with pytest.raises(ValueError, match="it is unknown"):
        agent.inputs.adopt(other, AbortController().signal)
