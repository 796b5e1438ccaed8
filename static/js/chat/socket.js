/* The socket: connect, replay from the last seq seen, reconnect with backoff. Every event
   carries the session's next sequence number, so after a dropped connection the socket reopens
   with ?after=SEQ and nothing is shown twice or lost. */
import { failPendingCommands, settleCommand } from "./commands.js";
import { handleEvent } from "./events.js";
import { config, state, toast } from "./page.js";

const connection = document.querySelector("[data-connection]");
const connectionLabel = document.querySelector("[data-connection-label]");

function setConnection(kind, label) {
  if (!connection) return;
  connection.setAttribute("data-connection", kind);
  connectionLabel.textContent = label;
  connection.title = label;
}

export function connect() {
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

export function followConnectivity() {
  window.addEventListener("online", connect);
  // Offline, a socket that looks open delivers nothing: close it, and "online" reconnects.
  window.addEventListener("offline", function () {
    if (state.socket) state.socket.close();
    setConnection("offline", "Offline");
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && !state.socket) connect();
  });
}
