/* Runs and their turns: an answer's turn with its parts (text, reasoning, tool cards), the
   collapsible block of a child run (plan executor, sub-agent) inside its parent's answer, and
   the user message a run answers. */
import {
  clone, emptyState, hideEmptyState, keepPinned, pretty, renderMarkdownInto, slot, state, transcript,
} from "./page.js";

export function runRecord(runId) {
  let run = state.runs.get(runId);
  if (!run) {
    run = { id: runId, status: "queued", messageId: "", steps: 0, phase: "", turn: null, text: null, reasoning: null, cards: new Map(), tokens: 0, parentId: "", title: "", toolCallId: "", artifacts: null, messageParentId: undefined };
    state.runs.set(runId, run);
  }
  return run;
}

export function userTurn(messageId) {
  return messageId ? transcript.querySelector('.turn-user[data-message-id="' + messageId + '"]') : null;
}

function lastOfGroup(messageId) {
  if (!messageId) return null;
  const members = transcript.querySelectorAll('.turn[data-message-id="' + messageId + '"]');
  return members.length ? members[members.length - 1] : null;
}

/* The parts container and the footer of a turn or a child block (never those of a nested block). */
function partsOf(element) {
  return element.matches("[data-parts]") ? element : element.querySelector(":scope > [data-parts]");
}

export function footerOf(element) {
  return partsOf(element).querySelector(":scope > [data-run-footer]");
}

export function ensureTurn(run) {
  if (run.turn) return run.turn;
  const existing = document.getElementById("run-" + run.id);
  if (existing) { run.turn = existing; return existing; }
  if (run.parentId) return ensureChildBlock(run);
  const turn = clone("tpl-assistant-turn");
  turn.id = "run-" + run.id;
  turn.setAttribute("data-run-id", run.id);
  turn.setAttribute("data-message-id", run.messageId);
  const anchor = lastOfGroup(run.messageId);
  hideEmptyState();
  keepPinned(function () {
    if (anchor) anchor.after(turn);
    else transcript.insertBefore(turn, emptyState || null);
  });
  run.turn = turn;
  return turn;
}

export function addPart(run, element) {
  const turn = ensureTurn(run);
  const footer = footerOf(turn);
  keepPinned(function () { partsOf(turn).insertBefore(element, footer); });
  return element;
}

/* --- Child runs (plan executors, sub-agents): a collapsible block in the parent's answer ------ */
export function noteChild(run, data) {
  if (!data.parent_run_id) return false;
  run.parentId = data.parent_run_id;
  run.title = data.title || run.title;
  run.toolCallId = data.tool_call_id || run.toolCallId;
  return true;
}

/* A sub-agent sits right under the tool call that started it; an executor joins the answer. */
function ensureChildBlock(run) {
  const parent = runRecord(run.parentId);
  const block = clone("tpl-child-run");
  block.id = "run-" + run.id;
  block.setAttribute("data-run-id", run.id);
  block.setAttribute("data-parent-run-id", run.parentId);
  slot(block, "kind").textContent = run.toolCallId ? "Sub-agent" : "Executor";
  slot(block, "title").textContent = run.title;
  run.turn = block;
  const card = run.toolCallId ? ensureCard(parent, run.toolCallId, "spawn_subagent") : null;
  if (card) keepPinned(function () { card.after(block); });
  else addPart(parent, block);
  return block;
}

export function setChildStatus(run, status) {
  const block = ensureTurn(run);
  block.setAttribute("data-status", status);
  const badge = slot(block, "status");
  badge.textContent = status;
  const tones = { queued: "info", running: "busy", completed: "ok", failed: "error", timeout: "error", cancelled: "muted" };
  badge.className = "badge tone-" + (tones[status] || "muted");
}

/* A finished child's tokens and cost in its summary: seen without opening the block. */
export function showChildUsage(run, total, cost) {
  slot(ensureTurn(run), "usage").textContent = total + " tokens" + (cost ? " · " + cost : "");
}

/* --- The user message a run answers ------------------------------------------------------------ */
export function markUserTurnStarted(run) {
  const turn = userTurn(run.messageId);
  if (turn) markUserTurnStartedIn(turn);
}

export function markUserTurnStartedIn(turn) {
  turn.classList.remove("is-queued");
  turn.querySelectorAll("[data-queued], [data-cancel-queued]").forEach(function (element) { element.remove(); });
}

export function markUserTurnQueued(turn, runId) {
  turn.setAttribute("data-run-id", runId);
  turn.classList.add("is-queued");
  const badge = turn.querySelector("[data-queued]");
  if (badge) badge.textContent = "queued";
}

/* --- Streaming text ------------------------------------------------------------------------------ */
/* Reasoning streams into a Text node: appending is cheap and never re-parses HTML. An answer's
   text is Markdown: its source grows with each delta and the part is rendered again at most
   once a frame, so tables and code blocks show formatted while they stream, never as raw text. */
export function streamInto(part, text) {
  if (part.hasAttribute("data-markdown")) {
    part.streamSource = (part.streamSource || "") + text;
    renderSoon(part);
    return;
  }
  if (!part.streamNode) {
    part.streamNode = document.createTextNode("");
    (slot(part, "text") || part).appendChild(part.streamNode);
  }
  keepPinned(function () { part.streamNode.appendData(text); });
}

/* At most once a frame: the first delta shows at once, those that arrive within the frame
   are rendered together when it ends. */
function renderSoon(part) {
  if (part.renderFrame) { part.hasPendingRender = true; return; }
  keepPinned(function () { renderMarkdownInto(part, settledMarkdown(part.streamSource)); });
  part.renderFrame = window.requestAnimationFrame(function () {
    part.renderFrame = 0;
    if (part.hasPendingRender) { part.hasPendingRender = false; renderSoon(part); }
  });
}

/* The streamed text without what cannot be formatted yet, which would flash as raw Markdown:
   an unfinished line that opens a table row or a code fence, and a table header whose
   delimiter row (|---|) has not arrived. */
function settledMarkdown(source) {
  const lines = source.split("\n");
  const isRow = function (line) { return /^\s*\|/.test(line || ""); };
  if (/^\s*[|`]/.test(lines[lines.length - 1])) lines.pop();
  const end = lines.length - 1;
  if (isRow(lines[end]) && !isRow(lines[end - 1])) lines.pop();
  return lines.join("\n");
}

export function finishText(part, finalText) {
  if (!part) return;
  part.classList.remove("is-streaming");
  part.removeAttribute("aria-busy");
  if (!part.hasAttribute("data-markdown")) return;
  window.cancelAnimationFrame(part.renderFrame);
  part.renderFrame = 0;
  part.hasPendingRender = false;
  const source = typeof finalText === "string" ? finalText : part.streamSource || "";
  keepPinned(function () { renderMarkdownInto(part, source); });
}

/* A finished answer's Copy shows once it has text to copy. */
export function showMessageActions(run) {
  if (run.parentId || run.status !== "completed" || !run.turn) return;
  const copy = run.turn.querySelector(":scope > [data-parts] > .message-actions [data-copy-message]");
  if (copy && run.turn.querySelector(":scope > [data-parts] > .part-text")) copy.hidden = false;
}

/* --- Tool cards: one per call, in the answer that made it --------------------------------------- */
export function ensureCard(run, callId, name, argumentsValue) {
  let card = run.cards.get(callId) || transcript.querySelector('.tool-card[data-tool-call-id="' + CSS.escape(callId) + '"]');
  if (!card) {
    card = clone("tpl-tool-card");
    card.setAttribute("data-tool-call-id", callId);
    card.setAttribute("data-run-id", run.id);
    addPart(run, card);
  }
  run.cards.set(callId, card);
  if (name) slot(card, "name").textContent = name;
  if (argumentsValue !== undefined && argumentsValue !== null) slot(card, "arguments").textContent = pretty(argumentsValue);
  return card;
}

export function setCardState(card, cardState, label) {
  card.setAttribute("data-state", cardState);
  slot(card, "state").textContent = label || cardState;
}
