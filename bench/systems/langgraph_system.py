"""langgraph: a hand-built ``StateGraph(MessagesState)`` — a fake model node returning an
``AIMessage`` with tool calls, the prebuilt ``ToolNode`` and ``tools_condition`` — run
with ``ainvoke``; the node's per-run counter lives in the run's ``configurable``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _harness import echo_text
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

NAME = "langgraph"


@tool
async def echo(x: int) -> str:
    """Echo x."""
    return await echo_text(x)


def _graph(tools: list[Any], name: str, calls: int = 1) -> Any:
    async def model(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        conf = config["configurable"]
        i = conf["count"][0]
        conf["count"][0] = i + 1
        if i >= conf["steps"]:
            return {"messages": [AIMessage(content="done")]}
        return {
            "messages": [
                AIMessage(
                    content="",
                    tool_calls=[
                        {"name": name, "args": {"x": i}, "id": f"c{i}_{k}", "type": "tool_call"}
                        for k in range(calls)
                    ],
                )
            ]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile()


ECHO_GRAPH = _graph([echo], "echo")


def _config(steps: int) -> RunnableConfig:
    # Two supersteps per step (model, tools) plus the final model call.
    return {"configurable": {"count": [0], "steps": steps}, "recursion_limit": 2 * steps + 10}


async def s1(steps: int) -> float:
    config = _config(steps)
    start = time.perf_counter()
    await ECHO_GRAPH.ainvoke({"messages": [HumanMessage("go")]}, config)
    return (time.perf_counter() - start) / (steps + 1)


async def s2(calls: int, delay: float) -> float:
    @tool
    async def sleepy(x: int) -> str:
        """Sleep."""
        await asyncio.sleep(delay)
        return "ok"

    graph = _graph([sleepy], "sleepy", calls)
    start = time.perf_counter()
    await graph.ainvoke({"messages": [HumanMessage("go")]}, _config(1))
    return time.perf_counter() - start


async def s3(agents: int, steps: int) -> float:
    configs = [_config(steps) for _ in range(agents)]
    start = time.perf_counter()
    await asyncio.gather(
        *(ECHO_GRAPH.ainvoke({"messages": [HumanMessage("go")]}, c) for c in configs)
    )
    return agents * (steps + 1) / (time.perf_counter() - start)
