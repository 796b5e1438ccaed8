/* Attachments: uploaded as soon as they are picked or dropped, with their progress; a message
   carries the uploaded files' ids. Documents are read in the background: a chip follows one
   until it is ready or has failed. */
import { apiErrorText, clone, composer, config, csrfToken, formatSize, input, slot, state } from "./page.js";

const FILE_POLL_MS = 1500;
const FILE_POLL_LIMIT = 80;

const chatPanel = document.querySelector(".chat-panel");
const uploadTray = document.querySelector("[data-upload-tray]");
const fileInput = document.querySelector("[data-file-input]");
const attachButton = document.querySelector("[data-attach]");
const dropOverlay = document.querySelector("[data-drop-overlay]");

export function attachmentIds(attachments) {
  return (attachments || []).map(function (attachment) { return attachment.id; });
}

/* A sent message's files under its text: images as thumbnails, other files by name and size. */
export function showAttachments(list, attachments) {
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

export function uploadsInFlight() {
  return state.uploads.some(function (upload) { return upload.state === "uploading"; });
}

export function failedUploads() {
  return state.uploads.some(function (upload) { return upload.state === "failed"; });
}

/* The uploaded files for the message being sent; the tray empties for the next one. */
export function takeUploads() {
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
    if (xhr.status !== 201 || !payload) { failUpload(upload, apiErrorText(payload, "The upload failed (" + xhr.status + ").")); return; }
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

/* Attaching needs this script: without it the form posts text only. */
export function acceptAttachments() {
  if (!composer || !attachButton || !fileInput || attachButton.disabled) return;
  attachButton.hidden = false;
  attachButton.addEventListener("click", function () { fileInput.click(); });
  fileInput.addEventListener("change", function () {
    uploadFiles(fileInput.files);
    fileInput.value = "";
  });
  acceptDrops();
}
