/* The session's status as the page shows it: the header and sidebar badges, and the run bar
   with the active run's phase, its steps and how many runs wait behind it. */
import { config, state } from "./page.js";

const runBar = document.querySelector("[data-run-bar]");
const runLabel = runBar.querySelector("[data-run-label]");
const runSteps = runBar.querySelector("[data-run-steps]");
const runProgress = runBar.querySelector("[data-run-progress]");
const runQueue = runBar.querySelector("[data-run-queue]");
const statusBadge = document.querySelector("[data-chat-status]");
export const cancelButton = runBar.querySelector("[data-cancel]");

/* A run that waits for people: no worker holds it. */
export const WAITING_STATUSES = ["awaiting_approval", "awaiting_input"];

export function isFinished(run) {
  return ["completed", "failed", "cancelled", "timeout"].indexOf(run.status) >= 0;
}

/* The session's lane: child runs work inside their parent's turn, not in the lane. */
function laneRuns() {
  const runs = [];
  state.runs.forEach(function (run) { if (!isFinished(run) && !run.parentId) runs.push(run); });
  return runs;
}

export function activeRun() {
  return laneRuns().find(function (run) { return run.status !== "queued" || run.phase === "Resuming…"; }) || null;
}

export function renderStatus() {
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
