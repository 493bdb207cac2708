// "Replay from here…": run a session again from the turn of one assistant message with a
// served profile's model (and, optionally, another system prompt) as a new session, and show
// the report side by side — recorded vs replayed, per turn (POST /v1/sessions/{id}/replays,
// which runs steerloop.evals.replay: tools are answered from the recording).

import { call, sessionPath } from "./api.js";
import { el } from "./transcript.js";

function usageText(usage) {
  if (!usage) return "";
  const parts = [`in ${usage.input_tokens ?? 0}`, `out ${usage.output_tokens ?? 0}`];
  if (usage.cached_input_tokens) parts.push(`cached ${usage.cached_input_tokens}`);
  if (usage.reasoning_tokens) parts.push(`reasoning ${usage.reasoning_tokens}`);
  return parts.join(" · ");
}

/** One side of a turn: its final text, end, steps, tool calls and usage. */
function side(run, testid) {
  if (!run) return el("td", { "data-testid": testid, class: "missing" }, "(not run)");
  const calls = (run.calls || []).map((c) => `${c.name}(${c.arguments || ""})${c.error ? ` → ${c.error}` : ""}`);
  return el(
    "td",
    { "data-testid": testid },
    el("div", { class: "text", "data-testid": "replay-text" }, String(run.text || "")),
    el("div", { class: "meta" }, `${run.end} · ${run.steps} step${run.steps === 1 ? "" : "s"} · ${usageText(run.usage)} · ${run.wall_ms} ms`),
    calls.length ? el("pre", { class: "calls" }, calls.join("\n")) : null,
  );
}

/** The report: where it first diverged, then each turn recorded | replayed. */
function reportView(answer) {
  const report = answer.report;
  const first = report.diverged_at;
  const link = new URL(window.location.href);
  link.search = "";
  link.searchParams.set("session", answer.session_id);
  const rows = (report.turns || []).map((turn) =>
    el(
      "tr",
      { "data-testid": "replay-turn", "data-turn": turn.turn, "data-diverged": turn.divergences.length > 0 },
      el("th", { scope: "row" }, `turn ${turn.turn}`),
      side(turn.recorded, "replay-recorded"),
      side(turn.new, "replay-new"),
    ),
  );
  return el(
    "div",
    { class: "replay-report", "data-testid": "replay-report" },
    el(
      "p",
      { "data-testid": "replay-divergence" },
      first ? `First divergence: turn ${first.turn}, step ${first.step}: ${first.detail}` : "No divergence.",
    ),
    el(
      "p",
      {},
      `${report.recorded_model || "recorded"} → ${report.model} · new session `,
      el("a", { href: link.pathname + link.search, "data-testid": "replay-session" }, answer.session_id),
    ),
    el(
      "table",
      {},
      el("thead", {}, el("tr", {}, el("th", {}), el("th", {}, "recorded"), el("th", {}, "replay"))),
      el("tbody", {}, ...rows),
    ),
    el("details", {}, el("summary", {}, "report (Markdown)"), el("pre", { "data-testid": "replay-markdown" }, answer.markdown)),
  );
}

export class ReplayDialog {
  /** @param {() => string | null} session the selected session id */
  constructor(session) {
    this.session = session;
    this.dialog = null;
  }

  /** The "Replay from here…" button of an assistant message (``data.turn``: its turn). */
  decorate(entry, data) {
    if (typeof data.turn !== "number") return;
    // The label is drawn by the stylesheet (::after, aria-label for assistive tech), so the
    // entry's text stays the model's words alone.
    const button = el("button", {
      type: "button",
      class: "replay-open",
      "data-testid": "replay-open",
      "data-turn": data.turn,
      "aria-label": "Replay from here…",
      title: `Replay this session from turn ${data.turn} with another model or prompt`,
    });
    button.addEventListener("click", () => this.open(data.turn));
    entry.append(button);
  }

  build() {
    const profile = el("select", { "data-testid": "replay-profile", "aria-label": "Model" });
    const system = el("textarea", { "data-testid": "replay-system", rows: "4", placeholder: "System prompt (empty: the recorded one)" });
    const run = el("button", { type: "submit", class: "send", "data-testid": "replay-run" }, "Run replay");
    const close = el("button", { type: "button", "data-testid": "replay-close" }, "Close");
    const status = el("p", { class: "replay-status", "data-testid": "replay-status", role: "status" });
    const output = el("div", { class: "replay-output" });
    const form = el(
      "form",
      { class: "replay-form" },
      el("h2", { "data-testid": "replay-title" }),
      el("label", {}, "Model ", profile),
      el("label", {}, "System prompt", system),
      el("div", { class: "buttons" }, run, close),
      status,
    );
    const dialog = el("dialog", { class: "replay", "data-testid": "replay-dialog" }, form, output);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.run();
    });
    close.addEventListener("click", () => dialog.close());
    document.body.append(dialog);
    this.dialog = dialog;
    this.parts = { profile, system, run, status, output, title: form.querySelector("h2") };
  }

  async open(turn) {
    if (!this.dialog) this.build();
    const parts = this.parts;
    this.turn = turn;
    this.sessionId = this.session();
    parts.title.textContent = `Replay from turn ${turn}`;
    parts.output.replaceChildren();
    parts.status.textContent = "";
    parts.run.disabled = true;
    this.dialog.showModal();
    try {
      const { profiles } = await call("GET", "/v1/profiles");
      parts.profile.replaceChildren(
        ...profiles.map((p) => el("option", { value: p.name }, `${p.name} · ${p.provider}/${p.model}`)),
      );
      parts.run.disabled = profiles.length === 0;
      if (!profiles.length) parts.status.textContent = "No served profile has a model.";
    } catch (error) {
      parts.status.textContent = `Models not listed: ${error.message}`;
    }
  }

  async run() {
    const parts = this.parts;
    const body = { from_turn: this.turn, profile: parts.profile.value };
    if (parts.system.value.trim()) body.system_prompt = parts.system.value;
    parts.run.disabled = true;
    parts.status.textContent = "Replaying…";
    parts.output.replaceChildren();
    try {
      const answer = await call("POST", sessionPath(this.sessionId, "/replays"), body);
      parts.status.textContent = "Done.";
      parts.output.replaceChildren(reportView(answer));
    } catch (error) {
      parts.status.textContent = `Replay failed: ${error.message}`;
    } finally {
      parts.run.disabled = false;
    }
  }
}
