// Images and files: what the composer attaches (the button, paste, drag-and-drop), checked
// against the server's caps before anything is uploaded, and how the transcript shows them
// (image thumbnails and file chips, their bytes read from the session's blob URL with the
// token, as every other call: an <img src> could not send the Authorization header).

import { authHeaders } from "./api.js";
import { el } from "./transcript.js";

const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const TEXT_APPLICATION = new Set([
  "application/json",
  "application/xml",
  "application/yaml",
  "application/x-yaml",
]);
// What a browser leaves untyped but the server takes as text (the rest goes as text/plain
// only when the browser says text/*).
const TEXT_SUFFIXES = /\.(txt|text|log|md|markdown|csv|tsv|py|js|ts|rs|go|c|h|sh|toml|yaml|yml)$/i;

/** ``size`` bytes for people, as the server words it: 812 B, 300.0 KiB, 1.5 MiB. */
export function humanSize(size) {
  if (size < 1024) return `${size} B`;
  if (size < 1024 * 1024) return `${(size / 1024).toFixed(1)} KiB`;
  return `${(size / (1024 * 1024)).toFixed(1)} MiB`;
}

/** The caps the server told the page (``<body data-max-…>``), in bytes. */
export function limits() {
  const data = document.body.dataset;
  return {
    block: Number(data.maxAttachmentBytes) || 10 * 1024 * 1024,
    message: Number(data.maxMessageAttachmentBytes) || 20 * 1024 * 1024,
  };
}

/** The part type a file goes as and its media type, or null for one no provider takes. */
function kindOf(file) {
  const type = (file.type || "").toLowerCase();
  if (IMAGE_TYPES.has(type)) return { kind: "image", type };
  if (type === "application/pdf" || type.startsWith("text/") || TEXT_APPLICATION.has(type))
    return { kind: "file", type };
  if (!type && TEXT_SUFFIXES.test(file.name || "")) return { kind: "file", type: "text/plain" };
  return null;
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ""));
    reader.onerror = () => reject(reader.error || new Error("the file could not be read"));
    reader.readAsDataURL(file);
  });
}

/** The attachments waiting in the composer: a tray of chips above it, each removable. */
export class Attachments {
  constructor(tray, refused) {
    this.tray = tray;
    this.refused = refused; // (message) => shown in the page
    this.items = []; // {file, kind, type, item}
  }

  get count() {
    return this.items.length;
  }

  /** Adds ``files`` that fit the caps; the first that does not is refused in the page. */
  add(files) {
    const cap = limits();
    let total = this.items.reduce((sum, a) => sum + a.file.size, 0);
    for (const file of files) {
      const name = file.name || "pasted image";
      const found = kindOf(file);
      if (!found) {
        this.refused(`${name} is not an image (PNG, JPEG, GIF, WEBP), a PDF or a text file`);
        continue;
      }
      if (file.size > cap.block) {
        this.refused(
          `${name} is ${humanSize(file.size)}, over the limit of ${humanSize(cap.block)} per attachment`,
        );
        continue;
      }
      if (total + file.size > cap.message) {
        this.refused(
          `${name} would bring this message's attachments over the limit of ${humanSize(cap.message)}`,
        );
        continue;
      }
      if (file.size === 0) {
        this.refused(`${name} is empty`);
        continue;
      }
      total += file.size;
      this.push(file, found);
    }
    this.tray.hidden = this.items.length === 0;
  }

  push(file, found) {
    const entry = { file, ...found };
    const remove = el(
      "button",
      { type: "button", class: "remove", "aria-label": `Remove ${file.name}`, "data-testid": "attachment-remove" },
      "×",
    );
    const preview =
      found.kind === "image" ? el("img", { class: "preview", alt: "", src: URL.createObjectURL(file) }) : null;
    entry.item = el(
      "li",
      { class: `attachment ${found.kind}`, "data-testid": "attachment", title: file.name },
      preview,
      el("span", { class: "name" }, file.name || "pasted image"),
      el("span", { class: "size" }, humanSize(file.size)),
      remove,
    );
    remove.addEventListener("click", () => this.drop(entry));
    this.items.push(entry);
    this.tray.append(entry.item);
  }

  drop(entry) {
    const preview = entry.item.querySelector("img");
    if (preview) URL.revokeObjectURL(preview.src);
    entry.item.remove();
    this.items = this.items.filter((a) => a !== entry);
    this.tray.hidden = this.items.length === 0;
  }

  /** The message's content: the text alone, or parts (text first, then each attachment). */
  async content(text) {
    if (this.items.length === 0) return text;
    const parts = text.trim() ? [{ type: "text", text }] : [];
    for (const { file, kind, type } of this.items) {
      const part = { type: kind, media_type: type, data: await base64Of(file) };
      if (file.name) part.name = file.name;
      parts.push(part);
    }
    return parts;
  }

  clear() {
    for (const entry of [...this.items]) this.drop(entry);
  }
}

/** Wires the attach button, paste into the composer and drops onto ``dropZone``. */
export function wireAttachments(attachments, { button, input, composer, dropZone }) {
  button.addEventListener("click", () => input.click());
  input.addEventListener("change", () => {
    attachments.add([...input.files]);
    input.value = ""; // the same file may be chosen again
  });
  composer.addEventListener("paste", (event) => {
    const files = [...((event.clipboardData && event.clipboardData.files) || [])];
    if (files.length === 0) return; // text: pasted as usual
    event.preventDefault();
    attachments.add(files);
  });
  let depth = 0; // dragenter/leave fire for every child crossed
  const carriesFiles = (event) =>
    event.dataTransfer && [...event.dataTransfer.types].includes("Files");
  dropZone.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event)) return;
    depth += 1;
    dropZone.classList.add("dropping");
  });
  dropZone.addEventListener("dragleave", () => {
    depth = Math.max(0, depth - 1);
    if (depth === 0) dropZone.classList.remove("dropping");
  });
  dropZone.addEventListener("dragover", (event) => {
    if (carriesFiles(event)) event.preventDefault(); // allows the drop
  });
  dropZone.addEventListener("drop", (event) => {
    depth = 0;
    dropZone.classList.remove("dropping");
    const files = [...((event.dataTransfer && event.dataTransfer.files) || [])];
    if (files.length === 0) return;
    event.preventDefault();
    attachments.add(files);
  });
}

// --- the transcript's side -----------------------------------------------------------------

/** The text blocks of a stored content list (images and files are shown by ``mediaOf``). */
export function textOnly(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((block) => block && block.type === "text")
    .map((block) => String(block.text))
    .join("\n");
}

export function hasMedia(content) {
  return Array.isArray(content) && content.some((b) => b && (b.type === "image" || b.type === "file"));
}

/** Thumbnails and file chips for the image and file blocks of ``content`` (or null). */
export function mediaOf(content) {
  if (!hasMedia(content)) return null;
  const box = el("div", { class: "media" });
  for (const block of content) {
    if (!block || (block.type !== "image" && block.type !== "file")) continue;
    const name = block.name || (block.type === "image" ? "image" : "file");
    if (block.type === "image") {
      const img = el("img", { class: "thumb", alt: name, "data-testid": "thumbnail", title: name });
      const link = el("a", { class: "thumb-link", href: "#", title: name }, img);
      if (block.blob_url) {
        load(block.blob_url).then((url) => {
          if (url) img.src = url;
        });
        link.addEventListener("click", (event) => {
          event.preventDefault();
          if (img.src) window.open(img.src, "_blank", "noopener");
        });
      } else if (block.url) {
        img.alt = `${name} (${block.url})`; // a remote image is not fetched by the page
      }
      box.append(link);
    } else {
      const chip = el(
        "a",
        { class: "file-chip", href: "#", "data-testid": "file-chip", title: `${name} (${block.media_type})` },
        el("span", { class: "kind" }, block.media_type === "application/pdf" ? "PDF" : "TEXT"),
        el("span", { class: "name" }, name),
        el("span", { class: "size" }, block.size != null ? humanSize(block.size) : ""),
      );
      chip.addEventListener("click", async (event) => {
        event.preventDefault();
        const url = block.blob_url && (await load(block.blob_url));
        if (!url) return;
        const save = el("a", { href: url, download: name });
        save.click();
      });
      box.append(chip);
    }
  }
  return box;
}

const loaded = new Map(); // blob URL -> Promise of an object URL (a hash's bytes never change)

function load(path) {
  if (!loaded.has(path)) {
    loaded.set(
      path,
      fetch(path, { headers: authHeaders() })
        .then((response) => (response.ok ? response.blob() : null))
        .then((blob) => (blob ? URL.createObjectURL(blob) : null))
        .catch(() => null)
        .then((url) => {
          if (!url) loaded.delete(path); // tried again when shown again (a token given since)
          return url;
        }),
    );
  }
  return loaded.get(path);
}
