// HTTP calls to the service. The token (when the service has one) lives in this tab's
// sessionStorage and travels only in the Authorization header.

const KEY = "steerloop.token";
let memory = ""; // used when sessionStorage refuses (private mode)

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function getToken() {
  try {
    return sessionStorage.getItem(KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(token) {
  try {
    if (token) sessionStorage.setItem(KEY, token);
    else sessionStorage.removeItem(KEY);
  } catch {
    // storage refused: the token then lasts until the page is left
  }
  memory = token;
}

export function authHeaders(extra = {}) {
  const headers = { ...extra };
  const token = getToken() || memory;
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}

/** The server's `{"error": {"code", "message"}}` as an ApiError (or the bare status). */
export async function errorOf(response) {
  let code = `http_${response.status}`;
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && typeof body === "object" && body.error) {
      code = String(body.error.code);
      message = String(body.error.message);
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message);
}

export async function call(method, path, body) {
  const init = { method, cache: "no-store", headers: authHeaders() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (exc) {
    // the browser's own wording ("Failed to fetch") says nothing more: kept for the title
    throw new ApiError(0, `network: ${exc.message}`, "the service cannot be reached");
  }
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

export function sessionPath(sessionId, tail = "") {
  return `/v1/sessions/${encodeURIComponent(sessionId)}${tail}`;
}
