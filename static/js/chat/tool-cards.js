/* What a tool card shows and asks: the call's result, an approval to decide (with arguments the
   approver may edit), and a question (ask_user) the run waits on. */
import { command, postForm } from "./commands.js";
import { config, pretty, slot, toast, url } from "./page.js";
import { setCardState } from "./turns.js";

export function showResult(card, data) {
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

/* --- Approvals ------------------------------------------------------------------------------------ */
export function askApproval(run, card, data) {
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

export function showDecision(card, data) {
  const approval = slot(card, "approval");
  if (approval) approval.hidden = true;
  const approved = data.decision === "approve";
  const who = data.decided_by ? " by " + data.decided_by : "";
  const verb = data.status === "expired" ? "Expired (" + data.decision + ")" : approved ? "Approved" : "Denied";
  const edited = data.arguments_edited ? " with edited arguments" : "";
  slot(card, "approval-note").textContent = verb + who + edited + (data.reason ? ": " + data.reason : "");
  if (data.arguments_edited) slot(card, "arguments").textContent = pretty(data.arguments);
  setCardState(card, approved ? "pending" : "denied", approved ? "approved" : "denied");
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

/* --- Questions (ask_user): the agent asks, the run waits for the answer ---------------------------- */
export function askQuestion(run, card, data) {
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

export function closeQuestion(box) {
  slot(box, "question-choices").textContent = "";
  slot(box, "question-form").hidden = true;
}

export function showAnswer(card, data) {
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
