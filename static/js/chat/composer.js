/* The composer (Enter sends, Shift+Enter breaks the line, Escape stops the answer), suggestions,
   and the conversations around it: the sidebar, its search, and renaming this one. */
import { failedUploads, takeUploads, uploadsInFlight } from "./attachments.js";
import { composer, config, csrfToken, input, refreshSessionList, toast, transcript } from "./page.js";
import { cancelRun, send } from "./sending.js";
import { activeRun, cancelButton, renderStatus } from "./status.js";

function autoGrow() {
  input.style.height = "auto";
  input.style.height = Math.min(input.scrollHeight + 2, 224) + "px";
}

export function listenToComposer() {
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
}

export function listenToConversations() {
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
  // htmx refreshes the list as the words change; Enter must not reload the page on top of it.
  document.addEventListener("submit", function (event) {
    if (event.target.matches("[data-session-search-form]") && window.htmx) event.preventDefault();
  });
  offerRename();
}

/* --- Rename this conversation in its header -------------------------------------------------------- */
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

function offerRename() {
  if (!renameOpen || !renameForm) return;
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
