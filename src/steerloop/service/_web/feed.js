// The session's SSE feed, read with fetch so the token can travel in a header. Resumes
// after a dropped connection from the last id it handled (`seq` or `seq:n`) through
// Last-Event-ID, with a growing pause between attempts.

import { authHeaders, errorOf, sessionPath } from "./api.js";

const FIRST_PAUSE_MS = 250;
const MAX_PAUSE_MS = 4000;
const SILENCE_MS = 45000; // the server pings every 15 s: this much silence is a dead link

export class Feed {
  /**
   * @param {string} sessionId
   * @param {{event: (type: string, id: string, data: any) => void,
   *          state: (state: "live"|"reconnecting"|"unauthorized"|"failed", error?: Error) => void}} on
   */
  constructor(sessionId, on) {
    this.sessionId = sessionId;
    this.on = on;
    this.lastId = "";
    this.stopped = false;
    this.controller = null;
  }

  start() {
    this.run();
    return this;
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    let pause = FIRST_PAUSE_MS;
    while (!this.stopped) {
      const controller = new AbortController();
      this.controller = controller;
      try {
        const headers = authHeaders({ Accept: "text/event-stream" });
        if (this.lastId) headers["Last-Event-ID"] = this.lastId;
        const response = await fetch(sessionPath(this.sessionId, "/events"), {
          headers,
          cache: "no-store",
          signal: controller.signal,
        });
        if (!response.ok) {
          const error = await errorOf(response);
          if (response.status === 401) return this.on.state("unauthorized", error);
          if (response.status < 500) return this.on.state("failed", error);
          throw error;
        }
        this.on.state("live");
        pause = FIRST_PAUSE_MS;
        await this.read(response.body, controller);
      } catch {
        // a refused connection, a reset, a 5xx or our own abort: decided below
      }
      if (this.stopped) return;
      this.on.state("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, MAX_PAUSE_MS);
    }
  }

  async read(body, controller) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let event = { type: "", id: null, data: [] };
    let watchdog = setTimeout(() => controller.abort(), SILENCE_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done || this.stopped) return;
        clearTimeout(watchdog);
        watchdog = setTimeout(() => controller.abort(), SILENCE_MS);
        buffer += decoder.decode(value, { stream: true });
        // Lines end with \r\n, \n or \r; a lone \r at the end may be half of a \r\n.
        let match;
        while ((match = /\r\n|\n|\r(?=[^\n])/.exec(buffer))) {
          const line = buffer.slice(0, match.index);
          buffer = buffer.slice(match.index + match[0].length);
          if (line === "") {
            if (event.data.length) this.dispatch(event);
            event = { type: "", id: null, data: [] };
            continue;
          }
          if (line.startsWith(":")) continue; // a ping
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "event") event.type = value;
          else if (field === "data") event.data.push(value);
          else if (field === "id" && !value.includes("\0")) event.id = value;
        }
      }
    } finally {
      clearTimeout(watchdog);
      reader.cancel().catch(() => {});
    }
  }

  dispatch(event) {
    if (this.stopped) return; // the page moved on to another session
    let data;
    try {
      data = JSON.parse(event.data.join("\n"));
    } catch {
      return; // not ours: every frame of this feed is JSON
    }
    this.on.event(event.type || "message", event.id || "", data);
    // Advanced only once handled: a reconnect resumes after what the page has shown.
    if (event.id) this.lastId = event.id;
  }
}
