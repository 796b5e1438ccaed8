/* A finished run's footer: its status when it did not complete, why it stopped, its tokens and
   cost, a link to its timeline, and Retry for a top-level run that failed or was stopped. */
import { config, url } from "./page.js";
import { ensureTurn, footerOf, showChildUsage } from "./turns.js";

const RETRYABLE = ["failed", "cancelled", "timeout"];
// Stop reasons whose words alone would not say it (as web/templatetags/agentry.py STATUS_LABELS).
const REASON_LABELS = { no_price: "no price for this model" };

export function fillFooter(run, data) {
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
  if (data.stop_reason && data.stop_reason !== "end_turn" && data.stop_reason !== run.status) add("span", "small muted", REASON_LABELS[data.stop_reason] || data.stop_reason.replace(/_/g, " "));
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
