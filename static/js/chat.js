/* The live chat: follows the session's events over the websocket and renders them.

   The page renders finished runs; runs still in the lane are replayed from the event store
   (the socket's ?after=SEQ) and then followed live. Every event carries the session's next
   sequence number, so after a dropped connection the socket reopens with the last seq seen
   and nothing is shown twice or lost. Commands (send, cancel, approve) go over the socket,
   or over HTTP when it is down. Files are uploaded as soon as they are picked or dropped, and
   the message carries their ids. */
(function () {
  "use strict";

  const configElement = document.getElementById("chat-config");
  if (!configElement) return;
  const config = JSON.parse(configElement.textContent);
  const agentry = window.agentry || {};

  const transcript = document.getElementById("transcript");
  const emptyState = transcript.querySelector("[data-empty]");
  const runBar = document.querySelector("[data-run-bar]");
  const runLabel = runBar.querySelector("[data-run-label]");
  const runSteps = runBar.querySelector("[data-run-steps]");
  const runProgress = runBar.querySelector("[data-run-progress]");
  const runQueue = runBar.querySelector("[data-run-queue]");
  const cancelButton = runBar.querySelector("[data-cancel]");
  const statusBadge = document.querySelector("[data-chat-status]");
  const connection = document.querySelector("[data-connection]");
  const connectionLabel = document.querySelector("[data-connection-label]");
  const composer = document.querySelector("[data-composer]");
  const input = document.getElementById("composer-input");
  const chatPanel = document.querySelector(".chat-panel");
  const uploadTray = document.querySelector("[data-upload-tray]");
  const fileInput = document.querySelector("[data-file-input]");
  const attachButton = document.querySelector("[data-attach]");
  const dropOverlay = document.querySelector("[data-drop-overlay]");
  const citationDialog = document.getElementById("citation-dialog");

  const TERMINAL = { "run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled", "run.timeout": "timeout" };
  const RETRYABLE = ["failed", "cancelled", "timeout"];
  const COMMAND_TIMEOUT_MS = 10000;
  const FILE_POLL_MS = 1500;
  const FILE_POLL_LIMIT = 80;
  const NEAR_BOTTOM_PX = 120;

  const state = {
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

  /* --- Small helpers ------------------------------------------------------------------------ */
  function url(name, runId) {
    return config.urls[name].replace(config.placeholders.run, runId || "");
  }

  function csrfToken() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (field) return field.value;
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function newKey() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
    return Date.now().toString(36) + "-" + Math.random().toString(36).slice(2) + Math.random().toString(36).slice(2);
  }

  function clone(templateId) {
    return document.getElementById(templateId).content.firstElementChild.cloneNode(true);
  }

  function slot(root, name) {
    return root.querySelector('[data-slot="' + name + '"]');
  }

  function pretty(value) {
    if (typeof value === "string") return value;
    try { return JSON.stringify(value, null, 2); } catch (error) { return String(value); }
  }

  function toast(message, level) {
    if (agentry.toast) agentry.toast(message, level);
  }

  function isNearBottom() {
    return transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < NEAR_BOTTOM_PX;
  }

  function keepPinned(change) {
    const pinned = isNearBottom();
    change();
    if (pinned) transcript.scrollTop = transcript.scrollHeight;
  }

  function hideEmptyState() {
    if (emptyState) emptyState.classList.add("is-hidden");
  }

  function appendTurn(element) {
    hideEmptyState();
    transcript.insertBefore(element, emptyState || null);
  }

  function refreshSessionList() {
    window.clearTimeout(refreshSessionList.timer);
    refreshSessionList.timer = window.setTimeout(function () {
      if (window.htmx) window.htmx.trigger(document.body, "agentry:sessions-changed");
    }, 400);
  }

  /* --- Runs and their turns ------------------------------------------------------------------- */
  function runRecord(runId) {
    let run = state.runs.get(runId);
    if (!run) {
      run = { id: runId, status: "queued", messageId: "", steps: 0, phase: "", turn: null, text: null, reasoning: null, cards: new Map(), tokens: 0, parentId: "", title: "", toolCallId: "", artifacts: null, messageParentId: undefined };
      state.runs.set(runId, run);
    }
    return run;
  }

  function userTurn(messageId) {
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

  function footerOf(element) {
    return partsOf(element).querySelector(":scope > [data-run-footer]");
  }

  function ensureTurn(run) {
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

  function addPart(run, element) {
    const turn = ensureTurn(run);
    const footer = footerOf(turn);
    keepPinned(function () { partsOf(turn).insertBefore(element, footer); });
    return element;
  }

  /* --- Child runs (plan executors, sub-agents): a collapsible block in the parent's answer ------ */
  function noteChild(run, data) {
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

  function setChildStatus(run, status) {
    const block = ensureTurn(run);
    block.setAttribute("data-status", status);
    const badge = slot(block, "status");
    badge.textContent = status;
    const tones = { queued: "info", running: "busy", completed: "ok", failed: "error", timeout: "error", cancelled: "muted" };
    badge.className = "badge tone-" + (tones[status] || "muted");
  }

  /* A finished child's tokens and cost in its summary: seen without opening the block. */
  function showChildUsage(run, total, cost) {
    slot(ensureTurn(run), "usage").textContent = total + " tokens" + (cost ? " · " + cost : "");
  }

  function markUserTurnStarted(run) {
    const turn = userTurn(run.messageId);
    if (!turn) return;
    turn.classList.remove("is-queued");
    turn.querySelectorAll("[data-queued], [data-cancel-queued]").forEach(function (element) { element.remove(); });
  }

  function markUserTurnQueued(turn, runId) {
    turn.setAttribute("data-run-id", runId);
    turn.classList.add("is-queued");
    const badge = turn.querySelector("[data-queued]");
    if (badge) badge.textContent = "queued";
  }

  /* Reasoning streams into a Text node: appending is cheap and never re-parses HTML. An answer's
     text is Markdown: its source grows with each delta and the part is rendered again at most
     once a frame, so tables and code blocks show formatted while they stream, never as raw text. */
  function streamInto(part, text) {
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
    keepPinned(function () { agentry.renderMarkdownInto(part, settledMarkdown(part.streamSource)); });
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

  function finishText(part, finalText) {
    if (!part) return;
    part.classList.remove("is-streaming");
    part.removeAttribute("aria-busy");
    if (!part.hasAttribute("data-markdown")) return;
    window.cancelAnimationFrame(part.renderFrame);
    part.renderFrame = 0;
    part.hasPendingRender = false;
    const source = typeof finalText === "string" ? finalText : part.streamSource || "";
    keepPinned(function () { agentry.renderMarkdownInto(part, source); });
  }

  /* A finished answer's Copy shows once it has text to copy. */
  function showMessageActions(run) {
    if (run.parentId || run.status !== "completed" || !run.turn) return;
    const copy = run.turn.querySelector(":scope > [data-parts] > .message-actions [data-copy-message]");
    if (copy && run.turn.querySelector(":scope > [data-parts] > .part-text")) copy.hidden = false;
  }

  /* --- Tool cards ------------------------------------------------------------------------------ */
  function ensureCard(run, callId, name, argumentsValue) {
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

  function setCardState(card, cardState, label) {
    card.setAttribute("data-state", cardState);
    slot(card, "state").textContent = label || cardState;
  }

  function showResult(card, data) {
    const wrap = slot(card, "result-wrap");
    wrap.hidden = false;
    slot(card, "result-label").textContent = data.is_error ? "Error" : "Result";
    slot(card, "result").textContent = pretty(data.content);
    if (data.denied) setCardState(card, "denied", "denied");
    else if (data.refused) setCardState(card, "denied", "refused");
    else setCardState(card, data.is_error ? "error" : "done", data.is_error ? "error" : "done");
    const approval = slot(card, "approval");
    if (approval) approval.hidden = true;
  }

  function askApproval(run, card, data) {
    setCardState(card, "awaiting", "needs approval");
    card.open = true;
    const approval = slot(card, "approval");
    if (!approval) return;
    approval.hidden = !config.canPost;
    approval.querySelectorAll("[data-decision]").forEach(function (button) {
      button.disabled = false;
      button.onclick = function () { decide(run.id, data.tool_call_id, button.getAttribute("data-decision"), approval); };
    });
    offerArgumentEdits(approval, data);
    if (!config.canPost) slot(card, "approval-note").textContent = "Waiting for the conversation's owner or an admin to approve.";
  }

  /* Tools whose policy lets the approver edit the arguments: a JSON box, filled with the call's. */
  function offerArgumentEdits(approval, data) {
    const editButton = approval.querySelector("[data-edit-arguments]");
    const editor = slot(approval, "approval-edit");
    editor.hidden = true;
    editButton.hidden = !data.arguments_editable;
    editButton.onclick = function () {
      slot(editor, "approval-arguments").value = pretty(data.arguments || {});
      editor.hidden = false;
      editButton.hidden = true;
      slot(editor, "approval-arguments").focus();
    };
  }

  /* The edited arguments when the approver opened the editor; null when not; throws on bad JSON. */
  function editedArguments(approval, decision) {
    const editor = slot(approval, "approval-edit");
    if (decision !== "approve" || !editor || editor.hidden) return null;
    try {
      return JSON.parse(slot(editor, "approval-arguments").value);
    } catch (error) {
      throw new Error("The arguments are not valid JSON.");
    }
  }

  /* --- Questions (ask_user): the agent asks, the run waits for the answer ---------------------------- */
  function askQuestion(run, card, data) {
    setCardState(card, "awaiting", "needs your answer");
    card.classList.add("is-question");
    card.open = true;
    const box = slot(card, "question");
    box.hidden = false;
    slot(box, "question-text").textContent = data.question || "";
    const choices = slot(box, "question-choices");
    const form = slot(box, "question-form");
    const options = Array.isArray(data.choices) ? data.choices : [];
    choices.textContent = "";
    options.forEach(function (choice) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "btn btn-small";
      button.textContent = choice;
      button.setAttribute("data-choice", choice);
      button.hidden = !config.canPost;
      button.onclick = function () { sendAnswer(run.id, data.tool_call_id, choice, box, button); };
      choices.appendChild(button);
    });
    form.hidden = !config.canPost || options.length > 0;
    form.onsubmit = function (event) {
      event.preventDefault();
      const text = slot(form, "question-input").value;
      if (!text.trim()) { toast("Write an answer first.", "error"); return; }
      sendAnswer(run.id, data.tool_call_id, text, box, form.querySelector("button"));
    };
    slot(box, "question-note").textContent = config.canPost ? "" : "Waiting for the conversation's owner or an admin to answer.";
  }

  function closeQuestion(box) {
    slot(box, "question-choices").textContent = "";
    slot(box, "question-form").hidden = true;
  }

  function showAnswer(card, data) {
    const box = slot(card, "question");
    card.classList.add("is-question");
    box.hidden = false;
    closeQuestion(box);
    const note = slot(box, "question-note");
    note.textContent = "";
    if (data.status === "expired") {
      note.textContent = "Not answered in time: the agent carried on without an answer.";
      setCardState(card, "pending", "no answer");
      return;
    }
    note.appendChild(document.createTextNode("Answered" + (data.answered_by ? " by " + data.answered_by : "") + ": "));
    const answer = document.createElement("strong");
    answer.setAttribute("data-slot", "question-answer");
    answer.textContent = data.answer || "";
    note.appendChild(answer);
    setCardState(card, "pending", "answered");
  }

  function sendAnswer(runId, toolCallId, answer, box, clicked) {
    const controls = box.querySelectorAll("button, textarea");
    controls.forEach(function (control) { control.disabled = true; });
    if (clicked) clicked.setAttribute("aria-busy", "true");
    command({ type: "answer", run_id: runId, tool_call_id: toolCallId, answer: answer })
      .catch(function (error) {
        if (error.isTransport) return postForm(url("answer", runId), { tool_call_id: toolCallId, answer: answer });
        throw error;
      })
      .catch(function (error) {
        toast(error.message, "error");
        controls.forEach(function (control) { control.disabled = false; control.removeAttribute("aria-busy"); });
      });
  }

  /* --- Run footers ------------------------------------------------------------------------------- */
  function fillFooter(run, data) {
    const footer = footerOf(ensureTurn(run));
    footer.textContent = "";
    function add(tag, className, text) {
      const element = document.createElement(tag);
      if (className) element.className = className;
      if (text !== undefined) element.textContent = text;
      footer.appendChild(element);
      return element;
    }
    if (run.status !== "completed") add("span", "badge tone-" + (run.status === "cancelled" ? "muted" : "error"), run.status);
    if (data.stop_reason && data.stop_reason !== "end_turn" && data.stop_reason !== run.status) add("span", "small muted", data.stop_reason.replace(/_/g, " "));
    if (data.error) add("span", "run-error small", data.error.length > 300 ? data.error.slice(0, 299) + "…" : data.error);
    // A plan's answer counts its executors' and sub-agents' tokens, as its cost does.
    const usage = data.tree_usage || data.usage || {};
    const total = usage.total_tokens !== undefined ? usage.total_tokens : run.tokens;
    add("span", "small muted", total + " tokens").setAttribute("data-slot", "usage");
    const cost = costText(data);
    if (cost) add("span", "small muted", cost).setAttribute("data-slot", "cost");
    if (run.parentId) showChildUsage(run, total, cost);
    const link = add("a", "small", "Timeline");
    link.href = url("timeline", run.id);
    if (config.canPost && !run.parentId && RETRYABLE.indexOf(run.status) >= 0) {
      const form = add("form", "inline");
      form.method = "post";
      form.action = url("retry", run.id);
      form.setAttribute("data-retry", run.id);
      const button = document.createElement("button");
      button.type = "submit";
      button.className = "btn btn-small";
      button.textContent = "Retry";
      form.appendChild(button);
    }
  }

  /* The answer's cost as the pages' cost filter shows it (billing.costs.cost_label): with its
     executors' and sub-agents' when the event has a tree cost. */
  function costText(data) {
    const hasTree = data.tree_unpriced_model_calls !== undefined;
    const amount = hasTree ? data.tree_cost : data.cost;
    const unpriced = (hasTree ? data.tree_unpriced_model_calls : data.unpriced_model_calls) || 0;
    if (amount === undefined) return "";
    if (amount === null) return "price unknown";
    const value = Number(amount);
    let money;
    if (value > 0 && value < 0.00005) money = "< $0.0001";
    else money = "$" + (value >= 1 ? value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }) : value.toFixed(4));
    if (!unpriced) return money;
    return "≥ " + money + " (" + unpriced + " call" + (unpriced === 1 ? "" : "s") + " without a price)";
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

  /* --- Events ------------------------------------------------------------------------------------ */
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
      const card = ensureCard(run, data.tool_call_id);
      const approval = slot(card, "approval");
      if (approval) approval.hidden = true;
      const approved = data.decision === "approve";
      const who = data.decided_by ? " by " + data.decided_by : "";
      const verb = data.status === "expired" ? "Expired (" + data.decision + ")" : approved ? "Approved" : "Denied";
      const edited = data.arguments_edited ? " with edited arguments" : "";
      slot(card, "approval-note").textContent = verb + who + edited + (data.reason ? ": " + data.reason : "");
      if (data.arguments_edited) slot(card, "arguments").textContent = pretty(data.arguments);
      setCardState(card, approved ? "pending" : "denied", approved ? "approved" : "denied");
      run.phase = approved ? "Resuming…" : run.phase;
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

  function handleEvent(envelope) {
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

  /* --- Status: header badge, run bar ------------------------------------------------------------- */
  /* The session's lane: child runs work inside their parent's turn, not in the lane. */
  function laneRuns() {
    const runs = [];
    state.runs.forEach(function (run) { if (!isFinished(run) && !run.parentId) runs.push(run); });
    return runs;
  }

  /* A run that waits for people: no worker holds it. */
  const WAITING_STATUSES = ["awaiting_approval", "awaiting_input"];

  function isFinished(run) {
    return ["completed", "failed", "cancelled", "timeout"].indexOf(run.status) >= 0;
  }

  function activeRun() {
    return laneRuns().find(function (run) { return run.status !== "queued" || run.phase === "Resuming…"; }) || null;
  }

  function renderStatus() {
    const lane = laneRuns();
    const active = activeRun();
    const queued = lane.filter(function (run) { return run !== active && run.status === "queued"; }).length;
    let sessionStatus = "idle";
    if (active) sessionStatus = WAITING_STATUSES.indexOf(active.status) >= 0 ? active.status : "running";
    else if (queued) sessionStatus = "queued";
    const tone = { idle: "muted", running: "busy", queued: "info", awaiting_approval: "warn", awaiting_input: "warn" }[sessionStatus];
    const sidebarBadge = document.querySelector('[data-session-id="' + config.sessionId + '"] [data-session-status]');
    [statusBadge, sidebarBadge].forEach(function (badge) {
      if (!badge) return;
      badge.textContent = sessionStatus === "awaiting_input" ? "waiting for your answer" : sessionStatus.replace("_", " ");
      badge.className = "badge tone-" + tone;
    });
    runBar.hidden = lane.length === 0;
    if (!lane.length) return;
    runLabel.textContent = active ? active.phase || "Working…" : "Queued — waiting to start";
    const steps = active ? active.steps : 0;
    runSteps.textContent = active && steps ? "Step " + steps + " of " + config.maxSteps : "";
    runProgress.value = Math.min(steps, config.maxSteps);
    runProgress.hidden = !(active && steps);
    runQueue.textContent = queued ? queued + " queued" : "";
    if (cancelButton) {
      cancelButton.hidden = !active || active.status === "cancelling";
      cancelButton.disabled = false;
      cancelButton.removeAttribute("aria-busy");
    }
  }

  /* --- Socket: connect, replay from the last seq, reconnect with backoff --------------------------- */
  function setConnection(kind, label) {
    if (!connection) return;
    connection.setAttribute("data-connection", kind);
    connectionLabel.textContent = label;
    connection.title = label;
  }

  function connect() {
    window.clearTimeout(state.reconnectTimer);
    if (state.isClosedForGood) return;
    if (navigator.onLine === false) { setConnection("offline", "Offline"); return; }
    if (state.socket && (state.socket.readyState === WebSocket.OPEN || state.socket.readyState === WebSocket.CONNECTING)) return;
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(scheme + "//" + window.location.host + config.socketPath + "?after=" + state.lastSeq);
    state.socket = socket;
    socket.onopen = function () {
      state.attempts = 0;
      state.connections += 1;
      setConnection("live", "Live");
    };
    socket.onmessage = function (message) {
      let frame;
      try { frame = JSON.parse(message.data); } catch (error) { return; }
      if (typeof frame.seq === "number" && frame.session_id) handleEvent(frame);
      else if (frame.id !== undefined && state.pendingCommands.has(frame.id)) settleCommand(frame);
      else if (frame.type === "error") toast(frame.message, "error");
    };
    socket.onclose = function (event) {
      if (state.socket !== socket) return;
      state.socket = null;
      failPendingCommands();
      if (event.code === 4404) return closeForGood("This conversation no longer exists.");
      if (event.code === 4401 || event.code === 4403) return closeForGood("Signed out: reload the page to sign in again.");
      scheduleReconnect();
    };
  }

  function closeForGood(message) {
    state.isClosedForGood = true;
    setConnection("offline", message);
    toast(message, "error");
  }

  function scheduleReconnect() {
    state.attempts += 1;
    const delay = Math.min(10000, 400 * Math.pow(2, state.attempts - 1)) + Math.random() * 300;
    setConnection("reconnecting", "Reconnecting…");
    window.clearTimeout(state.reconnectTimer);
    state.reconnectTimer = window.setTimeout(connect, delay);
  }

  function socketIsOpen() {
    return state.socket && state.socket.readyState === WebSocket.OPEN;
  }

  window.addEventListener("online", connect);
  // Offline, a socket that looks open delivers nothing: close it, and "online" reconnects.
  window.addEventListener("offline", function () {
    if (state.socket) state.socket.close();
    setConnection("offline", "Offline");
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && !state.socket) connect();
  });

  /* --- Commands over the socket, with HTTP as the fallback ---------------------------------------- */
  function command(frame) {
    return new Promise(function (resolve, reject) {
      if (!socketIsOpen()) { reject(Object.assign(new Error("offline"), { isTransport: true })); return; }
      const id = state.nextCommandId++;
      const timer = window.setTimeout(function () {
        state.pendingCommands.delete(id);
        reject(Object.assign(new Error("timeout"), { isTransport: true }));
      }, COMMAND_TIMEOUT_MS);
      state.pendingCommands.set(id, { resolve: resolve, reject: reject, timer: timer });
      state.socket.send(JSON.stringify(Object.assign({ id: id }, frame)));
    });
  }

  function settleCommand(frame) {
    const pending = state.pendingCommands.get(frame.id);
    state.pendingCommands.delete(frame.id);
    window.clearTimeout(pending.timer);
    if (frame.type === "error") pending.reject(Object.assign(new Error(frame.message || "Refused."), { code: frame.code }));
    else pending.resolve(frame);
  }

  function failPendingCommands() {
    state.pendingCommands.forEach(function (pending) {
      window.clearTimeout(pending.timer);
      pending.reject(Object.assign(new Error("disconnected"), { isTransport: true }));
    });
    state.pendingCommands.clear();
  }

  function postForm(action, fields) {
    const body = new URLSearchParams(fields || {});
    return fetch(action, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: body,
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (payload) {
        if (!response.ok || payload.ok === false) {
          const fallback = response.status === 403 ? "Your role does not allow this." : "Something went wrong (" + response.status + ").";
          throw new Error(payload.message || fallback);
        }
        return payload;
      });
    });
  }

  const OFFLINE_MESSAGE = "You are offline: your message was not sent. Retry it when the connection is back.";

  function postMessageOverHttp(content, attachments, key) {
    if (navigator.onLine === false) return Promise.reject(new Error(OFFLINE_MESSAGE));
    return fetch("/api/v1/sessions/" + config.sessionId + "/messages/", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), "Idempotency-Key": key, Accept: "application/json" },
      body: JSON.stringify({ content: content, attachments: attachmentIds(attachments) }),
    }).catch(function () {
      // fetch rejects only when no response came at all: the network, not the server, said no.
      throw new Error(OFFLINE_MESSAGE);
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (payload) {
        if (!response.ok) throw new Error((payload.error && payload.error.message) || "Could not send (" + response.status + ").");
        return { message_id: payload.message.id, run_id: payload.run.id };
      });
    });
  }

  /* --- Sending messages ------------------------------------------------------------------------------ */
  function addPendingUserTurn(content, attachments) {
    const turn = clone("tpl-user-turn");
    slot(turn, "text").textContent = content;
    showAttachments(slot(turn, "attachments"), attachments);
    const time = slot(turn, "time");
    const now = new Date();
    time.dateTime = now.toISOString();
    time.textContent = now.toTimeString().slice(0, 5);
    turn.classList.add("is-queued");
    keepPinned(function () { appendTurn(turn); });
    transcript.scrollTop = transcript.scrollHeight;
    return turn;
  }

  function confirmUserTurn(turn, ack) {
    turn.setAttribute("data-message-id", ack.message_id);
    state.unknownMessages.delete(ack.message_id);
    const run = runRecord(ack.run_id);
    run.messageId = ack.message_id;
    if (run.status === "queued" && run.phase !== "Resuming…") markUserTurnQueued(turn, ack.run_id);
    else {
      turn.setAttribute("data-run-id", ack.run_id);
      markUserTurnStarted(run);
      offerEdit(run);
    }
    // An answer that started before the acknowledgement arrived belongs after this message.
    if (run.turn && run.turn.compareDocumentPosition(turn) & Node.DOCUMENT_POSITION_FOLLOWING) {
      run.turn.setAttribute("data-message-id", ack.message_id);
      turn.after(run.turn);
    }
    renderStatus();
  }

  /* ``key``: the first attempt's idempotency key, so a retry of a message that did reach the
     server (only its answer was lost) is not posted twice. */
  function failUserTurn(turn, content, attachments, key, error) {
    turn.classList.remove("is-queued");
    turn.classList.add("is-not-sent");
    const badge = turn.querySelector("[data-queued]");
    if (badge) { badge.textContent = "not sent"; badge.className = "badge tone-error"; }
    const retry = document.createElement("button");
    retry.type = "button";
    retry.className = "link small";
    retry.textContent = "Retry";
    retry.setAttribute("data-retry-send", "");
    retry.onclick = function () { turn.remove(); send(content, attachments, key); };
    turn.querySelector(".turn-meta").appendChild(retry);
    toast(error.message, "error");
  }

  function nameConversation(content) {
    const heading = document.querySelector(".chat-title h1");
    if (heading && heading.getAttribute("data-untitled") !== null) {
      heading.textContent = content.trim().slice(0, 80);
      heading.removeAttribute("data-untitled");
      document.title = heading.textContent + " · Agentry";
      // The conversation list names it the same way (the server titles it from this message).
      const listed = document.querySelector('[data-session-id="' + config.sessionId + '"] .session-title');
      if (listed) listed.textContent = listed.parentElement.title = heading.textContent;
    }
  }

  /* ``attachments``: the uploaded files ({id, name, content_type, size, download_url}) it carries. */
  function send(content, attachments, retryKey) {
    attachments = attachments || [];
    nameConversation(content);
    const turn = addPendingUserTurn(content, attachments);
    const key = retryKey || newKey();
    state.pendingSends += 1;
    command({ type: "message", content: content, attachments: attachmentIds(attachments), idempotency_key: key })
      .catch(function (error) {
        // A dropped socket may or may not have delivered it: the same key makes a repeat harmless.
        if (error.isTransport) return postMessageOverHttp(content, attachments, key);
        throw error;
      })
      .then(function (ack) { confirmUserTurn(turn, ack); })
      .catch(function (error) { failUserTurn(turn, content, attachments, key, error); })
      .finally(function () {
        state.pendingSends -= 1;
        if (state.pendingSends === 0) {
          state.unknownMessages.forEach(function (runId, messageId) { insertMessageFromServer(messageId); });
          state.unknownMessages.clear();
        }
      });
  }

  /* A message posted elsewhere (another tab, the API): ask the page for it. */
  function insertMessageFromServer(messageId) {
    if (!messageId || userTurn(messageId)) return;
    fetch(config.urls.message.replace(config.placeholders.message, messageId), { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : ""; })
      .then(function (html) {
        if (!html || userTurn(messageId)) return;
        const holder = document.createElement("div");
        holder.innerHTML = html.trim();
        const turn = holder.firstElementChild;
        if (!turn) return;
        const answer = transcript.querySelector('.turn-assistant[data-message-id="' + messageId + '"]');
        const runId = turn.getAttribute("data-run-id");
        const run = runId ? state.runs.get(runId) : null;
        if (run && run.status !== "queued") markUserTurnStartedIn(turn);
        keepPinned(function () {
          if (answer) answer.before(turn);
          else appendTurn(turn);
        });
      });
  }

  function markUserTurnStartedIn(turn) {
    turn.classList.remove("is-queued");
    turn.querySelectorAll("[data-queued], [data-cancel-queued]").forEach(function (element) { element.remove(); });
  }

  /* --- Cancel, approve, retry ------------------------------------------------------------------------ */
  function cancelRun(runId, button) {
    if (button) { button.disabled = true; button.setAttribute("aria-busy", "true"); }
    command({ type: "cancel", run_id: runId })
      .catch(function (error) {
        if (error.isTransport) return postForm(url("cancel", runId));
        throw error;
      })
      .then(function () {
        const run = state.runs.get(runId);
        if (run && !isFinished(run) && run.status !== "queued") { run.status = "cancelling"; run.phase = "Stopping…"; }
        renderStatus();
      })
      .catch(function (error) {
        toast(error.message, "error");
        if (button) { button.disabled = false; button.removeAttribute("aria-busy"); }
      });
  }

  function decide(runId, toolCallId, decision, approval) {
    let edited;
    try { edited = editedArguments(approval, decision); } catch (error) { toast(error.message, "error"); return; }
    approval.querySelectorAll("button").forEach(function (button) { button.disabled = true; });
    const clicked = approval.querySelector('[data-decision="' + decision + '"]');
    if (clicked) clicked.setAttribute("aria-busy", "true");
    const frame = { type: "approve", run_id: runId, tool_call_id: toolCallId, decision: decision, reason: "" };
    const fields = { tool_call_id: toolCallId, decision: decision };
    if (edited !== null) { frame.arguments = edited; fields.arguments = JSON.stringify(edited); }
    command(frame)
      .catch(function (error) {
        if (error.isTransport) return postForm(url("approve", runId), fields);
        throw error;
      })
      .catch(function (error) {
        toast(error.message, "error");
        approval.querySelectorAll("button").forEach(function (button) { button.disabled = false; button.removeAttribute("aria-busy"); });
      });
  }

  if (cancelButton) {
    cancelButton.addEventListener("click", function () {
      const active = activeRun();
      if (active) cancelRun(active.id, cancelButton);
    });
  }

  transcript.addEventListener("submit", function (event) {
    const form = event.target;
    const retryRunId = form.getAttribute("data-retry");
    const queuedRunId = form.getAttribute("data-cancel-queued");
    if (!retryRunId && !queuedRunId) return;
    event.preventDefault();
    const button = form.querySelector("button");
    if (queuedRunId) { cancelRun(queuedRunId, button); return; }
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    postForm(url("retry", retryRunId))
      .then(function () { form.remove(); })
      .catch(function (error) {
        toast(error.message, "error");
        button.disabled = false;
        button.removeAttribute("aria-busy");
      });
  });

  /* --- Composer -------------------------------------------------------------------------------------- */
  function autoGrow() {
    input.style.height = "auto";
    input.style.height = Math.min(input.scrollHeight + 2, 224) + "px";
  }

  if (composer && input) {
    composer.addEventListener("submit", function (event) {
      event.preventDefault();
      const content = input.value;
      if (!content.trim()) { input.focus(); return; }
      if (uploadsInFlight()) { toast("Wait for the files to finish uploading, or remove them.", "error"); return; }
      if (failedUploads()) { toast("Remove the files that could not be uploaded or read first.", "error"); return; }
      input.value = "";
      autoGrow();
      send(content, takeUploads());
      input.focus();
    });
    input.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        composer.requestSubmit();
      } else if (event.key === "Escape") {
        const active = activeRun();
        if (active && cancelButton && !cancelButton.hidden) { event.preventDefault(); cancelRun(active.id, cancelButton); }
      }
    });
    input.addEventListener("input", autoGrow);
  }

  transcript.addEventListener("click", function (event) {
    const suggestion = event.target.closest("[data-suggestion]");
    if (suggestion && input) {
      input.value = suggestion.textContent.trim();
      composer.requestSubmit();
    }
  });

  document.addEventListener("click", function (event) {
    const toggle = event.target.closest("[data-sidebar-toggle]");
    if (!toggle) return;
    const chat = document.querySelector(".chat");
    const isOpen = chat.classList.toggle("sidebar-open");
    toggle.setAttribute("aria-expanded", String(isOpen));
  });

  // A refreshed session list shows what the server knew a moment ago; this page knows now.
  document.body.addEventListener("htmx:afterSwap", function (event) {
    if (event.target && event.target.id === "session-list") renderStatus();
  });

  /* --- Conversations: search the list as you type, rename this one in its header ------------------- */
  // htmx refreshes the list as the words change; Enter must not reload the page on top of it.
  document.addEventListener("submit", function (event) {
    if (event.target.matches("[data-session-search-form]") && window.htmx) event.preventDefault();
  });

  const renameOpen = document.querySelector("[data-rename-open]");
  const renameForm = document.querySelector("[data-rename-form]");

  function showRename(isEditing) {
    const titleRow = document.querySelector("[data-title-row]");
    titleRow.hidden = isEditing;
    renameForm.hidden = !isEditing;
    const error = renameForm.querySelector("[data-rename-error]");
    error.hidden = true;
    renameForm.querySelector("[data-rename-input]").removeAttribute("aria-invalid");
    if (isEditing) {
      const field = renameForm.querySelector("[data-rename-input]");
      field.focus();
      field.select();
    }
    else renameOpen.focus();
  }

  function showRenameError(message) {
    const error = renameForm.querySelector("[data-rename-error]");
    error.textContent = message;
    error.hidden = false;
    renameForm.querySelector("[data-rename-input]").setAttribute("aria-invalid", "true");
  }

  function showTitle(title) {
    const heading = document.querySelector(".chat-title h1");
    heading.textContent = title;
    heading.removeAttribute("data-untitled");
    document.title = title + " · Agentry";
    const listed = document.querySelector('[data-session-id="' + config.sessionId + '"] .session-title');
    if (listed) listed.textContent = title;
  }

  function rename(title) {
    return fetch("/api/v1/sessions/" + config.sessionId + "/", {
      method: "PATCH",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: JSON.stringify({ title: title }),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (payload) {
        if (response.ok) return payload;
        const fields = (payload.error && payload.error.fields) || {};
        throw new Error((fields.title || [])[0] || (payload.error && payload.error.message) || "Could not rename it (" + response.status + ").");
      });
    }, function () { throw new Error("Could not reach the server. Check your connection."); });
  }

  if (renameOpen && renameForm) {
    renameOpen.hidden = false;
    renameOpen.addEventListener("click", function () { showRename(true); });
    renameForm.querySelector("[data-rename-cancel]").addEventListener("click", function () { showRename(false); });
    renameForm.addEventListener("keydown", function (event) {
      if (event.key === "Escape") { event.preventDefault(); event.stopPropagation(); showRename(false); }
    });
    renameForm.addEventListener("submit", function (event) {
      event.preventDefault();
      const title = renameForm.querySelector("[data-rename-input]").value.trim();
      if (!title) { showRenameError("Give the conversation a title."); return; }
      const save = renameForm.querySelector("[type=submit]");
      save.disabled = true;
      rename(title)
        .then(function (session) { showTitle(session.title); showRename(false); toast("Renamed.", "success"); refreshSessionList(); })
        .catch(function (error) { showRenameError(error.message); })
        .finally(function () { save.disabled = false; });
    });
  }

  /* --- Attachments: uploaded at once with their progress, sent with the message as ids ---------------- */
  /* Sizes as the pages show them (Django's filesizeformat). */
  function formatSize(bytes) {
    if (bytes < 1024) return bytes === 1 ? "1 byte" : bytes + " bytes";
    const units = ["KB", "MB", "GB", "TB"];
    let value = bytes / 1024;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return value.toFixed(1) + "\u00a0" + units[unit];
  }

  function attachmentIds(attachments) {
    return (attachments || []).map(function (attachment) { return attachment.id; });
  }

  function showAttachments(list, attachments) {
    if (!list || !attachments.length) return;
    attachments.forEach(function (attachment) {
      const isImage = (attachment.content_type || "").indexOf("image/") === 0;
      const item = clone(isImage ? "tpl-attachment-image" : "tpl-attachment-file");
      const link = item.querySelector("a");
      link.href = attachment.download_url;
      if (isImage) {
        link.title = attachment.name;
        const image = item.querySelector("img");
        image.src = attachment.download_url;
        image.alt = attachment.name;
      } else {
        slot(item, "name").textContent = attachment.name;
        slot(item, "size").textContent = formatSize(attachment.size);
      }
      list.appendChild(item);
    });
    list.hidden = false;
  }

  function uploadsInFlight() {
    return state.uploads.some(function (upload) { return upload.state === "uploading"; });
  }

  function failedUploads() {
    return state.uploads.some(function (upload) { return upload.state === "failed"; });
  }

  /* The uploaded files for the message being sent; the tray empties for the next one. */
  function takeUploads() {
    const taken = state.uploads.map(function (upload) { return upload.stored; });
    state.uploads.slice().forEach(function (upload) { dropUpload(upload, false); });
    return taken;
  }

  function dropUpload(upload, wasRemoved) {
    upload.isDropped = true;
    if (upload.state === "uploading") upload.xhr.abort();
    window.clearTimeout(upload.pollTimer);
    state.uploads = state.uploads.filter(function (other) { return other !== upload; });
    upload.chip.remove();
    uploadTray.hidden = state.uploads.length === 0;
    if (wasRemoved) input.focus();
  }

  function setUploadProgress(upload, percent) {
    const bar = slot(upload.chip, "progress");
    bar.setAttribute("aria-valuenow", String(percent));
    bar.firstElementChild.style.width = percent + "%";
  }

  function setUploadState(upload, uploadState, label) {
    upload.state = uploadState;
    upload.chip.setAttribute("data-state", uploadState);
    slot(upload.chip, "status").textContent = label;
    slot(upload.chip, "progress").hidden = uploadState !== "uploading";
  }

  function failUpload(upload, message) {
    setUploadState(upload, "failed", "failed");
    const error = slot(upload.chip, "error");
    error.textContent = message;
    error.hidden = false;
  }

  /* The API's error envelope as one sentence: its message, then what it says of each field. */
  function apiErrorText(payload, status) {
    const error = payload && payload.error;
    if (!error) return "The upload failed (" + status + ").";
    const details = [];
    Object.keys(error.fields || {}).forEach(function (name) { details.push.apply(details, [].concat(error.fields[name])); });
    const message = error.message || "The upload failed (" + status + ").";
    return details.length && details.join(" ") !== message ? message + " " + details.join(" ") : message;
  }

  /* Documents are read in the background: follow one until it is ready or has failed. */
  function showStoredState(upload, stored) {
    upload.stored = stored;
    if (stored.status === "failed") { failUpload(upload, stored.status_reason || "This file could not be read."); return; }
    if (stored.status === "ready") { setUploadState(upload, "ready", "ready"); return; }
    setUploadState(upload, "processing", "reading…");
    upload.polls = (upload.polls || 0) + 1;
    if (upload.polls > FILE_POLL_LIMIT) return;
    upload.pollTimer = window.setTimeout(function () {
      fetch("/api/v1/files/" + stored.id + "/", { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (fresh) { if (fresh && !upload.isDropped) showStoredState(upload, fresh); })
        .catch(function () { /* the file is still usable; its chip just stops updating */ });
    }, FILE_POLL_MS);
  }

  function showThumbnail(upload, stored) {
    if ((stored.content_type || "").indexOf("image/") !== 0) return;
    const image = upload.chip.querySelector(".upload-thumb img");
    image.src = stored.download_url;
    image.hidden = false;
    upload.chip.querySelector(".upload-thumb .attachment-icon").style.display = "none";
  }

  function uploadChip(file) {
    const chip = clone("tpl-upload-chip");
    slot(chip, "name").textContent = file.name;
    slot(chip, "name").title = file.name;
    slot(chip, "size").textContent = formatSize(file.size);
    slot(chip, "progress").setAttribute("aria-label", "Uploading " + file.name);
    chip.querySelector("[data-remove-upload]").setAttribute("aria-label", "Remove " + file.name);
    return chip;
  }

  function uploadFile(file) {
    const upload = { file: file, chip: uploadChip(file), xhr: new XMLHttpRequest(), state: "uploading", stored: null };
    state.uploads.push(upload);
    uploadTray.appendChild(upload.chip);
    uploadTray.hidden = false;
    upload.chip.querySelector("[data-remove-upload]").addEventListener("click", function () { dropUpload(upload, true); });
    const xhr = upload.xhr;
    xhr.upload.addEventListener("progress", function (event) {
      if (event.lengthComputable) setUploadProgress(upload, Math.round((event.loaded / event.total) * 100));
    });
    xhr.addEventListener("load", function () {
      let payload = null;
      try { payload = JSON.parse(xhr.responseText); } catch (error) { payload = null; }
      if (xhr.status !== 201 || !payload) { failUpload(upload, apiErrorText(payload, xhr.status)); return; }
      setUploadProgress(upload, 100);
      showThumbnail(upload, payload);
      showStoredState(upload, payload);
    });
    xhr.addEventListener("error", function () { failUpload(upload, "The connection dropped before the upload finished."); });
    const body = new FormData();
    body.append("file", file);
    body.append("session", config.sessionId);
    xhr.open("POST", "/api/v1/files/");
    xhr.setRequestHeader("X-CSRFToken", csrfToken());
    xhr.setRequestHeader("Accept", "application/json");
    xhr.send(body);
  }

  function uploadFiles(files) {
    Array.prototype.forEach.call(files || [], uploadFile);
  }

  /* Dragging over the panel fires enter and leave for every child: count them to know when it left. */
  function acceptDrops() {
    let depth = 0;
    function carriesFiles(event) {
      return event.dataTransfer && Array.prototype.indexOf.call(event.dataTransfer.types || [], "Files") >= 0;
    }
    chatPanel.addEventListener("dragenter", function (event) {
      if (!carriesFiles(event)) return;
      event.preventDefault();
      depth += 1;
      dropOverlay.hidden = false;
    });
    chatPanel.addEventListener("dragover", function (event) {
      if (!carriesFiles(event)) return;
      event.preventDefault();
      event.dataTransfer.dropEffect = "copy";
    });
    chatPanel.addEventListener("dragleave", function (event) {
      if (!carriesFiles(event)) return;
      depth = Math.max(0, depth - 1);
      if (depth === 0) dropOverlay.hidden = true;
    });
    chatPanel.addEventListener("drop", function (event) {
      if (!carriesFiles(event)) return;
      event.preventDefault();
      depth = 0;
      dropOverlay.hidden = true;
      uploadFiles(event.dataTransfer.files);
      input.focus();
    });
  }

  // Attaching needs this script: without it the form posts text only.
  if (composer && attachButton && fileInput && !attachButton.disabled) {
    attachButton.hidden = false;
    attachButton.addEventListener("click", function () { fileInput.click(); });
    fileInput.addEventListener("change", function () {
      uploadFiles(fileInput.files);
      fileInput.value = "";
    });
    acceptDrops();
  }

  /* --- Citations: numbered sources under an answer, each opening its passage ------------------------------ */
  function citationLabel(citation) {
    let label = "[" + citation.number + "] " + citation.document;
    if (citation.page) label += " · p. " + citation.page;
    else if (citation.heading) label += " · " + citation.heading;
    return label;
  }

  /* --- Artifacts: a card per file a tool made, with its preview ---------------------------------- */
  const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

  function artifactCard(artifact) {
    const card = clone("tpl-artifact-card");
    card.setAttribute("data-file-id", artifact.file_id);
    slot(card, "name").textContent = artifact.name;
    slot(card, "name").title = artifact.name;
    slot(card, "details").textContent = artifact.content_type + " · " + formatSize(artifact.size);
    const download = card.querySelector("[data-artifact-download]");
    download.href = artifact.download_url;
    download.setAttribute("download", artifact.name);
    download.setAttribute("aria-label", "Download " + artifact.name);
    if (IMAGE_TYPES.indexOf(artifact.content_type) !== -1) {
      card.setAttribute("data-preview-kind", "image");
      const link = slot(card, "image-link");
      link.href = artifact.download_url;
      link.title = artifact.name;
      const image = link.querySelector("img");
      image.src = artifact.download_url;
      image.alt = artifact.name;
      link.hidden = false;
    } else if (artifact.content_type !== "application/octet-stream") {
      loadPreview(card, artifact.file_id);
    }
    return card;
  }

  /* CSV rows and text come from the files API's preview, which reads only the file's head. */
  function loadPreview(card, fileId) {
    fetch("/api/v1/files/" + fileId + "/preview/", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (preview) { if (preview) showPreview(card, preview); })
      .catch(function () { /* the card still downloads the file */ });
  }

  function showPreview(card, preview) {
    card.setAttribute("data-preview-kind", preview.kind);
    const box = slot(card, "preview");
    if (preview.kind === "csv" && preview.rows.length) box.appendChild(previewTable(preview.rows));
    else if (preview.kind === "text" && preview.text) {
      const text = document.createElement("pre");
      text.className = "artifact-text";
      text.textContent = preview.text + (preview.is_truncated ? "…" : "");
      box.appendChild(text);
    } else return;
    if (preview.kind === "csv" && preview.is_truncated) {
      const more = document.createElement("p");
      more.className = "artifact-more small muted";
      more.textContent = "First rows; download the file for all of it.";
      box.appendChild(more);
    }
    keepPinned(function () { box.hidden = false; });
  }

  function previewTable(rows) {
    const table = document.createElement("table");
    table.className = "artifact-table";
    rows.forEach(function (row, index) {
      const line = table.insertRow();
      row.forEach(function (value) {
        const cell = document.createElement(index === 0 ? "th" : "td");
        if (index === 0) cell.scope = "col";
        cell.textContent = value;
        line.appendChild(cell);
      });
    });
    return table;
  }

  function citationChips(citations) {
    const group = clone("tpl-citations");
    citations.forEach(function (citation) {
      const chip = clone("tpl-citation-chip");
      chip.textContent = citationLabel(citation);
      chip.setAttribute("data-number", String(citation.number));
      chip.setAttribute("data-file-id", citation.file_id);
      chip.setAttribute("data-document", citation.document);
      chip.setAttribute("data-page", citation.page === null || citation.page === undefined ? "" : String(citation.page));
      chip.setAttribute("data-heading", citation.heading || "");
      chip.setAttribute("data-passage", citation.passage || "");
      group.appendChild(chip);
    });
    return group;
  }

  function openCitation(chip) {
    if (!citationDialog) return;
    const page = chip.getAttribute("data-page");
    const heading = chip.getAttribute("data-heading");
    const location = [page ? "Page " + page : "", heading].filter(Boolean).join(" · ");
    slot(citationDialog, "number").textContent = "Source [" + chip.getAttribute("data-number") + "]";
    slot(citationDialog, "document").textContent = chip.getAttribute("data-document");
    slot(citationDialog, "location").textContent = location;
    slot(citationDialog, "location").hidden = !location;
    slot(citationDialog, "passage").textContent = chip.getAttribute("data-passage");
    slot(citationDialog, "download").href = "/api/v1/files/" + chip.getAttribute("data-file-id") + "/download/";
    citationDialog.showModal();
  }

  transcript.addEventListener("click", function (event) {
    const chip = event.target.closest("[data-citation]");
    if (chip) openCitation(chip);
  });

  /* --- Branches: regenerate an answer, edit a message and send it again, ‹ n/m › ------------------ */
  /* Each action changes the branch the session shows (server side), so the page reloads to show it;
     a new run then streams in from the lane like any other. */
  function postJson(path, body) {
    return fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: JSON.stringify(body || {}),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (payload) {
        if (!response.ok) throw new Error(branchErrorText(payload, response.status));
        return payload;
      });
    });
  }

  function branchErrorText(payload, status) {
    const error = payload && payload.error;
    if (!error) return "Something went wrong (" + status + ").";
    const details = [];
    Object.keys(error.fields || {}).forEach(function (name) { details.push.apply(details, [].concat(error.fields[name])); });
    return details.length && details.join(" ") !== error.message ? error.message + " " + details.join(" ") : error.message;
  }

  function branchAction(button, path, body) {
    button.disabled = true;
    return postJson(path, body)
      .then(function () { window.location.reload(); })
      .catch(function (error) { button.disabled = false; toast(error.message, "error"); });
  }

  /* A run answering on another branch: its status counts in the lane, its answer is not shown here. */
  function isOffBranch(run, envelope) {
    if ((config.offBranchRunIds || []).indexOf(run.id) < 0) return false;
    if (TERMINAL[envelope.type]) run.status = TERMINAL[envelope.type];
    else if (envelope.type === "run.started") run.status = "running";
    renderStatus();
    return true;
  }

  /* A message placed in the conversation (its run started) can be edited and sent again: the
     edit is a sibling under the message it follows, which the run's start names. */
  function offerEdit(run) {
    if (run.messageParentId === undefined) return;
    const turn = userTurn(run.messageId);
    const button = turn ? turn.querySelector(":scope > .message-actions [data-edit]") : null;
    if (!button) return;
    turn.setAttribute("data-parent-id", run.messageParentId);
    button.hidden = false;
  }

  /* A top-level answer that ended can be answered again. */
  function offerRegenerate(run) {
    const button = run.turn && !run.parentId ? run.turn.querySelector(":scope > [data-parts] > .message-actions [data-regenerate]") : null;
    if (!button) return;
    button.setAttribute("data-regenerate", run.id);
    button.hidden = false;
  }

  function openEditor(turn) {
    if (turn.querySelector("[data-message-editor]")) return;
    const bubble = turn.querySelector(".bubble");
    const editor = clone("tpl-message-editor");
    const field = slot(editor, "text");
    field.value = bubble.textContent;
    bubble.hidden = true;
    bubble.after(editor);
    turn.classList.add("is-editing");
    field.focus();
    field.setSelectionRange(field.value.length, field.value.length);
    function close() {
      editor.remove();
      bubble.hidden = false;
      turn.classList.remove("is-editing");
      const edit = turn.querySelector("[data-edit]");
      if (edit) edit.focus();
    }
    editor.querySelector("[data-edit-cancel]").addEventListener("click", close);
    field.addEventListener("keydown", function (event) {
      if (event.key === "Escape") { event.preventDefault(); close(); }
      else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); editor.requestSubmit(); }
    });
    editor.addEventListener("submit", function (event) {
      event.preventDefault();
      if (!field.value.trim()) { toast("Message cannot be empty.", "error"); return; }
      const attachments = (turn.getAttribute("data-attachment-ids") || "").split(",").filter(Boolean);
      branchAction(editor.querySelector('[type="submit"]'), "/api/v1/sessions/" + config.sessionId + "/messages/", {
        content: field.value,
        parent_id: turn.getAttribute("data-parent-id") || null,
        attachments: attachments,
      });
    });
  }

  transcript.addEventListener("click", function (event) {
    const regenerate = event.target.closest("[data-regenerate]");
    const target = event.target.closest("[data-branch-target]");
    const edit = event.target.closest("[data-edit]");
    if (regenerate && regenerate.getAttribute("data-regenerate")) {
      branchAction(regenerate, "/api/v1/runs/" + regenerate.getAttribute("data-regenerate") + "/regenerate/");
    } else if (target) {
      branchAction(target, "/api/v1/sessions/" + config.sessionId + "/branch/", { message_id: target.getAttribute("data-branch-target") });
    } else if (edit) {
      openEditor(edit.closest(".turn-user"));
    }
  });

  /* --- Start -------------------------------------------------------------------------------------------- */
  config.laneRuns.forEach(function (lane) {
    const run = runRecord(lane.id);
    run.messageId = lane.messageId;
    run.status = lane.status === "queued" ? "queued" : WAITING_STATUSES.indexOf(lane.status) >= 0 ? lane.status : "running";
    run.phase = run.status === "running" ? "Working…" : "";
  });
  renderStatus();
  const linked = window.location.hash ? document.getElementById(window.location.hash.slice(1)) : null;
  if (linked && transcript.contains(linked)) linked.scrollIntoView({ block: "start" });
  else transcript.scrollTop = transcript.scrollHeight;
  connect();

  /* For people and tests: reconnect at once, as after a network drop. */
  window.agentryChat = {
    state: state,
    dropConnection: function () { if (state.socket) state.socket.close(); },
  };
})();
