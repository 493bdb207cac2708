// MCP prompts in the composer: typing "/" lists the session's prompts (GET
// /v1/sessions/{id}/prompts); a line "/server:prompt args…" is sent through POST
// /v1/sessions/{id}/prompts, which expands it on the server into the user message (logged
// with the prompt as its source) instead of sending the line as typed.

import { call, sessionPath } from "./api.js";
import { el } from "./transcript.js";

const COMMAND = /^\/[A-Za-z0-9_-]{1,64}:\S+/;
const MAX_SHOWN = 50;

/** Whether ``text`` is a prompt command (``/server:prompt …``). */
export function isPromptCommand(text) {
  return COMMAND.test(text.trim());
}

/** Send the prompt command ``text`` to ``sessionId`` as ``mode`` under message id ``id``. */
export function sendPrompt(sessionId, text, mode, id) {
  const body = { command: text.trim(), mode, message_id: id, idempotency_key: id };
  return call("POST", sessionPath(sessionId, "/prompts"), body);
}

/** What a prompt's arguments look like on the command line: ``name [optional]``. */
function usage(prompt) {
  return (prompt.arguments || []).map((a) => (a.required ? a.name : `[${a.name}]`)).join(" ");
}

export class PromptMenu {
  /**
   * @param {HTMLTextAreaElement} composer the message box
   * @param {HTMLElement} before the menu is placed before this element
   * @param {() => string | null} session the selected session id
   */
  constructor(composer, before, session) {
    this.composer = composer;
    this.session = session;
    this.menu = el("ul", { class: "prompt-menu", "data-testid": "prompt-menu", role: "listbox", hidden: true });
    before.before(this.menu);
    this.cache = new Map(); // session id -> prompts (a promise while listing)
    composer.addEventListener("input", () => this.update());
    composer.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !this.menu.hidden) {
        event.stopPropagation(); // closes the menu, does not stop the agent
        this.hide();
      }
    });
  }

  /** Forget the listing of a session (its servers may have changed). */
  forget() {
    this.cache.clear();
    this.hide();
  }

  hide() {
    this.menu.hidden = true;
  }

  async prompts(sessionId) {
    if (!this.cache.has(sessionId)) {
      const listed = call("GET", sessionPath(sessionId, "/prompts")).then(
        (answer) => answer.prompts || [],
        () => [],
      );
      this.cache.set(sessionId, listed);
    }
    return this.cache.get(sessionId);
  }

  /** Shown while the box holds only "/" and the start of a command's name. */
  async update() {
    const text = this.composer.value;
    const sessionId = this.session();
    if (sessionId === null || !/^\/\S*$/.test(text)) return this.hide();
    const prompts = await this.prompts(sessionId);
    if (this.composer.value !== text || this.session() !== sessionId) return; // typed on
    const wanted = text.slice(1).toLowerCase();
    const shown = prompts.filter((p) => p.command.slice(1).toLowerCase().startsWith(wanted)).slice(0, MAX_SHOWN);
    this.menu.replaceChildren(
      ...shown.map((prompt) => {
        const item = el(
          "li",
          { "data-testid": "prompt-item", "data-command": prompt.command, role: "option", tabindex: "0" },
          el("code", {}, `${prompt.command} ${usage(prompt)}`.trim()),
          prompt.description ? el("span", { class: "hint" }, ` — ${prompt.description}`) : null,
        );
        const choose = () => {
          this.composer.value = `${prompt.command} `;
          this.composer.dispatchEvent(new Event("input")); // the box refits, the menu closes
          this.composer.focus();
        };
        item.addEventListener("click", choose);
        item.addEventListener("keydown", (event) => event.key === "Enter" && choose());
        return item;
      }),
    );
    this.menu.hidden = shown.length === 0;
  }
}
