/* The live chat: follows the session's events over the websocket and renders them.

   The page renders finished runs; runs still in the lane are replayed from the event store
   (the socket's ?after=SEQ) and then followed live. Commands (send, cancel, approve) go over
   the socket, or over HTTP when it is down. Files are uploaded as soon as they are picked or
   dropped, and the message carries their ids. Each part lives in its own module; this one
   starts them. */
import { listenForCitations } from "./artifacts.js";
import { acceptAttachments } from "./attachments.js";
import { listenForBranchActions } from "./branches.js";
import { listenToComposer, listenToConversations } from "./composer.js";
import { config, state, transcript } from "./page.js";
import { listenForRunActions } from "./sending.js";
import { connect, followConnectivity } from "./socket.js";
import { WAITING_STATUSES, renderStatus } from "./status.js";
import { runRecord } from "./turns.js";

listenForRunActions();
listenToComposer();
listenToConversations();
acceptAttachments();
listenForCitations();
listenForBranchActions();
followConnectivity();

config.laneRuns.forEach(function (lane) {
  const run = runRecord(lane.id);
  run.messageId = lane.messageId;
  run.status = lane.status === "queued" ? "queued" : WAITING_STATUSES.indexOf(lane.status) >= 0 ? lane.status : "running";
  run.phase = run.status === "running" ? "Working…" : "";
});
renderStatus();
const linked = window.location.hash ? document.getElementById(window.location.hash.slice(1)) : null;
if (linked && transcript.contains(linked)) linked.scrollIntoView({ block: "start" });
else transcript.scrollTop = transcript.scrollHeight;
connect();

/* For people and tests: reconnect at once, as after a network drop. */
window.agentryChat = {
  state: state,
  dropConnection: function () { if (state.socket) state.socket.close(); },
};
