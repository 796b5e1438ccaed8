/* Events: each one the socket delivers is shown once, in seq order, by the handler of its type;
   a terminal event finishes its run. */
import { artifactCard, citationChips } from "./artifacts.js";
import { isOffBranch, offerEdit, offerRegenerate } from "./branches.js";
import { fillFooter } from "./footers.js";
import { TERMINAL, clone, keepPinned, refreshSessionList, slot, state } from "./page.js";
import { insertMessageFromServer } from "./sending.js";
import { renderStatus } from "./status.js";
import { askApproval, askQuestion, closeQuestion, showAnswer, showDecision, showResult } from "./tool-cards.js";
import {
  addPart, ensureCard, ensureTurn, finishText, markUserTurnQueued, markUserTurnStarted, noteChild, runRecord,
  setCardState, setChildStatus, showMessageActions, streamInto, userTurn,
} from "./turns.js";

const HANDLERS = {
  "run.queued": function (run, data) {
    run.messageId = data.message_id || run.messageId;
    run.status = "queued";
    if (noteChild(run, data)) {
      setChildStatus(run, "queued");
      const parent = runRecord(run.parentId);
      parent.phase = run.toolCallId ? "Waiting for the sub-agent…" : "Waiting for the executors…";
      if (run.toolCallId) setCardState(ensureCard(parent, run.toolCallId), "running", "delegated");
      return;
    }
    if (data.retry_of) return;
    const turn = userTurn(run.messageId);
    if (turn) markUserTurnQueued(turn, run.id);
    else if (state.pendingSends > 0) state.unknownMessages.set(run.messageId, run.id);
    else insertMessageFromServer(run.messageId);
    refreshSessionList();
  },
  "run.started": function (run, data) {
    run.status = "running";
    run.phase = "Thinking…";
    if (noteChild(run, data)) { setChildStatus(run, "running"); return; }
    if (data.message_id) {
      run.messageId = data.message_id;
      run.messageParentId = data.message_parent_id || "";
    }
    markUserTurnStarted(run);
    offerEdit(run);
    ensureTurn(run);
    refreshSessionList();
  },
  "run.status": function (run, data) {
    const to = data.to;
    if (to === "awaiting_approval") run.status = "awaiting_approval";
    else if (to === "awaiting_input") { run.status = "awaiting_input"; run.phase = "Waiting for your answer"; }
    else if (to === "cancelling") { run.status = "cancelling"; run.phase = "Stopping…"; }
    else if (to === "queued" && run.status !== "queued") { run.status = "queued"; run.phase = "Resuming…"; }
    else if (to === "planning" || to === "executing") run.status = "running";
  },
  "step.started": function (run, data) {
    if (data.kind === "model_call") { run.steps += 1; run.phase = "Thinking…"; }
  },
  "message.started": function (run) {
    finishText(run.text);
    finishText(run.reasoning);
    run.text = null;
    run.reasoning = null;
  },
  "text.delta": function (run, data) {
    if (!run.text) run.text = addPart(run, clone("tpl-text-part"));
    run.phase = "Writing…";
    streamInto(run.text, data.text || "");
  },
  "reasoning.delta": function (run, data) {
    if (!run.reasoning) run.reasoning = addPart(run, clone("tpl-reasoning-part"));
    run.phase = "Reasoning…";
    streamInto(run.reasoning, data.text || "");
  },
  "message.completed": function (run, data) {
    const blocks = Array.isArray(data.content) ? data.content : [];
    const text = blocks.filter(function (block) { return block.type === "text"; }).map(function (block) { return block.text || ""; }).join("");
    if (text && !run.text) run.text = addPart(run, clone("tpl-text-part"));
    finishText(run.text, text || undefined);
    if (data.is_stopped) addPart(run, clone("tpl-stopped-note"));
    finishText(run.reasoning);
    if (run.reasoning) run.reasoning.open = false;
    run.text = null;
    run.reasoning = null;
    if (Array.isArray(data.citations) && data.citations.length) addPart(run, citationChips(data.citations));
    blocks.forEach(function (block) {
      if (block.type === "tool_call") setCardState(ensureCard(run, block.id, block.name, block.arguments), "pending", "pending");
    });
  },
  "tool.call": function (run, data) {
    const card = ensureCard(run, data.tool_call_id, data.name, data.arguments);
    setCardState(card, "running", "running");
    run.phase = "Running " + (data.name || "a tool") + "…";
  },
  "tool.result": function (run, data) {
    showResult(ensureCard(run, data.tool_call_id, data.name), data);
    run.phase = "Thinking…";
  },
  "approval.required": function (run, data) {
    const card = ensureCard(run, data.tool_call_id, data.name, data.arguments);
    askApproval(run, card, data);
    run.status = "awaiting_approval";
    run.phase = "Waiting for approval: " + (data.name || "tool call");
  },
  "approval.resolved": function (run, data) {
    showDecision(ensureCard(run, data.tool_call_id), data);
    if (data.decision === "approve") run.phase = "Resuming…";
  },
  "input.required": function (run, data) {
    askQuestion(run, ensureCard(run, data.tool_call_id, "ask_user"), data);
    run.status = "awaiting_input";
    run.phase = "Waiting for your answer";
  },
  "input.resolved": function (run, data) {
    showAnswer(ensureCard(run, data.tool_call_id), data);
    run.phase = "Resuming…";
  },
  "artifact.created": function (run, data) {
    if (!run.artifacts) run.artifacts = addPart(run, clone("tpl-artifacts"));
    keepPinned(function () { run.artifacts.appendChild(artifactCard(data)); });
  },
  "usage": function (run, data) {
    const total = data.total_usage || data.usage || {};
    run.tokens = (total.input_tokens || 0) + (total.output_tokens || 0);
  },
  "compaction": function (run) {
    const note = document.createElement("p");
    note.className = "small muted";
    note.textContent = "Older turns were summarized to fit the model's context.";
    addPart(run, note);
  },
  "error": function (run, data) {
    const note = document.createElement("p");
    note.className = "run-error small";
    note.textContent = data.message || data.error || "An error occurred.";
    addPart(run, note);
  },
};

export function handleEvent(envelope) {
  if (envelope.seq <= state.lastSeq) return;
  state.lastSeq = envelope.seq;
  const runId = envelope.run_id;
  if (!runId || state.settled.has(runId)) return;
  const run = runRecord(runId);
  if (isOffBranch(run, envelope)) return;
  if (TERMINAL[envelope.type]) {
    finishRun(run, TERMINAL[envelope.type], envelope.data || {});
  } else if (HANDLERS[envelope.type]) {
    HANDLERS[envelope.type](run, envelope.data || {});
  }
  renderStatus();
}

function finishRun(run, status, data) {
  run.status = status;
  if (run.parentId) setChildStatus(run, status);
  finishText(run.text);
  finishText(run.reasoning);
  run.text = null;
  run.reasoning = null;
  run.cards.forEach(function (card) {
    const cardState = card.getAttribute("data-state");
    if (cardState === "running" || cardState === "pending" || cardState === "awaiting") setCardState(card, "cancelled", "not run");
    const question = slot(card, "question");
    if (question && !question.hidden) closeQuestion(question);
  });
  const queuedTurn = userTurn(run.messageId);
  if (queuedTurn && queuedTurn.classList.contains("is-queued") && status === "cancelled") {
    markUserTurnStarted(run);
  }
  fillFooter(run, data || {});
  showMessageActions(run);
  offerRegenerate(run);
  refreshSessionList();
}
