/* What an answer brings besides its text: numbered citations under it, each opening its
   passage, and a card per file a tool made, with a preview. */
import { clone, formatSize, keepPinned, slot, transcript } from "./page.js";

const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const citationDialog = document.getElementById("citation-dialog");

/* --- Citations --------------------------------------------------------------------------------- */
function citationLabel(citation) {
  let label = "[" + citation.number + "] " + citation.document;
  if (citation.page) label += " · p. " + citation.page;
  else if (citation.heading) label += " · " + citation.heading;
  return label;
}

export function citationChips(citations) {
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

export function listenForCitations() {
  transcript.addEventListener("click", function (event) {
    const chip = event.target.closest("[data-citation]");
    if (chip) openCitation(chip);
  });
}

/* --- Artifacts ----------------------------------------------------------------------------------- */
export function artifactCard(artifact) {
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
