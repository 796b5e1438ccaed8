/* Sending a message, and the run actions of the transcript and the run bar (cancel, retry).
   A sent message shows at once as queued; the acknowledgement names its message and run. */
import { attachmentIds, showAttachments } from "./attachments.js";
import { offerEdit } from "./branches.js";
import { command, postForm, postMessageOverHttp } from "./commands.js";
import { appendTurn, clone, config, keepPinned, newKey, slot, state, toast, transcript, url } from "./page.js";
import { activeRun, cancelButton, isFinished, renderStatus } from "./status.js";
import { markUserTurnQueued, markUserTurnStarted, markUserTurnStartedIn, runRecord, userTurn } from "./turns.js";

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
export function send(content, attachments, retryKey) {
  attachments = attachments || [];
  nameConversation(content);
  const turn = addPendingUserTurn(content, attachments);
  const key = retryKey || newKey();
  state.pendingSends += 1;
  command({ type: "message", content: content, attachments: attachmentIds(attachments), idempotency_key: key })
    .catch(function (error) {
      // A dropped socket may or may not have delivered it: the same key makes a repeat harmless.
      if (error.isTransport) return postMessageOverHttp(content, attachmentIds(attachments), key);
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
export function insertMessageFromServer(messageId) {
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

/* --- Cancel and retry ----------------------------------------------------------------------------- */
export function cancelRun(runId, button) {
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

export function listenForRunActions() {
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
}
