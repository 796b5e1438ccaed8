/* Commands (send, cancel, approve, answer) go over the socket and are acknowledged there; when
   it is down they go over HTTP. A transport failure is marked ``isTransport``: the caller then
   tries HTTP, and a refusal is shown as it is. */
import { apiErrorText, config, csrfToken, state } from "./page.js";

const COMMAND_TIMEOUT_MS = 10000;
const OFFLINE_MESSAGE = "You are offline: your message was not sent. Retry it when the connection is back.";

export function socketIsOpen() {
  return state.socket && state.socket.readyState === WebSocket.OPEN;
}

export function command(frame) {
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

export function settleCommand(frame) {
  const pending = state.pendingCommands.get(frame.id);
  state.pendingCommands.delete(frame.id);
  window.clearTimeout(pending.timer);
  if (frame.type === "error") pending.reject(Object.assign(new Error(frame.message || "Refused."), { code: frame.code }));
  else pending.resolve(frame);
}

export function failPendingCommands() {
  state.pendingCommands.forEach(function (pending) {
    window.clearTimeout(pending.timer);
    pending.reject(Object.assign(new Error("disconnected"), { isTransport: true }));
  });
  state.pendingCommands.clear();
}

/* A page action's form post (cancel, approve, answer, retry): it answers {ok, message}. */
export function postForm(action, fields) {
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

/* A JSON post to the API, which answers errors in its envelope. */
export function postJson(path, body) {
  return fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
    body: JSON.stringify(body || {}),
  }).then(function (response) {
    return response.json().catch(function () { return {}; }).then(function (payload) {
      if (!response.ok) throw new Error(apiErrorText(payload, "Something went wrong (" + response.status + ")."));
      return payload;
    });
  });
}

/* A message sent over HTTP answers as the socket's acknowledgement does. */
export function postMessageOverHttp(content, attachmentIds, key) {
  if (navigator.onLine === false) return Promise.reject(new Error(OFFLINE_MESSAGE));
  return fetch("/api/v1/sessions/" + config.sessionId + "/messages/", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), "Idempotency-Key": key, Accept: "application/json" },
    body: JSON.stringify({ content: content, attachments: attachmentIds }),
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
