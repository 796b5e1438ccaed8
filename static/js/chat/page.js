/* The chat page: its configuration, the elements the chat works on, what it knows about the
   session (``state``), and the small helpers every part uses. Nothing here renders events. */

export const config = JSON.parse(document.getElementById("chat-config").textContent);

export const transcript = document.getElementById("transcript");
export const emptyState = transcript.querySelector("[data-empty]");
export const composer = document.querySelector("[data-composer]");
export const input = document.getElementById("composer-input");

export const TERMINAL = { "run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled", "run.timeout": "timeout" };
const NEAR_BOTTOM_PX = 120;

export const state = {
  lastSeq: config.afterSeq,
  settled: new Set(config.settledRunIds),
  runs: new Map(),
  socket: null,
  connections: 0,
  attempts: 0,
  reconnectTimer: null,
  isClosedForGood: false,
  nextCommandId: 1,
  pendingCommands: new Map(),
  pendingSends: 0,
  unknownMessages: new Map(),
  uploads: [],
};

export function url(name, runId) {
  return config.urls[name].replace(config.placeholders.run, runId || "");
}

export function csrfToken() {
  const field = document.querySelector("input[name=csrfmiddlewaretoken]");
  if (field) return field.value;
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

export function newKey() {
  if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
  return Date.now().toString(36) + "-" + Math.random().toString(36).slice(2) + Math.random().toString(36).slice(2);
}

export function clone(templateId) {
  return document.getElementById(templateId).content.firstElementChild.cloneNode(true);
}

export function slot(root, name) {
  return root.querySelector('[data-slot="' + name + '"]');
}

export function pretty(value) {
  if (typeof value === "string") return value;
  try { return JSON.stringify(value, null, 2); } catch (error) { return String(value); }
}

/* app.js (loaded first, on every page) shows toasts and renders Markdown. */
export function toast(message, level) {
  if (window.agentry && window.agentry.toast) window.agentry.toast(message, level);
}

export function renderMarkdownInto(element, source) {
  window.agentry.renderMarkdownInto(element, source);
}

/* The API's error envelope as one sentence: its message, then what it says of each field. */
export function apiErrorText(payload, fallback) {
  const error = payload && payload.error;
  if (!error) return fallback;
  const details = [];
  Object.keys(error.fields || {}).forEach(function (name) { details.push.apply(details, [].concat(error.fields[name])); });
  const message = error.message || fallback;
  return details.length && details.join(" ") !== message ? message + " " + details.join(" ") : message;
}

/* Sizes as the pages show them (Django's filesizeformat). */
export function formatSize(bytes) {
  if (bytes < 1024) return bytes === 1 ? "1 byte" : bytes + " bytes";
  const units = ["KB", "MB", "GB", "TB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return value.toFixed(1) + "\u00a0" + units[unit];
}

function isNearBottom() {
  return transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < NEAR_BOTTOM_PX;
}

/* A reader at the bottom of the transcript stays there while it grows. */
export function keepPinned(change) {
  const pinned = isNearBottom();
  change();
  if (pinned) transcript.scrollTop = transcript.scrollHeight;
}

export function hideEmptyState() {
  if (emptyState) emptyState.classList.add("is-hidden");
}

export function appendTurn(element) {
  hideEmptyState();
  transcript.insertBefore(element, emptyState || null);
}

let sessionListTimer = 0;

export function refreshSessionList() {
  window.clearTimeout(sessionListTimer);
  sessionListTimer = window.setTimeout(function () {
    if (window.htmx) window.htmx.trigger(document.body, "agentry:sessions-changed");
  }, 400);
}
