/* Branches: regenerate an answer, edit a message and send it again, ‹ n/m ›. Each action changes
   the branch the session shows (server side), so the page reloads to show it; a new run then
   streams in from the lane like any other. */
import { postJson } from "./commands.js";
import { TERMINAL, clone, config, slot, toast, transcript } from "./page.js";
import { renderStatus } from "./status.js";
import { userTurn } from "./turns.js";

/* A run answering on another branch: its status counts in the lane, its answer is not shown here. */
export function isOffBranch(run, envelope) {
  if ((config.offBranchRunIds || []).indexOf(run.id) < 0) return false;
  if (TERMINAL[envelope.type]) run.status = TERMINAL[envelope.type];
  else if (envelope.type === "run.started") run.status = "running";
  renderStatus();
  return true;
}

/* A message placed in the conversation (its run started) can be edited and sent again: the
   edit is a sibling under the message it follows, which the run's start names. */
export function offerEdit(run) {
  if (run.messageParentId === undefined) return;
  const turn = userTurn(run.messageId);
  const button = turn ? turn.querySelector(":scope > .message-actions [data-edit]") : null;
  if (!button) return;
  turn.setAttribute("data-parent-id", run.messageParentId);
  button.hidden = false;
}

/* A top-level answer that ended can be answered again. */
export function offerRegenerate(run) {
  const button = run.turn && !run.parentId ? run.turn.querySelector(":scope > [data-parts] > .message-actions [data-regenerate]") : null;
  if (!button) return;
  button.setAttribute("data-regenerate", run.id);
  button.hidden = false;
}

function branchAction(button, path, body) {
  button.disabled = true;
  return postJson(path, body)
    .then(function () { window.location.reload(); })
    .catch(function (error) { button.disabled = false; toast(error.message, "error"); });
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

export function listenForBranchActions() {
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
}
