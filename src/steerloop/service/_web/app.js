// The chat page: the session list, the selected session (kept in the URL as ?session=ID),
// its live transcript and one composer that sends a followup when idle and a steer while
// the agent runs.

import { ApiError, call, sessionPath, setToken } from "./api.js";
import { Attachments, wireAttachments } from "./attach.js";
import { Feed } from "./feed.js";
import { InputRequests } from "./inputs.js";
import { PromptMenu, isPromptCommand, sendPrompt } from "./prompts.js";
import { ReplayDialog } from "./replay.js";
import { Transcript, el, textOf } from "./transcript.js";

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const LIST_REFRESH_MS = 15000;
const TITLE_EVENTS = 12; // the first page of a log holds its first user message
const TITLE_CHARS = 80;
const KEYS = " · Enter sends · Esc stops"; // Shift+Enter for a new line, as everywhere
const ruler = document.createElement("canvas").getContext("2d");

const ui = {
  sessions: $("session-list"),
  newSession: $("new-session"),
  title: $("session-title"),
  connection: $("connection"),
  status: $("status"),
  scroll: $("scroll"),
  empty: $("empty"),
  emptyText: $("empty-text"),
  retry: $("retry"),
  composer: $("composer"),
  form: $("composer-form"),
  send: $("send"),
  stop: $("stop"),
  error: $("error"),
  noModel: $("no-model"),
  overlay: $("token-overlay"),
  tokenForm: $("token-form"),
  token: $("token"),
  tokenError: $("token-error"),
};

let current = null; // the selected session id
let missing = false; // the selected session's feed answered 404
let offline = false; // the selected session's feed is reconnecting
let tokenTried = false; // a token was typed in since the last 401
const titles = new Map(); // session id -> its first user message (absent: not known yet)
const titleLookups = new Map(); // session id -> the last_seq its log was last read at
const createdHere = new Map(); // session id -> when this page created it (ms)
let feed = null;
let sending = false;
let stickToBottom = true;

const attachments = new Attachments($("attachments"), (message) =>
  showError(new ApiError(0, "attachment_refused", message), "Not attached"),
);
wireAttachments(attachments, {
  button: $("attach"),
  input: $("attach-input"),
  composer: ui.composer,
  dropZone: document.querySelector(".chat"),
});

const transcriptList = $("transcript");
const queueList = $("queue");
const replayDialog = new ReplayDialog(() => current);
const transcript = new Transcript({
  list: transcriptList,
  queue: queueList,
  changed: render,
  decorate: (entry, data) => replayDialog.decorate(entry, data),
  decide: (callId, decision) =>
    guarded(
      () =>
        call("POST", sessionPath(current, `/approvals/${encodeURIComponent(callId)}`), { decision }),
      "Decision not sent",
    ),
});

const inputs = new InputRequests(transcriptList, (inputId, body) =>
  guarded(
    () => call("POST", sessionPath(current, `/inputs/${encodeURIComponent(inputId)}`), body),
    "Answer not sent",
  ),
);

const promptMenu = new PromptMenu(ui.composer, ui.form, () => current);

// --- errors and the token ---------------------------------------------------------------

function showError(error, what = "") {
  if (error instanceof ApiError && error.status === 401) {
    askToken();
    return;
  }
  if (error instanceof ApiError && error.code === "NO_MODEL") {
    ui.noModel.hidden = false; // what to configure, in the page (the server says it too)
    ui.noModel.title = error.message;
    return;
  }
  // What failed, then the server's sentence; its code stays at hand (hover), out of the text.
  const said = error instanceof ApiError ? error.message : String(error);
  ui.error.textContent = what ? `${what}: ${said}` : said;
  if (error instanceof ApiError) ui.error.title = `${error.code} (HTTP ${error.status || "—"})`;
  else ui.error.removeAttribute("title");
  ui.error.hidden = false;
}

function clearError() {
  ui.noModel.hidden = true;
  ui.error.hidden = true;
  ui.error.textContent = "";
  ui.error.removeAttribute("title");
}

/** Runs ``action``; a failure is shown in the page (after ``what``, e.g. "Not sent") and
 * rethrown. */
async function guarded(action, what = "") {
  try {
    const result = await action();
    clearError();
    return result;
  } catch (error) {
    showError(error, what);
    throw error;
  }
}

/** The token dialog: first just the question; after a refused token, that it was refused. */
function askToken() {
  ui.tokenError.textContent = tokenTried ? "That token was refused. Check it and try again." : "";
  ui.tokenError.hidden = !tokenTried;
  tokenTried = false;
  ui.overlay.hidden = false;
  ui.token.value = "";
  ui.token.focus();
}

ui.tokenForm.addEventListener("submit", (event) => {
  event.preventDefault();
  setToken(ui.token.value.trim());
  tokenTried = true;
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
      const link = el("a", { href: urlFor(row.session_id), class: "open", title: row.session_id });
      link.addEventListener("click", (event) => {
        if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
        event.preventDefault();
        select(row.session_id, true);
      });
      const item = el(
        "li",
        {
          "data-testid": "session-item",
          "data-session-id": row.session_id,
          "data-last-seq": row.last_seq,
          "aria-current": row.session_id === current ? "page" : undefined,
        },
        link,
        badge(row.status),
      );
      return item;
    }),
  );
  relabel();
  for (const item of ui.sessions.children) onScreen.observe(item);
  render();
}

/** A session's state as a person reads it: one no worker holds ("unloaded") is idle too,
 * loaded again by its next message. */
function badge(status) {
  const shown = status === "unloaded" ? "idle" : status;
  const title = status === "unloaded" ? "idle, not loaded: the next message loads it" : "";
  return el("span", { class: `badge ${shown}`, "data-status": status, title }, shown);
}

/** Each listed session's name: its title, and where two share one, the end of its id too. */
function relabel() {
  const items = [...ui.sessions.children];
  const named = items.map((item) => titles.get(item.dataset.sessionId) || item.dataset.sessionId);
  const count = new Map();
  for (const name of named) count.set(name, (count.get(name) || 0) + 1);
  items.forEach((item, index) => {
    const id = item.dataset.sessionId;
    const name = named[index];
    const text = count.get(name) > 1 && name !== id ? `${name} · ${id.slice(-6)}` : name;
    const link = item.querySelector("a.open");
    if (link.textContent !== text) link.textContent = text;
  });
}

// --- titles: a session is named by its first user message -------------------------------
// The list answer carries ids only; each item, once on screen, reads the first page of its
// log (a few events) once, and again only when the session has grown since a read that
// found no user message yet.

const onScreen = new IntersectionObserver(
  (seen) => {
    for (const entry of seen) {
      if (!entry.isIntersecting) continue;
      onScreen.unobserve(entry.target);
      lookUpTitle(entry.target.dataset.sessionId, Number(entry.target.dataset.lastSeq) || 0);
    }
  },
  { root: ui.sessions },
);

async function lookUpTitle(sessionId, lastSeq) {
  if (titles.has(sessionId) || titleLookups.get(sessionId) === lastSeq) return;
  if (sessionId === current) return; // its open feed names it
  // Made by this page, which names it (its first message, or the feed once it is opened):
  // a list refreshed while the page creates it must not read its log.
  if (createdHere.has(sessionId)) return;
  titleLookups.set(sessionId, lastSeq);
  let events;
  try {
    ({ events } = await call("GET", sessionPath(sessionId, `/log?limit=${TITLE_EVENTS}`)));
  } catch {
    titleLookups.delete(sessionId); // tried again on its next listing
    return;
  }
  for (const stored of events) {
    const text = firstUserText(stored);
    if (text) return nameSession(sessionId, text);
  }
}

/** The text of a user-sourced message in a log event (a user/message or an inbox insert). */
function firstUserText(stored) {
  const data = (stored && stored.data) || {};
  const messages =
    stored.type === "user/message" ? [data] : stored.type === "agent/inbox/spliced" ? data.inserted || [] : [];
  for (const message of messages) {
    const source = message && message.source && message.source.kind;
    if (source && source !== "user") continue;
    const text = textOf(message.content);
    if (text.trim()) return text;
  }
  return "";
}

/** A first message's name when it has parts: its text, else its first attachment's name. */
function textOfParts(parts) {
  const text = parts.filter((p) => p.type === "text").map((p) => p.text).join(" ");
  return text.trim() ? text : (parts.find((p) => p.name) || { name: "attachment" }).name;
}

function nameSession(sessionId, message) {
  if (titles.has(sessionId)) return;
  const text = message.replace(/\s+/g, " ").trim();
  const title = text.length > TITLE_CHARS ? `${text.slice(0, TITLE_CHARS - 1)}…` : text;
  titles.set(sessionId, title);
  relabel();
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
  if (sessionId === current && feed) return; // a failed feed is dropped: a click retries
  if (feed) feed.stop();
  feed = null;
  current = sessionId;
  missing = false;
  offline = false;
  transcript.reset();
  inputs.reset();
  stickToBottom = true;
  clearError();
  for (const item of ui.sessions.children) {
    if (item.dataset.sessionId === current) item.setAttribute("aria-current", "page");
    else item.removeAttribute("aria-current");
  }
  if (current !== null) {
    const opened = new Feed(current, {
      event: onEvent,
      state: (state, error) => feed === opened && onFeedState(state, error),
    });
    feed = opened.start();
  }
  render();
}

function onEvent(type, id, data) {
  if (!titles.has(current)) {
    const text = type === "stream" ? "" : firstUserText({ type, data: data && data.data });
    if (text) nameSession(current, text);
  }
  if (type === "stream") transcript.frame(data);
  else transcript.event(type, data);
  if (type !== "stream" && inputs.event(type, data)) render();
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
  offline = state === "reconnecting";
  const listed = [...ui.sessions.children].some((item) => item.dataset.sessionId === current);
  if (state === "live" && !listed) refreshSoon(); // opened by its URL before the list had it
  if (state === "unauthorized" || state === "failed") feed = null; // selecting it again retries
  if (state === "unauthorized") {
    askToken();
  } else if (state === "failed") {
    missing = error instanceof ApiError && error.status === 404;
    if (!missing) showError(error);
  }
  render();
}

ui.newSession.addEventListener("click", async () => {
  const id = await createHere(undefined, "No new session").catch(() => null);
  if (id === null) return;
  await refreshSessions().catch(() => {});
  select(id, true);
  ui.composer.focus();
});

ui.retry.addEventListener("click", () => select(current, false));

window.addEventListener("popstate", () => select(sessionFromUrl(), false));

function sessionFromUrl() {
  return new URL(window.location.href).searchParams.get("session") || null;
}

// --- the composer -----------------------------------------------------------------------

function randomHex(n) {
  const bytes = new Uint8Array(n);
  crypto.getRandomValues(bytes); // also in an insecure context, unlike randomUUID
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function newMessageId() {
  return `msg_web_${randomHex(12)}`;
}

/** Create a session under an id minted here and marked as this page's before the POST, so
 * a list refreshed meanwhile (a turn boundary of the open session) does not read its log; a
 * first message names it at once. Returns the id; a refusal is shown and thrown. */
async function createHere(input, what) {
  const id = `s_${randomHex(10)}`;
  createdHere.set(id, Date.now());
  const body = input === undefined ? { session_id: id } : { session_id: id, input };
  try {
    await guarded(() => call("POST", "/v1/sessions", body), what);
  } catch (error) {
    createdHere.delete(id);
    throw error;
  }
  if (input !== undefined) nameSession(id, typeof input === "string" ? input : textOfParts(input));
  return id;
}

async function submit() {
  const text = ui.composer.value;
  if ((!text.trim() && attachments.count === 0) || sending || offline || missing) return;
  sending = true;
  ui.send.disabled = true;
  const mode = transcript.running ? "steer" : "followup";
  try {
    const prompt = isPromptCommand(text); // expanded by the server (prompts.js)
    const content = prompt ? text : await attachments.content(text); // text, or parts (attach.js)
    if (current === null) {
      const created = await createHere(prompt ? undefined : content, "Not sent");
      if (prompt) await guarded(() => sendPrompt(created, text, mode, newMessageId()), "Not sent");
      consumed(text);
      if (!prompt) attachments.clear();
      await refreshSessions().catch(() => {});
      select(created, true);
    } else {
      const id = newMessageId();
      const body = { mode, content, message_id: id, idempotency_key: id };
      if (prompt) await guarded(() => sendPrompt(current, text, mode, id), "Not sent");
      else await guarded(() => call("POST", sessionPath(current, "/messages"), body), "Not sent");
      consumed(text);
      if (!prompt) attachments.clear();
      transcript.posted(id, text, mode);
    }
    promptMenu.hide();
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
  fitComposer();
}

/** Whether ``text`` fits the composer on one line (the key hints go when it would not). */
function fitsComposer(text) {
  const style = getComputedStyle(ui.composer);
  ruler.font = `${style.fontSize} ${style.fontFamily}`;
  const room =
    ui.composer.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return ruler.measureText(text).width <= room;
}

/** The composer grows with its text up to its CSS max-height, then scrolls. */
function fitComposer() {
  const box = ui.composer;
  box.style.height = "auto";
  const border = box.offsetHeight - box.clientHeight;
  box.style.height = `${box.scrollHeight + border}px`;
}

async function stop() {
  if (current === null || offline || !transcript.running) return; // offline: Esc does nothing
  await guarded(() => call("POST", sessionPath(current, "/cancel"), {}), "Not stopped").catch(
    () => {},
  );
}

ui.form.addEventListener("submit", (event) => {
  event.preventDefault();
  submit();
});
ui.stop.addEventListener("click", () => stop());
ui.composer.addEventListener("input", fitComposer);
window.addEventListener("resize", render);
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

const PAUSED = "Offline: sending is paused until the connection is back";
const STOP_PAUSED = "Offline: stopping is paused until the connection is back";

function render() {
  const running = transcript.running;
  // The pill keeps the last state the feed told (idle / running); while the feed
  // reconnects it is marked stale (dimmed, "reconnecting…"), for an unknown session it goes.
  ui.status.textContent = running ? "running" : "idle";
  ui.status.dataset.status = running ? "running" : "idle";
  ui.status.hidden = current === null || missing;
  ui.status.toggleAttribute("data-stale", offline);
  ui.status.title = offline ? "last known state: the connection is lost" : "";
  ui.connection.hidden = !offline || current === null || missing;
  ui.stop.disabled = !running || current === null || missing || offline;
  ui.stop.title = offline ? STOP_PAUSED : "";
  transcript.setOffline(offline); // Allow / Deny: no decision is sent while offline
  inputs.setOffline(offline); // nor an answer to a server's question
  ui.send.disabled = sending || offline || missing;
  ui.send.title = offline ? PAUSED : missing ? "This session does not exist" : "";
  ui.send.textContent = running ? "Steer" : "Send";
  ui.composer.disabled = missing;
  const hint = running ? "Steer the running agent" : "Message the agent";
  const placeholder = missing
    ? "No session to send to"
    : fitsComposer(hint + KEYS)
      ? hint + KEYS
      : hint;
  if (ui.composer.placeholder !== placeholder) {
    ui.composer.placeholder = placeholder;
    fitComposer(); // an empty box is as tall as its placeholder
  }
  const title = current === null ? "No session selected" : titles.get(current) || current;
  ui.title.textContent = title;
  ui.title.title = current || "";
  for (const item of ui.sessions.children) {
    const pill = item.querySelector(".badge");
    if (item.dataset.sessionId !== current || !pill || missing) continue;
    pill.textContent = ui.status.textContent; // the feed is fresher than the last listing
    pill.className = `badge ${pill.textContent}`;
    pill.removeAttribute("title");
  }
  const blank = transcriptList.childElementCount === 0 && queueList.childElementCount === 0;
  ui.empty.hidden = current !== null && !blank && !missing;
  ui.empty.dataset.state = current === null ? "none" : missing ? "missing" : "blank";
  ui.retry.hidden = !missing;
  ui.emptyText.textContent =
    current === null
      ? "Pick a session, or type below to start a new one."
      : missing
        ? `No such session: “${current}”. Pick one from the list or start a new one.`
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
fitComposer();
