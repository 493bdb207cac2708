#!/usr/bin/env python3
"""The client driver the official MCP conformance suite runs against steerloop.

    conformance client --command "python scripts/mcp_conformance_client.py" \\
        --requirements 2026-07-28 -o results/

The suite (npm ``@modelcontextprotocol/conformance``) starts one process per scenario, with
the scenario server's URL as the last argument and ``MCP_CONFORMANCE_SCENARIO``,
``MCP_CONFORMANCE_PROTOCOL_VERSION`` and, where the scenario has data for the client,
``MCP_CONFORMANCE_CONTEXT`` (JSON) in the environment.

Everything MCP here is steerloop's own client (``steerloop.mcp`` over the ``mcp`` SDK):
``install_mcp`` connects, authorizes (OAuth), lists and registers the server's tools, and an
agent whose scripted model calls them runs one turn. The driver only plays the parts a person
would: the browser at the authorization URL, the answer to a question a server asks, and
the model's choice of calls. It exits 0 when the turn completed and every call succeeded.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2

from steerloop import Agent, AgentOptions, Runtime
from steerloop.mcp import MCPOAuth, MCPServer, install_mcp
from steerloop.messages import TextBlock
from steerloop.testing import ScriptedAdapter, text_response, tool_calls_response

#: The client id document the suite's CIMD scenario expects (it never fetches it).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
SERVER = "conformance"

#: Arguments the model gives where a scenario's server checks them (else from the schema).
ARGUMENTS: Mapping[str, Mapping[str, Mapping[str, Any]]] = {
    "tools_call": {"add_numbers": {"a": 2, "b": 3}},
    # A network $ref in the schema: steerloop validates these arguments without fetching it.
    "json-schema-ref-no-deref": {
        "lookup_user": {"id": "user-1", "profile": {"displayName": "Ada"}}
    },
}


#: Calls a scenario means to fail in steerloop, and the error code each must end with.
EXPECTED_ERRORS: Mapping[str, Mapping[str, str]] = {
    "json-schema-ref-no-deref": {"lookup_user": "INVALID_ARGS"},
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def consent(authorization_url: str) -> str:
    """The person at the browser: open the authorization URL, return where it redirects."""
    async with httpx2.AsyncClient(follow_redirects=False, timeout=10.0) as http:
        response = await http.get(authorization_url)
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or location is None:
        raise RuntimeError(f"the authorization endpoint answered {response.status_code}")
    return str(location)


def oauth_for(context: Mapping[str, Any]) -> MCPOAuth:
    """How this client authorizes: registered beforehand where the context says so."""
    return MCPOAuth(
        authorize=consent,
        client_name="steerloop-conformance",
        client_metadata_url=CLIENT_METADATA_URL,
        client_id=context.get("client_id"),
        client_secret=context.get("client_secret"),
    )


def example(schema: Mapping[str, Any], *, every: bool = False) -> Any:
    """A value of a simple JSON schema: its required properties, or ``every`` one."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        properties = schema.get("properties", {})
        names = properties if every else schema.get("required", [])
        return {name: example(properties.get(name, {}), every=every) for name in names}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 1
    if kind == "boolean":
        return True
    return "steerloop"


def planned_calls(
    scenario: str, context: Mapping[str, Any], tools: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """The calls the scripted model makes: every tool steerloop offers it, once."""
    if scenario == "json-schema-2020-12-preservation":
        # The model hands back the schema steerloop offered it for the focal tool.
        focal = tools.get("json_schema_2020_12_tool", {})
        return [("json_schema_echo", {"schema": dict(focal)})]
    given = {c["name"]: c.get("arguments", {}) for c in context.get("toolCalls", [])}
    prescribed = ARGUMENTS.get(scenario, {})
    calls = []
    for remote, schema in tools.items():
        if remote in given:
            # A model leaves out an optional argument rather than send null where the
            # schema has none (steerloop would refuse the call as invalid).
            arguments = {k: v for k, v in given[remote].items() if v is not None}
        elif remote in prescribed:
            arguments = dict(prescribed[remote])
        else:
            arguments = example(schema)
        calls.append((remote, arguments))
    return calls


async def answer_questions(agent: Agent, turn: asyncio.Future[Any]) -> None:
    """The person: each question a server asks during the turn (an input request) is
    accepted, with a value of every property the requested schema names."""
    while not turn.done():
        for request in agent.pending_inputs:
            content = None if request.schema is None else example(request.schema, every=True)
            log(f"asked: {request.message!r}; answering {content}")
            agent.answer_input(request.id, "accept", content, by="conformance driver")
        await asyncio.wait({turn}, timeout=0.05)


async def drive(url: str, scenario: str, context: Mapping[str, Any]) -> int:
    server = MCPServer.http(SERVER, url=url, oauth=oauth_for(context), timeout=20.0)
    async with Runtime.open() as rt:
        installed = await install_mcp(rt, [server])
        names = installed.tools(SERVER)
        prefix = f"{SERVER}__"
        tools: dict[str, Mapping[str, Any]] = {}
        for name in names:
            tool = rt.tools.get(name)
            assert tool is not None
            tools[name.removeprefix(prefix)] = tool.parameters
        log(f"tools offered: {sorted(tools)}")
        calls = {f"c{i}": call for i, call in enumerate(planned_calls(scenario, context, tools))}
        script: list[Sequence[Any]] = []
        if calls:
            script.append(
                tool_calls_response(
                    [(call_id, prefix + remote, args) for call_id, (remote, args) in calls.items()]
                )
            )
        script.append(text_response("done"))
        rt.llm.register_adapter("scripted", ScriptedAdapter(script))
        handle = await rt.agents.create(
            session_id="conformance", agent_options=AgentOptions(provider="scripted", model="m")
        )
        turn = asyncio.ensure_future(handle.agent.run("Call the tools."))
        await answer_questions(handle.agent, turn)
        result = await turn
        expected = EXPECTED_ERRORS.get(scenario, {})
        failed = 0
        for event in handle.agent.session.events:
            if event.type != "tool/result":
                continue
            data = event.data
            remote = calls[data.message.call_id][0]
            text = " ".join(b.text for b in data.message.content if isinstance(b, TextBlock))
            code = None if data.error is None else data.error.code
            failed += code != expected.get(remote)
            log(f"{remote}: {code or 'ok'}: {text[:300]}")
        log(f"turn: {result.kind}")
        return 0 if result.kind == "completed" and not failed else 1


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    return asyncio.run(drive(argv[-1], scenario, context))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
