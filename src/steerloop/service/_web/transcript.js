// The transcript of one session, folded from its durable events and live stream frames.
// Every piece of model, tool or user text goes into the DOM as a text node, except a settled
// answer's text: Markdown, rendered by markdown.js (sanitised, raw HTML shown as text).

import { mediaOf, textOnly } from "./attach.js";
import { renderMarkdown } from "./markdown.js";

/** An element with attributes and children (strings become text nodes). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

export function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((block) => (block && block.type === "text" ? String(block.text) : `[${block && block.type}]`))
    .join("\n");
}

function prettyArguments(raw) {
  if (typeof raw !== "string" || raw === "") return raw === "" ? "(no arguments)" : String(raw);
  try {
    return JSON.stringify(JSON.parse(raw), null, 2);
  } catch {
    return raw; // invalid JSON is shown as the model sent it
  }
}

function turnEndText(reason) {
  const kind = reason && reason.kind;
  if (kind === "completed") return "turn ended";
  if (kind === "aborted") {
    const cause = reason.reason && reason.reason.kind;
    return cause === "user" ? "stopped" : `aborted (${cause || "unknown"})`;
  }
  if (kind === "error") {
    const failure = reason.error || {};
    return `error: ${failure.message || failure.code || "unknown"}`;
  }
  if (kind === "blocked") return reason.detail ? `blocked: ${reason.detail}` : "blocked";
  if (kind === "max-tokens") return "stopped at the token limit";
  if (kind === "interrupted") return "interrupted (the service restarted)";
  return String(kind);
}

const QUEUE_LABEL = {
  "next-step": "queued for the next step",
  "next-turn": "queued for the next turn",
};

export class Transcript {
  /**
   * @param {{list: HTMLElement, queue: HTMLElement, changed: () => void,
   *          decide: (callId: string, decision: string) => Promise<void>}} parts
   */
  constructor(parts) {
    this.list = parts.list;
    this.queueList = parts.queue;
    this.changed = parts.changed;
    this.decide = parts.decide;
    this.decorate = parts.decorate || null; // (entry, assistant/message data): replay.js
    this.offline = false;
    this.reset();
  }

  /** While the feed is offline no decision can be sent: Allow / Deny wait, disabled. */
  setOffline(offline) {
    if (this.offline === offline) return;
    this.offline = offline;
    for (const tool of this.tools.values()) tool.setOffline(offline);
  }

  reset() {
    this.list.replaceChildren();
    this.queueList.replaceChildren();
    this.running = false;
    this.tools = new Map(); // call_id -> {entry, state, args, result, approval}
    this.live = null; // {entry, attempt, blocks: Map(index -> {kind, text, name?})}
    this.inbox = { "next-turn": [], "next-step": [] }; // ids, as the spliced events fold
    this.queued = new Map(); // message id -> {text, target, item}
    this.shown = new Set(); // user message ids already in the transcript
  }

  // --- durable events -----------------------------------------------------------------

  event(type, stored) {
    const data = (stored && stored.data) || {};
    switch (type) {
      case "turn/start":
        this.running = true;
        break;
      case "turn/end":
        this.dropLive();
        this.running = false;
        for (const tool of this.tools.values()) tool.settle();
        this.list.append(
          el(
            "li",
            { class: `turn-end kind-${data.reason && data.reason.kind}`, "data-testid": "turn-end" },
            turnEndText(data.reason),
          ),
        );
        break;
      case "user/message":
        this.userMessage(data);
        break;
      case "assistant/message":
        this.assistantMessage(data);
        break;
      case "assistant/attempt":
        this.dropLive();
        break;
      case "tool/call":
        this.tool(data.call_id, data.name, data.arguments).setState("running");
        break;
      case "tool/approval-requested":
        this.tool(data.call_id, data.name, data.arguments).ask(data.reason);
        break;
      case "tool/approval-decided":
        this.tool(data.call_id).decided(data.decision, data.reason);
        break;
      case "tool/result":
        this.toolResult(data);
        break;
      case "agent/inbox/spliced":
        this.splice(data);
        break;
      case "context/compacted":
        this.list.append(el("li", { class: "note" }, "earlier messages were summarised"));
        break;
      default:
        return; // log-only events the page does not show
    }
    this.changed();
  }

  userMessage(message) {
    const id = message.id;
    this.unqueue(id);
    if (id && this.shown.has(id)) return;
    if (id) this.shown.add(id);
    const source = (message.source && message.source.kind) || "user";
    const text = el("div", { class: "text" }, textOnly(message.content));
    const media = mediaOf(message.content); // thumbnails and file chips (attach.js)
    const attrs = { "data-role": "user", "data-message-id": id, "data-source": source };
    const prompt = (message.source || {}).mcp_prompt; // an expanded MCP prompt (prompts.js)
    const via = prompt ? el("div", { class: "flag", "data-testid": "prompt-source" }, `/${prompt.server}:${prompt.name}`) : null;
    if (source === "user") {
      this.list.append(el("li", { class: "entry user", ...attrs }, el("div", { class: "who" }, "you"), via, text, media));
      return;
    }
    // Context a plugin, a tool or a goal added for the model: folded away, one click to read.
    const from = message.source.plugin || message.source.call_id || source;
    this.list.append(
      el(
        "li",
        { class: "entry context", ...attrs },
        el("details", {}, el("summary", { class: "who" }, `context · ${from}`), text, media),
      ),
    );
  }

  assistantMessage(data) {
    // The settled message takes the place its live frames had: anything logged meanwhile
    // (a steer dropped by a stop) stays after it.
    const anchor = this.live ? this.live.entry : null;
    this.live = null;
    const message = data.message || {};
    const entry = el("li", { class: "entry assistant", "data-role": "assistant" });
    entry.append(el("div", { class: "who" }, "assistant"));
    const calls = [];
    let said = false; // a step stopped before it produced anything leaves no entry
    for (const block of message.content || []) {
      if (block.type === "tool-call") {
        calls.push(block);
        continue;
      }
      if ((block.type === "text" || block.type === "reasoning") && !String(block.text || "")) continue;
      said = true;
      if (block.type === "text")
        entry.append(el("div", { class: "text md" }, renderMarkdown(String(block.text))));
      else if (block.type === "reasoning") entry.append(reasoningBlock(String(block.text)).node);
      else entry.append(el("div", { class: "text other" }, `[${block.type}]`));
    }
    if (data.interrupted) entry.append(el("div", { class: "flag" }, "interrupted"));
    if (said && this.decorate) this.decorate(entry, data);
    const placed = [];
    if (said) placed.push(entry);
    for (const call of calls) {
      const tool = this.tool(call.id, call.name, call.arguments);
      placed.push(tool.entry);
    }
    if (anchor) anchor.replaceWith(...placed);
    else this.list.append(...placed);
  }

  toolResult(data) {
    const message = data.message || {};
    const tool = this.tool(message.call_id);
    const error = data.error && data.error.code;
    tool.result(textOf(message.content), Boolean(message.is_error), error);
  }

  /** The tool entry of ``callId``, made on first sight. */
  tool(callId, name, args) {
    let tool = this.tools.get(callId);
    if (!tool) {
      tool = new ToolEntry(callId, name, args, this.decide);
      tool.setOffline(this.offline);
      this.tools.set(callId, tool);
      this.list.append(tool.entry);
    } else if (name !== undefined) {
      tool.fill(name, args);
    }
    return tool;
  }

  // --- the inbox: what was sent but not yet taken into a step -------------------------

  /** A message the service accepted (202) before its splice arrives. */
  posted(id, text, mode) {
    if (this.shown.has(id) || this.queued.has(id)) return;
    this.enqueue(id, text, mode === "steer" ? "next-step" : "next-turn");
    this.changed();
  }

  splice(data) {
    const ids = this.inbox[data.target];
    if (!ids) return;
    const inserted = data.inserted || [];
    const removed = ids.splice(
      data.start,
      data.removed_count || 0,
      ...inserted.map((message) => message.id),
    );
    for (const message of inserted) {
      const source = message.source && message.source.kind;
      if (source === "user" || this.queued.has(message.id))
        this.enqueue(message.id, textOf(message.content), data.target);
    }
    for (const id of removed) {
      const queued = this.queued.get(id);
      this.unqueue(id);
      // A claim admits the message (its user/message follows); a canceled removal drops it:
      // it stays in the transcript as the user's own bubble, marked as never delivered.
      if (data.outcome === "canceled" && queued)
        this.list.append(
          el(
            "li",
            { class: "entry user dropped", "data-testid": "dropped", "data-message-id": id },
            el("div", { class: "who" }, "you ", el("span", { class: "state" }, "not delivered")),
            el("div", { class: "text" }, queued.text),
            el("div", { class: "flag" }, "the agent stopped before reading it"),
          ),
        );
    }
  }

  enqueue(id, text, target) {
    if (this.shown.has(id)) return;
    let queued = this.queued.get(id);
    if (!queued) {
      const label = el("span", { class: "state" });
      const item = el(
        "li",
        { class: "queued", "data-testid": "queued", "data-message-id": id },
        el("div", { class: "text" }, text),
        label,
      );
      queued = { text, target, item, label };
      this.queued.set(id, queued);
      this.queueList.append(item);
    }
    queued.target = target;
    queued.label.textContent = QUEUE_LABEL[target] || "queued";
  }

  unqueue(id) {
    const queued = this.queued.get(id);
    if (!queued) return;
    queued.item.remove();
    this.queued.delete(id);
  }

  // --- live frames of the open step ---------------------------------------------------

  frame(frame) {
    // The durable assistant/message (or attempt) settles an attempt; its "end" frame adds nothing.
    if (frame.kind === "end") return;
    // Each attempt (a retry too) has its own id; "revision" only counts the frames.
    if (frame.kind === "start" || !this.live || this.live.attempt !== frame.attempt_id) {
      this.startLive(frame);
    }
    if (frame.kind === "chunk" && frame.chunk) this.chunk(frame.chunk);
    this.changed();
  }

  startLive(frame) {
    this.dropLive();
    const entry = el(
      "li",
      { class: "entry assistant live", "data-role": "assistant", "data-testid": "streaming" },
      el("div", { class: "who" }, "assistant"),
    );
    this.live = { entry, attempt: frame.attempt_id, blocks: new Map() };
    this.list.append(entry);
  }

  dropLive() {
    if (this.live) this.live.entry.remove();
    this.live = null;
  }

  chunk(chunk) {
    const blocks = this.live.blocks;
    const index = chunk.index;
    let block = blocks.get(index);
    if (!block && chunk.kind !== "usage" && chunk.kind !== "finish") {
      const type =
        chunk.kind === "block-start"
          ? chunk.block_type
          : chunk.kind === "reasoning-delta"
            ? "reasoning"
            : chunk.kind === "tool-call-delta"
              ? "tool-call"
              : "text";
      block = this.liveBlock(type);
      blocks.set(index, block);
    }
    if (chunk.kind === "text-delta" || chunk.kind === "reasoning-delta") {
      block.text.appendData(String(chunk.text));
    } else if (chunk.kind === "tool-call-delta") {
      if (chunk.name) block.name.data = `${chunk.name}(…)`;
      block.text.appendData(String(chunk.arguments_delta || ""));
    } else if (chunk.kind === "block-end" && chunk.block) {
      const final = chunk.block;
      if (final.type === "tool-call") block.text.data = String(final.arguments || "");
      else if (typeof final.text === "string") block.text.data = final.text;
    }
  }

  liveBlock(type) {
    const text = document.createTextNode("");
    if (type === "tool-call") {
      const name = document.createTextNode("tool call");
      this.live.entry.append(
        el("div", { class: "call-live" }, el("span", { class: "name" }, name), el("pre", {}, text)),
      );
      return { name, text };
    }
    if (type === "reasoning") {
      const block = reasoningBlock("");
      block.body.append(text);
      this.live.entry.append(block.node);
      return { text };
    }
    this.live.entry.append(el("div", { class: "text" }, text));
    return { text };
  }
}

/** Reasoning under a small "reasoning" label; the testid'd body holds only the model's text. */
function reasoningBlock(text) {
  const body = el("div", { class: "reasoning", "data-testid": "reasoning" }, text || undefined);
  return { node: el("div", { class: "thought" }, el("div", { class: "label" }, "reasoning"), body), body };
}

const DECIDE_PAUSED = "Offline: deciding is paused until the connection is back";

class ToolEntry {
  constructor(callId, name, args, decide) {
    this.callId = callId;
    this.decide = decide;
    this.nameNode = document.createTextNode("");
    this.stateNode = el("span", { class: "state", "data-testid": "tool-state" });
    this.argsNode = el("pre", { class: "args", "data-testid": "tool-args" });
    this.approval = el("div", { class: "approval", hidden: true });
    this.resultNode = el("pre", { class: "result", "data-testid": "tool-result", hidden: true });
    this.entry = el(
      "li",
      { class: "entry tool", "data-role": "tool", "data-call-id": callId },
      el("div", { class: "who" }, "tool ", el("span", { class: "name" }, this.nameNode), " ", this.stateNode),
      this.argsNode,
      this.approval,
      this.resultNode,
    );
    this.denyReason = "";
    this.offline = false; // the feed is reconnecting: Allow / Deny wait
    this.deciding = false; // a decision is in flight
    this.fill(name, args);
    this.setState("requested");
  }

  fill(name, args) {
    if (name !== undefined) this.nameNode.data = String(name);
    if (args !== undefined) this.argsNode.textContent = prettyArguments(args);
  }

  /** ``detail`` (an error code) goes in the title: on hover, not in the sentence. */
  setState(state, detail) {
    this.state = state;
    this.stateNode.textContent = state;
    if (detail) this.stateNode.title = detail;
    else this.stateNode.removeAttribute("title");
    this.entry.dataset.state = state;
  }

  ask(reason) {
    this.setState("waiting for approval");
    const allow = el("button", { type: "button", class: "allow", "data-testid": "approval-allow" }, "Allow");
    const deny = el("button", { type: "button", class: "deny", "data-testid": "approval-deny" }, "Deny");
    const choose = async (decision) => {
      if (this.deciding || this.offline) return;
      this.deciding = true;
      this.syncButtons();
      try {
        await this.decide(this.callId, decision);
      } catch {
        this.deciding = false; // the error is shown by the page
        this.syncButtons();
      }
    };
    allow.addEventListener("click", () => choose("allow"));
    deny.addEventListener("click", () => choose("deny"));
    this.approval.replaceChildren(
      el("span", { class: "ask" }, reason ? `Approve? ${reason}` : "Approve this call?"),
      allow,
      deny,
    );
    this.deciding = false;
    this.syncButtons();
    this.approval.hidden = false;
  }

  setOffline(offline) {
    this.offline = offline;
    this.syncButtons();
  }

  /** Allow / Deny are disabled while a decision is in flight or the feed is offline (then
   * with a title saying why). */
  syncButtons() {
    for (const button of this.approval.querySelectorAll("button")) {
      button.disabled = this.deciding || this.offline;
      if (this.offline) button.title = DECIDE_PAUSED;
      else button.removeAttribute("title");
    }
  }

  decided(decision, reason) {
    if (decision !== "allow") {
      this.deny(reason);
      return;
    }
    this.approval.replaceChildren(
      el("span", { class: "decided allowed", "data-testid": "approval-decision" }, reason ? `allowed: ${reason}` : "allowed"),
    );
    this.approval.hidden = false;
    this.setState("running");
  }

  /** One "denied" state: the label says it, one line says why (the decision's reason, else
   * what the model was told); the DENIED result adds nothing more. */
  deny(reason) {
    if (reason) this.denyReason = reason;
    const why = this.denyReason || "";
    this.approval.replaceChildren(
      el(
        "span",
        { class: "decided denied", "data-testid": "approval-decision" },
        why ? `Not run. Reason: ${why}` : "Not run.",
      ),
    );
    this.approval.hidden = false;
    this.resultNode.hidden = true;
    this.entry.classList.remove("failed");
    this.setState("denied", "DENIED");
  }

  /** The call is over (a result, or its turn ended): no decision can be asked any more. */
  settle() {
    if (this.approval.querySelector("button")) {
      this.approval.replaceChildren();
      this.approval.hidden = true;
    }
  }

  result(text, isError, code) {
    this.settle();
    this.resultNode.textContent = text;
    if (code === "DENIED") {
      if (!this.denyReason) this.denyReason = text;
      this.deny();
      return;
    }
    this.resultNode.hidden = false;
    this.entry.classList.toggle("failed", isError);
    if (isError) this.setState("failed", code);
    else this.setState("done");
  }
}
