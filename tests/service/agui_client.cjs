// Drives the official AG-UI client (@ag-ui/client HttpAgent, @ag-ui/core schemas) against a
// steerloop server for tests/service/test_agui_client.py.
//
// argv[2]: JSON {url, threadId, runs: [{user?, tools?, answerClient?, decide?, second?}]}.
// Runs one after another on one HttpAgent (its thread: messages, state, pending interrupts);
// a run with `second` also starts a second HttpAgent on the same thread once the first has
// seen a TOOL_CALL_START, and prints {"signal": "second-started"} when that run has begun.
// Every raw event is parsed with @ag-ui/core's EventSchema; any warning of the client's own
// enforcement stage (an unknown member or event it stripped) is a failure. Prints one JSON
// line per run: {events, outcome, interrupts, error, messages, state}.
"use strict";
const path = require("node:path");
const { createRequire } = require("node:module");

const root = process.env.STEERLOOP_TEST_SERVERS || path.join(__dirname, "..", "..", ".test-servers");
const load = createRequire(path.join(root, "package.json"));
const { HttpAgent } = load("@ag-ui/client");
const { EventSchema } = load("@ag-ui/core/schemas");

const warnings = [];
const warn = console.warn;
console.warn = (...args) => {
  warnings.push(args.map(String).join(" "));
  warn(...args);
};

const spec = JSON.parse(process.argv[2]);
const rawProblems = [];
const rawChecks = [];

// A fetch that keeps a copy of the raw body and checks every event against the schemas.
function checkingFetch(url, init) {
  return fetch(url, init).then((response) => {
    if (!response.body) return response;
    const [mine, theirs] = response.body.tee();
    const check = (async () => {
      const reader = mine.getReader();
      const decoder = new TextDecoder();
      let text = "";
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      if (text.includes("\r")) rawProblems.push("a CR in the SSE body");
      for (const block of text.split("\n\n")) {
        const data = block
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, ""));
        if (data.length === 0) continue;
        const parsed = EventSchema.safeParse(JSON.parse(data.join("\n")));
        if (!parsed.success) rawProblems.push(`${data.join("\n")}: ${parsed.error.message}`);
      }
    })().catch((e) => rawProblems.push(String(e)));
    rawChecks.push(check);
    return new Response(theirs, { status: response.status, headers: response.headers });
  });
}

function makeAgent(threadId, messages, state) {
  const agent = new HttpAgent({ url: spec.url, threadId, fetch: checkingFetch });
  if (messages) agent.messages = structuredClone(messages);
  if (state) agent.state = structuredClone(state);
  return agent;
}

async function runOnce(agent, params, onEvent) {
  const seen = [];
  let outcome = null;
  let interrupts = [];
  let error = null;
  try {
    await agent.runAgent(params, {
      onEvent({ event }) {
        seen.push(event);
        if (onEvent) onEvent(event);
      },
      onRunFinishedEvent(p) {
        outcome = p.outcome;
        interrupts = p.interrupts || [];
      },
    });
  } catch (e) {
    error = String((e && e.message) || e);
  }
  return {
    events: seen.map((e) => e.type),
    raw: seen,
    outcome,
    interrupts,
    error,
    messages: agent.messages.map((m) => ({ id: m.id, role: m.role, content: m.content, toolCallId: m.toolCallId, toolCalls: m.toolCalls })),
    state: agent.state,
  };
}

async function main() {
  const agent = makeAgent(spec.threadId);
  let n = 0;
  for (const run of spec.runs) {
    n += 1;
    const resume = [];
    if (run.user) agent.addMessage({ id: `u${n}`, role: "user", content: run.user });
    for (const i of agent.pendingInterrupts) {
      if (i.reason === "client_tool" && run.answerClient !== undefined) {
        agent.addMessage({ id: `tool-${i.toolCallId}`, role: "tool", toolCallId: i.toolCallId, content: run.answerClient });
        resume.push({ interruptId: i.id, status: "resolved" });
      } else if (i.reason === "tool_approval" && run.decide) {
        resume.push({ interruptId: i.id, status: "resolved", payload: { decision: run.decide } });
      } else if (i.reason === "input_request" && run.answerInput) {
        resume.push({ interruptId: i.id, status: "resolved", payload: run.answerInput });
      }
    }
    const params = { runId: `run-${n}`, tools: run.tools || [] };
    if (resume.length) params.resume = resume;
    let second = null;
    const onEvent = run.second
      ? (event) => {
          if (event.type === "TOOL_CALL_START" && second === null) {
            const other = makeAgent(spec.threadId, agent.messages, agent.state);
            other.addMessage({ id: `u${n}-second`, role: "user", content: run.second });
            second = runOnce(other, { runId: `run-${n}-second` }, (e) => {
              if (e.type === "RUN_STARTED") process.stdout.write(JSON.stringify({ signal: "second-started" }) + "\n");
            });
          }
        }
      : null;
    const result = await runOnce(agent, params, onEvent);
    if (second) result.second = await second;
    process.stdout.write(JSON.stringify(result) + "\n");
  }
  await Promise.all(rawChecks); // each ends with its response body
  process.stdout.write(JSON.stringify({ done: true, warnings, rawProblems }) + "\n");
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ fatal: String((e && e.stack) || e) }) + "\n");
  process.exit(1);
});
