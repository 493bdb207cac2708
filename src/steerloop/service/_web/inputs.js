// Input requests in the transcript: an MCP server asks the user something during a call
// (`input/requested`); the page shows a form built from the requested JSON schema and
// answers with Accept / Decline / Cancel (POST /v1/sessions/{id}/inputs/{input_id}). The
// form closes when the answer is logged (`input/answered`), or when its call or turn ends.
//
// The schema is MCP elicitation's restricted one: an object of flat properties, each a
// string (optionally a format, or an enum / oneOf of consts), a number or integer, a boolean,
// or an array of enum values (several choices); `required` and `default` are honoured.

import { el } from "./transcript.js";

const FORMATS = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };
const PAUSED = "Offline: answering is paused until the connection is back";

/** The choices of a property (`enum` + `enumNames`, or `oneOf` / `anyOf` of consts). */
function choicesOf(spec) {
  if (!spec || typeof spec !== "object") return null;
  if (Array.isArray(spec.enum)) {
    const names = Array.isArray(spec.enumNames) ? spec.enumNames : [];
    return spec.enum.map((value, i) => ({ value, title: String(names[i] ?? value) }));
  }
  const options = Array.isArray(spec.oneOf) ? spec.oneOf : Array.isArray(spec.anyOf) ? spec.anyOf : null;
  if (options && options.every((o) => o && "const" in o))
    return options.map((o) => ({ value: o.const, title: String(o.title ?? o.const) }));
  return null;
}

/** One field of the form: its element and a `read()` giving [present, value]. */
function field(name, spec, required) {
  spec = spec && typeof spec === "object" ? spec : {};
  const id = `input-${Math.random().toString(36).slice(2)}-${name}`;
  const title = String(spec.title || name);
  const label = el("label", { for: id }, title, required ? el("span", { class: "req" }, " *") : null);
  const hint = spec.description ? el("div", { class: "hint" }, String(spec.description)) : null;
  const attrs = { id, "data-testid": "input-field", "data-name": name, required };
  const choices = choicesOf(spec);
  const itemChoices = spec.type === "array" ? choicesOf(spec.items) : null;
  let control;
  let read;
  if (spec.type === "boolean") {
    control = el("input", { ...attrs, type: "checkbox", required: false });
    control.checked = spec.default === true;
    read = () => [true, control.checked];
  } else if (itemChoices) {
    const chosen = new Set(Array.isArray(spec.default) ? spec.default : []);
    const boxes = itemChoices.map((choice) => {
      const box = el("input", { type: "checkbox", "data-value": JSON.stringify(choice.value) });
      box.checked = chosen.has(choice.value);
      return { box, choice };
    });
    control = el(
      "div",
      { ...attrs, class: "choices", required: false },
      ...boxes.map(({ box, choice }) => el("label", {}, box, ` ${choice.title}`)),
    );
    read = () => {
      const values = boxes.filter(({ box }) => box.checked).map(({ choice }) => choice.value);
      return [values.length > 0 || required, values];
    };
  } else if (choices) {
    control = el(
      "select",
      attrs,
      required ? null : el("option", { value: "" }, "—"),
      ...choices.map((choice, i) => el("option", { value: String(i) }, choice.title)),
    );
    const preset = choices.findIndex((c) => c.value === spec.default);
    control.value = preset >= 0 ? String(preset) : required ? "0" : "";
    read = () => (control.value === "" ? [false] : [true, choices[Number(control.value)].value]);
  } else if (spec.type === "number" || spec.type === "integer") {
    control = el("input", {
      ...attrs,
      type: "number",
      step: spec.type === "integer" ? "1" : "any",
      min: spec.minimum,
      max: spec.maximum,
    });
    if (typeof spec.default === "number") control.value = String(spec.default);
    read = () => (control.value === "" ? [false] : [true, Number(control.value)]);
  } else {
    control = el("input", {
      ...attrs,
      type: FORMATS[spec.format] || "text",
      minlength: spec.minLength,
      maxlength: spec.maxLength,
    });
    if (typeof spec.default === "string") control.value = spec.default;
    read = () => (control.value === "" && !required ? [false] : [true, control.value]);
  }
  return { node: el("div", { class: "field" }, label, control, hint), read };
}

/** The form of one request; `send(body)` posts the answer (rejects on a refusal). */
function requestForm(request, send) {
  const schema = request.schema && typeof request.schema === "object" ? request.schema : null;
  const required = new Set(Array.isArray(schema && schema.required) ? schema.required : []);
  const props = (schema && schema.properties) || {};
  const fields = Object.entries(props).map(([name, spec]) => [name, field(name, spec, required.has(name))]);
  const error = el("div", { class: "input-error", "data-testid": "input-error", role: "alert", hidden: true });
  const form = el("form", { class: "input-form", novalidate: true });
  const accept = el("button", { type: "submit", class: "allow", "data-testid": "input-accept" }, "Accept");
  const decline = el("button", { type: "button", "data-testid": "input-decline" }, "Decline");
  const cancel = el("button", { type: "button", "data-testid": "input-cancel" }, "Cancel");
  const buttons = [accept, decline, cancel];
  let busy = false;
  let offline = false;
  const sync = () => {
    for (const button of buttons) {
      button.disabled = busy || offline;
      if (offline) button.title = PAUSED;
      else button.removeAttribute("title");
    }
  };
  const answer = async (action) => {
    if (busy || offline) return;
    let body = { action };
    if (action === "accept" && schema) {
      if (!form.reportValidity()) return; // the browser names the empty required field
      const content = {};
      for (const [name, f] of fields) {
        const [present, value] = f.read();
        if (present) content[name] = value;
      }
      body = { action, content };
    }
    busy = true;
    sync();
    error.hidden = true;
    try {
      await send(body);
    } catch (exc) {
      error.textContent = exc && exc.message ? exc.message : String(exc);
      error.hidden = false;
      busy = false;
      sync();
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    answer("accept");
  });
  decline.addEventListener("click", () => answer("decline"));
  cancel.addEventListener("click", () => answer("cancel"));
  const link = request.url
    ? el("a", { href: request.url, target: "_blank", rel: "noopener noreferrer", "data-testid": "input-url" }, request.url)
    : null;
  form.append(...fields.map(([, f]) => f.node), link || "", error, el("div", { class: "buttons" }, ...buttons));
  return { form, setOffline: (value) => ((offline = value), sync()) };
}

export class InputRequests {
  /**
   * @param {HTMLElement} list the transcript list the requests are appended to
   * @param {(inputId: string, body: object) => Promise<void>} send posts an answer
   */
  constructor(list, send) {
    this.list = list;
    this.send = send;
    this.reset();
  }

  reset() {
    this.open = new Map(); // input id -> {entry, body, callId, setOffline}
    this.offline = false;
  }

  /** One durable event of the session (every type comes here; the input ones and the ends
   * of calls and turns matter). Returns whether the transcript changed. */
  event(type, stored) {
    const data = (stored && stored.data) || {};
    if (type === "input/requested") this.requested(data);
    else if (type === "input/answered") this.answered(data);
    else if (type === "tool/result") this.callEnded((data.message || {}).call_id);
    else if (type === "turn/end") this.callEnded(undefined);
    else return false;
    return true;
  }

  setOffline(offline) {
    this.offline = offline;
    for (const open of this.open.values()) open.setOffline(offline);
  }

  requested(request) {
    if (this.open.has(request.id)) return;
    const { form, setOffline } = requestForm(request, (body) => this.send(request.id, body));
    const body = el("div", { class: "input-body" }, form);
    const entry = el(
      "li",
      { class: "entry input", "data-testid": "input-request", "data-input-id": request.id, "data-state": "pending" },
      el("div", { class: "who" }, `question · ${request.server}`),
      el("div", { class: "text", "data-testid": "input-message" }, String(request.message || "")),
      body,
    );
    this.list.append(entry);
    setOffline(this.offline);
    this.open.set(request.id, { entry, body, callId: request.call_id, setOffline });
  }

  /** The answer is logged: the form closes, one line says what was answered. */
  answered(answer) {
    const action = String(answer.action);
    const said = action === "accept" ? "accepted" : action === "decline" ? "declined" : "cancelled";
    const by = answer.by ? ` (${answer.by})` : "";
    this.close(answer.id, action, `${said}${by}`);
  }

  /** The call that asked ended (a result, or its turn ended): no answer is taken any more. */
  callEnded(callId) {
    for (const [id, open] of this.open) {
      if (callId === undefined || open.callId === callId) this.close(id, "closed", "no longer asked");
    }
  }

  close(inputId, state, text) {
    const open = this.open.get(inputId);
    if (!open) return;
    this.open.delete(inputId);
    open.entry.dataset.state = state;
    open.body.replaceChildren(el("div", { class: "decided", "data-testid": "input-answered", "data-action": state }, text));
  }
}
