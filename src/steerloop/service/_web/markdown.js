// Markdown of the model's answers: marked parses, DOMPurify sanitises, the DOM gets a
// fragment. Both libraries are vendored, pinned release files (see vendor/README.md).
//
// Raw HTML in the text is shown as the text it is (a model writing `List<String>` or an
// `<img onerror=…>` means the characters), except `<br>`, a line break; DOMPurify then removes
// whatever else could run or load: event handlers, `javascript:` links, forms, images
// (the page's CSP would block a remote one anyway). Code blocks keep a monospace font and get
// a Copy button.

import { Marked } from "./marked.js";
import DOMPurify from "./purify.js";

const BREAK = /^<br\s*\/?>$/i;
const NUMBER = /^\s*(\d{1,9})[.)]/;
const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text) => text.replace(/[&<>"']/g, (c) => ESCAPES[c]);

const marked = new Marked({
  gfm: true,
  async: false,
  renderer: {
    html({ text }) {
      return BREAK.test(text.trim()) ? "<br>" : escapeHtml(text);
    },
    // Numbered lines keep the numbers written ("100." is not renumbered "1."): each item
    // gets its own `value`.
    list(token) {
      if (!token.ordered) return false; // marked's own bullet list
      const items = token.items.map((item) => {
        const written = NUMBER.exec(item.raw);
        const body = this.listitem(item);
        return written ? body.replace(/^<li>/, `<li value="${Number(written[1])}">`) : body;
      });
      return `<ol>\n${items.join("")}</ol>\n`;
    },
  },
});

const PURIFY = {
  FORBID_TAGS: ["img", "form", "input", "button", "textarea", "select", "style", "svg", "math"],
  FORBID_ATTR: ["style", "class", "id"],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/** `text` as a sanitised DOM fragment, code blocks with a Copy button. */
export function renderMarkdown(text) {
  const fragment = DOMPurify.sanitize(marked.parse(String(text)), PURIFY);
  // The newlines marked writes between blocks are no text of the answer.
  for (const node of [...fragment.childNodes]) {
    if (node.nodeType === Node.TEXT_NODE && !node.data.trim()) node.remove();
  }
  for (const pre of fragment.querySelectorAll("pre")) {
    const code = pre.querySelector("code") || pre;
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy";
    copy.dataset.testid = "copy-code";
    copy.textContent = "Copy";
    // marked ends a block with a newline: the copy is the code as written
    copy.addEventListener("click", () => copyText(code.textContent.replace(/\n$/, ""), copy));
    const box = document.createElement("div");
    box.className = "code";
    pre.replaceWith(box);
    box.append(copy, pre);
  }
  return fragment;
}

async function copyText(text, button) {
  let done = false;
  try {
    await navigator.clipboard.writeText(text); // a secure context (localhost, https)
    done = true;
  } catch {
    // plain http on another host: the older way, through a selected off-screen textarea
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.append(area);
    area.select();
    try {
      done = document.execCommand("copy");
    } catch {
      done = false;
    }
    area.remove();
  }
  button.textContent = done ? "Copied" : "Copy failed";
  setTimeout(() => {
    button.textContent = "Copy";
  }, 1500);
}
