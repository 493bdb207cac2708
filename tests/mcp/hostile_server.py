"""A hostile MCP server of the tests' own: raw JSON-RPC over stdio, no SDK, so it can send
what a well-behaved server never would (200,000 content blocks, an 8 MiB result, 10,000
tools mid-turn, a line longer than any limit), escape its process group, and ask things of
the client (input, samples, roots) during a call. It speaks protocol 2025-11-25 (it refuses
``server/discover``), with tasks whose state survives a restart of the server.

Run as ``python hostile_server.py STATE_DIR``; it notes what it saw under STATE_DIR.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

STATE = Path(sys.argv[1])
_write = threading.Lock()
_answers: dict[str, Any] = {}
_answered = threading.Condition()
_ids = itertools.count(1)
_mode = {"flooded": False}

TEXT = {"type": "object", "properties": {"text": {"type": "string"}}}
EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
# Draft 7's tuple form of ``items``, which 2020-12 spells ``prefixItems``.
PAIR = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "pair": {
            "type": "array",
            "items": [{"type": "integer"}, {"type": "string"}],
            "additionalItems": False,
        }
    },
    "required": ["pair"],
}
TOOLS: list[dict[str, Any]] = [
    {"name": "blocks", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    {"name": "big", "inputSchema": {"type": "object", "properties": {"mib": {"type": "integer"}}}},
    {"name": "structured", "inputSchema": EMPTY},
    {"name": "flood", "inputSchema": EMPTY},
    {"name": "spawn", "inputSchema": EMPTY},
    {"name": "die", "inputSchema": EMPTY},
    {"name": "huge_line", "inputSchema": EMPTY},
    {"name": "ask", "inputSchema": TEXT},
    {"name": "ask_url", "inputSchema": EMPTY},
    {"name": "sample", "inputSchema": TEXT},
    {"name": "roots", "inputSchema": EMPTY},
    {"name": "touch", "inputSchema": {"type": "object", "properties": {"uri": {"type": "string"}}}},
    {"name": "echo", "inputSchema": TEXT, "annotations": {"readOnlyHint": True}},
    {"name": "pair", "inputSchema": PAIR},
    {
        "name": "job",
        "description": "A long job, run as a task.",
        "inputSchema": TEXT,
        "execution": {"taskSupport": "required"},
    },
]
RESOURCES = [
    {"uri": "hostile://doc", "name": "doc", "mimeType": "text/plain"},
    {"uri": "hostile://big", "name": "big", "mimeType": "text/plain"},
    {"uri": "hostile://bin", "name": "bin", "mimeType": "application/octet-stream"},
]


def note(name: str, text: str) -> None:
    with (STATE / name).open("a") as f:
        f.write(text + "\n")


def send(message: dict[str, Any]) -> None:
    data = json.dumps(message) + "\n"
    with _write:
        sys.stdout.write(data)
        sys.stdout.flush()


def answer(request_id: Any, result: Any = None, error: Any = None) -> None:
    if error is not None:
        send({"jsonrpc": "2.0", "id": request_id, "error": error})
    else:
        send({"jsonrpc": "2.0", "id": request_id, "result": result})


def ask_client(method: str, params: dict[str, Any]) -> Any:
    """Send a request to the client and wait for its answer."""
    key = f"s{next(_ids)}"
    send({"jsonrpc": "2.0", "id": key, "method": method, "params": params})
    with _answered:
        _answered.wait_for(lambda: key in _answers)
        return _answers.pop(key)


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


# --- tasks: kept in a file, so a restarted server still knows them -------------------------


def tasks() -> dict[str, Any]:
    path = STATE / "tasks.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_task(task_id: str, task: dict[str, Any]) -> None:
    known = tasks()
    known[task_id] = task
    (STATE / "tasks.json").write_text(json.dumps(known))


def task_view(task_id: str, task: dict[str, Any]) -> dict[str, Any]:
    released = (STATE / f"release-{task_id}").exists()
    status = (
        task["status"]
        if task["status"] == "cancelled"
        else ("completed" if released else "working")
    )
    return {
        "taskId": task_id,
        "status": status,
        "createdAt": "2026-01-01T00:00:00Z",
        "lastUpdatedAt": "2026-01-01T00:00:00Z",
        "ttl": task.get("ttl"),
        "pollInterval": 50,
    }


def task_result(task_id: str) -> Any:
    """Blocks until the task ends (the test releases it with a file), like tasks/result."""
    while True:
        task = tasks().get(task_id)
        if task is None:
            return None
        view = task_view(task_id, task)
        if view["status"] == "cancelled":
            return {"content": [{"type": "text", "text": "cancelled"}], "isError": True}
        if view["status"] == "completed":
            return text(f"job done: {task['text']} (server {os.getpid()})")
        time.sleep(0.05)


# --- tools ----------------------------------------------------------------------------------


def call_tool(params: dict[str, Any]) -> Any:
    name = params["name"]
    args = params.get("arguments") or {}
    note("calls", name)
    if name == "blocks":
        return {"content": [{"type": "text", "text": f"block {i}"} for i in range(args["n"])]}
    if name == "big":
        return text("x" * (args["mib"] << 20))
    if name == "structured":
        rows = [{"row": i, "text": "y" * 80} for i in range(100_000)]
        return {"content": [{"type": "text", "text": "rows"}], "structuredContent": {"rows": rows}}
    if name == "flood":
        _mode["flooded"] = True
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("flooded")
    if name == "spawn":
        # A grandchild in a session of its own: it leaves our process group, and once the
        # shell that started it exits, it is reparented away from us.
        out = subprocess.run(
            ["/bin/sh", "-c", f'setsid {sys.executable} -c "import time; time.sleep(600)" '
             "</dev/null >/dev/null 2>&1 & echo $!"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        note("children", out.stdout.strip())
        return text(out.stdout.strip())
    if name == "die":
        os._exit(3)
    if name == "huge_line":
        return text("z" * (40 << 20))
    if name == "ask":
        got = ask_client(
            "elicitation/create",
            {
                "message": args["text"],
                "requestedSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                    "required": ["name"],
                },
            },
        )
        return text(json.dumps(got, sort_keys=True))
    if name == "ask_url":
        got = ask_client(
            "elicitation/create",
            {"mode": "url", "message": "Sign in", "url": "https://example.test/login",
             "elicitationId": "e1"},
        )  # fmt: skip
        return text(json.dumps(got, sort_keys=True))
    if name == "sample":
        got = ask_client(
            "sampling/createMessage",
            {
                "messages": [{"role": "user", "content": {"type": "text", "text": args["text"]}}],
                "systemPrompt": "Answer briefly.",
                "maxTokens": 50,
            },
        )
        return text(json.dumps(got, sort_keys=True))
    if name == "roots":
        return text(json.dumps(ask_client("roots/list", {}), sort_keys=True))
    if name == "touch":
        send({"jsonrpc": "2.0", "method": "notifications/resources/updated",
              "params": {"uri": args["uri"]}})  # fmt: skip
        return text("touched")
    if name == "echo":
        return text(args["text"])
    if name == "pair":
        return text(json.dumps(args["pair"]))
    return None


def tools_list() -> dict[str, Any]:
    if _mode["flooded"]:
        many = [
            {"name": f"t{i}", "description": "d" * 100, "inputSchema": TEXT} for i in range(10_000)
        ]
        return {"tools": many}
    return {"tools": TOOLS}


def read_resource(uri: str) -> dict[str, Any] | None:
    if uri == "hostile://doc":
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "the doc"}]}
    if uri == "hostile://big":
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "b" * (8 << 20)}]}
    if uri == "hostile://bin":
        return {"contents": [{"uri": uri, "mimeType": "application/octet-stream", "blob": "AAEC"}]}
    return None


def handle(message: dict[str, Any]) -> None:
    method = message.get("method")
    request_id = message.get("id")
    params = message.get("params") or {}
    if method == "initialize":
        note("initialize", json.dumps(params.get("capabilities"), sort_keys=True))
        answer(request_id, {
            "protocolVersion": "2025-11-25",
            "capabilities": {
                "tools": {"listChanged": True},
                "resources": {"subscribe": True},
                "prompts": {},
                "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            },
            "serverInfo": {"name": "hostile", "version": "1"},
        })  # fmt: skip
    elif method == "tools/list":
        answer(request_id, tools_list())
    elif method == "tools/call":
        if params.get("task") is not None:
            task_id = f"task-{os.getpid()}-{next(_ids)}"
            save_task(task_id, {"status": "working", "text": params["arguments"]["text"],
                                "ttl": params["task"].get("ttl")})  # fmt: skip
            note("tasks", task_id)
            answer(request_id, {"task": task_view(task_id, tasks()[task_id])})
        elif params.get("name") == "job":
            answer(request_id, error={"code": -32601, "message": "job requires a task"})
        else:
            result = call_tool(params)
            if result is None:
                answer(request_id, error={"code": -32602, "message": "unknown tool"})
            else:
                answer(request_id, result)
    elif method == "tasks/get":
        task = tasks().get(params["taskId"])
        if task is None:
            answer(request_id, error={"code": -32602, "message": "no such task"})
        else:
            answer(request_id, task_view(params["taskId"], task))
    elif method == "tasks/result":
        result = task_result(params["taskId"])
        if result is None:
            answer(request_id, error={"code": -32602, "message": "no such task"})
        else:
            answer(request_id, result)
    elif method == "tasks/cancel":
        task = tasks().get(params["taskId"])
        if task is not None:
            task["status"] = "cancelled"
            save_task(params["taskId"], task)
            note("cancelled", params["taskId"])
        answer(request_id, task_view(params["taskId"], task or {"status": "cancelled"}))
    elif method == "resources/list":
        answer(request_id, {"resources": RESOURCES})
    elif method == "resources/templates/list":
        answer(request_id, {"resourceTemplates": []})
    elif method == "resources/read":
        result = read_resource(params["uri"])
        if result is None:
            answer(request_id, error={"code": -32002, "message": "no such resource"})
        else:
            answer(request_id, result)
    elif method == "resources/subscribe":
        note("subscribed", params["uri"])
        answer(request_id, {})
    elif method == "prompts/list":
        answer(request_id, {"prompts": [{
            "name": "greet",
            "description": "Greets someone.",
            "arguments": [{"name": "name", "required": True}, {"name": "tone"}],
        }]})  # fmt: skip
    elif method == "prompts/get":
        args = params.get("arguments") or {}
        greeting = f"Greet {args['name']} ({args.get('tone', 'plain')})."
        answer(request_id, {"messages": [
            {"role": "user", "content": {"type": "text", "text": greeting}},
        ]})  # fmt: skip
    elif method == "ping":
        answer(request_id, {})
    elif request_id is not None and method is not None:
        answer(request_id, error={"code": -32601, "message": f"no method {method}"})


def main() -> None:
    (STATE / "pid").write_text(str(os.getpid()))
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "method" not in message:  # the client's answer to one of our requests
            with _answered:
                _answers[message.get("id")] = message.get("result", message.get("error"))
                _answered.notify_all()
            continue
        if message["method"] == "notifications/cancelled":
            note("cancelled_requests", json.dumps(message.get("params")))
            continue
        threading.Thread(target=handle, args=(message,), daemon=True).start()


if __name__ == "__main__":
    main()
