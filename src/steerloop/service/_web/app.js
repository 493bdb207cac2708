// The chat page: the session list, the selected session (kept in the URL as ?session=ID),
// its live transcript and one composer that sends a followup when idle and a steer while
// the agent runs.

import { ApiError, call, sessionPath, setToken } from "./api.js";
import { Feed } from "./feed.js";
import { Transcript, el } from "./transcript.js";

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const LIST_REFRESH_MS = 15000;

const ui = {
  sessions: $("session-list"),
  newSession: $("new-session"),
  title: $("session-title"),
  connection: $("connection"),
  status: $("status"),
  scroll: $("scroll"),
  empty: $("empty"),
  composer: $("composer"),
  form: $("composer-form"),
  send: $("send"),
  stop: $("stop"),
  error: $("error"),
  overlay: $("token-overlay"),
  tokenForm: $("token-form"),
  token: $("token"),
  tokenError: $("token-error"),
};

let current = null; // the selected session id
const createdHere = new Map(); // session id -> when this page created it (ms)
let feed = null;
let sending = false;
let stickToBottom = true;

const transcriptList = $("transcript");
const queueList = $("queue");
const transcript = new Transcript({
  list: transcriptList,
  queue: queueList,
  changed: render,
  decide: (callId, decision) =>
    guarded(() =>
      call("POST", sessionPath(current, `/approvals/${encodeURIComponent(callId)}`), { decision }),
    ),
});

// --- errors and the token ---------------------------------------------------------------

function showError(error) {
  if (error instanceof ApiError && error.status === 401) {
    askToken(error.message);
    return;
  }
  ui.error.textContent = error instanceof ApiError ? `${error.message} (${error.code})` : String(error);
  ui.error.hidden = false;
}

function clearError() {
  ui.error.hidden = true;
  ui.error.textContent = "";
}

/** Runs ``action``; a failure is shown in the page and rethrown. */
async function guarded(action) {
  try {
    const result = await action();
    clearError();
    return result;
  } catch (error) {
    showError(error);
    throw error;
  }
}

function askToken(message) {
  ui.tokenError.textContent = message || "";
  ui.overlay.hidden = false;
  ui.token.value = "";
  ui.token.focus();
}

ui.tokenForm.addEventListener("submit", (event) => {
  event.preventDefault();
  setToken(ui.token.value.trim());
  ui.token.value = "";
  ui.overlay.hidden = true;
  boot();
});

// --- sessions ---------------------------------------------------------------------------

async function refreshSessions() {
  const { sessions } = await call("GET", "/v1/sessions");
  // Most recent first: its last event, or when this page created it (a new session has none).
  const recency = (row) =>
    Math.max(Number(row.updated_at) || 0, createdHere.get(row.session_id) || 0);
  const rows = [...sessions].sort(
    (a, b) =>
      (recency(b) > recency(a)) - (recency(b) < recency(a)) ||
      a.session_id.localeCompare(b.session_id),
  );
  ui.sessions.replaceChildren(
    ...rows.map((row) => {
      const link = el("a", { href: urlFor(row.session_id), class: "open" }, row.session_id);
      link.addEventListener("click", (event) => {
        if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
        event.preventDefault();
        select(row.session_id, true);
      });
      return el(
        "li",
        {
          "data-testid": "session-item",
          "data-session-id": row.session_id,
          "aria-current": row.session_id === current ? "page" : undefined,
        },
        link,
        el("span", { class: `badge ${row.status}` }, row.status),
      );
    }),
  );
  render();
}

function urlFor(sessionId) {
  const url = new URL(window.location.href);
  url.search = "";
  url.hash = "";
  url.searchParams.set("session", sessionId);
  return url.pathname + url.search;
}

function select(sessionId, push) {
  if (push && sessionId !== current) window.history.pushState(null, "", urlFor(sessionId));
  if (sessionId === current && feed) return;
  if (feed) feed.stop();
  feed = null;
  current = sessionId;
  transcript.reset();
  stickToBottom = true;
  clearError();
  for (const item of ui.sessions.children) {
    if (item.dataset.sessionId === current) item.setAttribute("aria-current", "page");
    else item.removeAttribute("aria-current");
  }
  if (current !== null) {
    feed = new Feed(current, { event: onEvent, state: onFeedState }).start();
  }
  render();
}

function onEvent(type, id, data) {
  if (type === "stream") transcript.frame(data);
  else transcript.event(type, data);
  if (type === "turn/start" || type === "turn/end") refreshSoon();
}

let refreshTimer = 0;

/** One list refresh for a burst of turn boundaries (a long log replays many). */
function refreshSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = 0;
    refreshSessions().catch(() => {});
  }, 300);
}

function onFeedState(state, error) {
  ui.connection.hidden = state === "live";
  if (state === "reconnecting") ui.connection.textContent = "reconnecting…";
  if (state === "unauthorized") {
    ui.connection.hidden = true;
    askToken(error.message);
  } else if (state === "failed") {
    ui.connection.hidden = true;
    showError(error);
  }
}

ui.newSession.addEventListener("click", async () => {
  const created = await guarded(() => call("POST", "/v1/sessions", {})).catch(() => null);
  if (!created) return;
  createdHere.set(created.session_id, Date.now());
  await refreshSessions().catch(() => {});
  select(created.session_id, true);
  ui.composer.focus();
});

window.addEventListener("popstate", () => select(sessionFromUrl(), false));

function sessionFromUrl() {
  return new URL(window.location.href).searchParams.get("session") || null;
}

// --- the composer -----------------------------------------------------------------------

function newMessageId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes); // also in an insecure context, unlike randomUUID
  return `msg_web_${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

async function submit() {
  const text = ui.composer.value;
  if (!text.trim() || sending) return;
  sending = true;
  ui.send.disabled = true;
  const mode = transcript.running ? "steer" : "followup";
  try {
    if (current === null) {
      const created = await guarded(() => call("POST", "/v1/sessions", { input: text }));
      createdHere.set(created.session_id, Date.now());
      consumed(text);
      await refreshSessions().catch(() => {});
      select(created.session_id, true);
    } else {
      const id = newMessageId();
      const body = { mode, content: text, message_id: id, idempotency_key: id };
      await guarded(() => call("POST", sessionPath(current, "/messages"), body));
      consumed(text);
      transcript.posted(id, text, mode);
    }
  } catch {
    // shown by guarded(); the typed text stays in the box
  } finally {
    sending = false;
    render();
  }
}

/** Clears what was sent, keeping anything typed while the request was in flight. */
function consumed(text) {
  const now = ui.composer.value;
  ui.composer.value = now.startsWith(text) ? now.slice(text.length).replace(/^\n/, "") : now;
}

async function stop() {
  if (current === null || !transcript.running) return;
  await guarded(() => call("POST", sessionPath(current, "/cancel"), {})).catch(() => {});
}

ui.form.addEventListener("submit", (event) => {
  event.preventDefault();
  submit();
});
ui.stop.addEventListener("click", () => stop());
ui.composer.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.altKey) {
    event.preventDefault();
    submit();
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && ui.overlay.hidden) {
    event.preventDefault();
    stop();
  }
});

// --- rendering --------------------------------------------------------------------------

ui.scroll.addEventListener("scroll", () => {
  const { scrollTop, scrollHeight, clientHeight } = ui.scroll;
  stickToBottom = scrollHeight - scrollTop - clientHeight < 48;
});

let scheduled = false;

function render() {
  const running = transcript.running;
  ui.status.textContent = running ? "running" : "idle";
  ui.status.dataset.status = running ? "running" : "idle";
  ui.stop.disabled = !running || current === null;
  ui.send.disabled = sending;
  ui.send.textContent = running ? "Steer" : "Send";
  ui.title.textContent = current === null ? "No session selected" : current;
  for (const item of ui.sessions.children) {
    const badge = item.querySelector(".badge");
    if (item.dataset.sessionId !== current || !badge) continue;
    badge.textContent = ui.status.textContent; // the feed is fresher than the last listing
    badge.className = `badge ${badge.textContent}`;
  }
  const blank = transcriptList.childElementCount === 0 && queueList.childElementCount === 0;
  ui.empty.hidden = current !== null && !blank;
  ui.empty.textContent =
    current === null
      ? "Pick a session, or type below to start a new one."
      : "No messages yet: type below to start.";
  if (!scheduled && stickToBottom) {
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      if (stickToBottom) ui.scroll.scrollTop = ui.scroll.scrollHeight;
    });
  }
}

// --- start ------------------------------------------------------------------------------

async function boot() {
  try {
    await refreshSessions();
  } catch (error) {
    showError(error);
    return;
  }
  clearError();
  const wanted = sessionFromUrl();
  if (feed && wanted === current) {
    feed.stop(); // reopened below, with the token just given
    feed = null;
  }
  select(wanted, false);
}

setInterval(() => {
  if (document.visibilityState === "visible" && ui.overlay.hidden)
    refreshSessions().catch(() => {});
}, LIST_REFRESH_MS);

boot();
render();
