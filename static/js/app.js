/* Agentry pages: toasts, loading states, dialogs, sliders, shortcuts, a small Markdown renderer.
   Plain JavaScript, no build step. Every page works without it; this makes them nicer. */
(function () {
  "use strict";

  const agentry = (window.agentry = window.agentry || {});

  /* --- Toasts --------------------------------------------------------------------------- */
  const TOAST_SECONDS = { error: 9, warning: 7 };

  function dismissLater(toast) {
    const level = (toast.className.match(/toast-(\w+)/) || [])[1] || "info";
    const seconds = TOAST_SECONDS[level] || 5;
    window.setTimeout(function () {
      toast.classList.add("is-leaving");
      window.setTimeout(function () { toast.remove(); }, 250);
    }, seconds * 1000);
  }

  agentry.toast = function (message, level) {
    const region = document.getElementById("toasts");
    if (!region || !message) return;
    const toast = document.createElement("div");
    toast.className = "toast toast-" + (level || "info");
    toast.textContent = message;
    region.appendChild(toast);
    dismissLater(toast);
  };

  /* --- Markdown: escaped first, then a few safe constructs ----------------------------------- */
  function escapeHtml(text) {
    return text.replace(/[&<>"']/g, function (character) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[character];
    });
  }

  function inline(text) {
    return escapeHtml(text)
      .split(/(`[^`\n]+`)/)
      .map(function (piece, index) {
        if (index % 2 === 1) return "<code>" + piece.slice(1, -1) + "</code>";
        return piece
          .replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
          .replace(/(^|[^*\w])\*([^*\n]+)\*(?=[^*\w]|$)/g, "$1<em>$2</em>")
          .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" rel="noopener noreferrer" target="_blank">$1</a>');
      })
      .join("");
  }

  agentry.markdown = function (source) {
    const lines = String(source).replace(/\r\n/g, "\n").split("\n");
    const html = [];
    let paragraph = [];
    let list = null;

    function flushParagraph() {
      if (paragraph.length) html.push("<p>" + paragraph.map(inline).join("<br>") + "</p>");
      paragraph = [];
    }
    function flushList() {
      if (list) html.push("<" + list.tag + ">" + list.items.map(function (item) { return "<li>" + inline(item) + "</li>"; }).join("") + "</" + list.tag + ">");
      list = null;
    }

    for (let index = 0; index < lines.length; index++) {
      const line = lines[index];
      const fence = line.match(/^\s*```/);
      if (fence) {
        flushParagraph(); flushList();
        const code = [];
        index++;
        while (index < lines.length && !/^\s*```/.test(lines[index])) { code.push(lines[index]); index++; }
        html.push("<pre><code>" + escapeHtml(code.join("\n")) + "</code></pre>");
        continue;
      }
      const heading = line.match(/^(#{1,6})\s+(.*)$/);
      const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
      const numbered = line.match(/^\s*\d+[.)]\s+(.*)$/);
      if (heading) {
        flushParagraph(); flushList();
        const level = Math.min(6, heading[1].length + 2);
        html.push("<h" + level + ">" + inline(heading[2]) + "</h" + level + ">");
      } else if (bullet || numbered) {
        flushParagraph();
        const tag = bullet ? "ul" : "ol";
        if (!list || list.tag !== tag) { flushList(); list = { tag: tag, items: [] }; }
        list.items.push((bullet || numbered)[1]);
      } else if (!line.trim()) {
        flushParagraph(); flushList();
      } else {
        flushList();
        paragraph.push(line);
      }
    }
    flushParagraph(); flushList();
    return html.join("");
  };

  agentry.renderMarkdown = function (element) {
    if (!element || element.classList.contains("is-rendered")) return;
    element.innerHTML = agentry.markdown(element.textContent);
    element.classList.add("is-rendered");
  };

  /* --- Confirmations: one styled dialog, never the browser's confirm() ----------------------- */
  agentry.confirm = function (question) {
    const dialog = document.getElementById("confirm-dialog");
    return new Promise(function (resolve) {
      let answer = false;
      dialog.querySelector("#confirm-dialog-question").textContent = question;
      dialog.onclick = function (event) {
        const button = event.target.closest("[data-confirm-answer]");
        if (!button) return;
        answer = button.getAttribute("data-confirm-answer") === "yes";
        dialog.close();
      };
      // Esc and Cancel close it too: anything but "yes" is a no.
      dialog.addEventListener("close", function () { resolve(answer); }, { once: true });
      dialog.showModal();
    });
  };

  // htmx's hx-confirm asks through the same dialog.
  document.addEventListener("htmx:confirm", function (event) {
    const question = event.detail.question;
    if (!question) return;
    event.preventDefault();
    agentry.confirm(question).then(function (yes) { if (yes) event.detail.issueRequest(true); });
  });

  /* --- Forms: loading states, confirmations, auto-submit ------------------------------------- */
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    const question = form.getAttribute("data-confirm-submit");
    if (question && form.dataset.confirmed !== "yes") {
      event.preventDefault();
      const submitter = event.submitter;
      agentry.confirm(question).then(function (yes) {
        if (!yes) return;
        form.dataset.confirmed = "yes";
        form.requestSubmit(submitter || undefined);
        delete form.dataset.confirmed;
      });
      return;
    }
    if (event.defaultPrevented || !form.hasAttribute("data-loading")) return;
    const button = event.submitter || form.querySelector("[type=submit]");
    if (button) {
      // After this tick, so the button's own name/value is still sent.
      window.setTimeout(function () { button.setAttribute("aria-busy", "true"); button.disabled = true; }, 0);
    }
  });

  // Coming back with the browser's back button must not leave buttons spinning.
  window.addEventListener("pageshow", function () {
    document.querySelectorAll("[aria-busy=true]").forEach(function (button) {
      button.removeAttribute("aria-busy");
      button.disabled = false;
    });
  });

  document.addEventListener("change", function (event) {
    const form = event.target.closest && event.target.closest("form[data-autosubmit]");
    if (form && event.target.tagName === "SELECT") form.requestSubmit();
  });

  /* --- Dialogs -------------------------------------------------------------------------------- */
  document.addEventListener("click", function (event) {
    const opener = event.target.closest("[data-confirm]");
    if (opener) {
      const dialog = document.getElementById(opener.getAttribute("data-confirm"));
      if (dialog && typeof dialog.showModal === "function") {
        event.preventDefault();
        dialog.showModal();
      }
      return;
    }
    const closer = event.target.closest("[data-dialog-close]");
    if (closer) {
      const dialog = closer.closest("dialog");
      if (dialog) dialog.close();
      return;
    }
    if (event.target.closest("[data-history-back]")) {
      history.length > 1 ? history.back() : (window.location.href = "/");
      return;
    }
    if (event.target.closest("[data-shortcuts-open]")) {
      const shortcuts = document.getElementById("shortcuts");
      if (shortcuts) shortcuts.showModal();
      return;
    }
    const copier = event.target.closest("[data-copy]");
    if (copier) {
      const source = document.querySelector(copier.getAttribute("data-copy"));
      if (!source) return;
      const text = source.value || source.textContent;
      const done = function () { agentry.toast("Copied to the clipboard.", "success"); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, function () { source.select(); document.execCommand("copy"); done(); });
      } else {
        source.select();
        document.execCommand("copy");
        done();
      }
      return;
    }
    const toggle = event.target.closest("[data-nav-toggle]");
    if (toggle) {
      const isOpen = document.body.classList.toggle("nav-open");
      toggle.setAttribute("aria-expanded", String(isOpen));
      return;
    }
    if (document.body.classList.contains("nav-open") && !event.target.closest("#sidenav")) {
      closeNavigation();
    }
  });

  function closeNavigation() {
    document.body.classList.remove("nav-open");
    const toggle = document.querySelector("[data-nav-toggle]");
    if (toggle) toggle.setAttribute("aria-expanded", "false");
  }

  document.addEventListener("focusin", function (event) {
    if (event.target.matches && event.target.matches("[data-select-on-focus]")) event.target.select();
  });

  /* --- Sliders show their value; the agent and MCP forms adapt to their choices ------------------ */
  function showRangeValue(input) {
    const output = document.getElementById(input.id + "_value");
    if (output) output.textContent = input.value;
  }
  document.addEventListener("input", function (event) {
    if (event.target.type === "range") showRangeValue(event.target);
  });

  function setUpAgentForm(form) {
    const provider = form.querySelector("[name=model_provider]");
    const temperature = form.querySelector("[name=temperature]");
    const note = form.querySelector("[data-offline-note]");
    let ranges = {};
    try { ranges = JSON.parse(form.getAttribute("data-temperature-ranges") || "{}"); } catch (error) { ranges = {}; }
    function apply() {
      const range = ranges[provider.value];
      if (range && temperature) {
        temperature.min = range[0];
        temperature.max = range[1];
        if (Number(temperature.value) > range[1]) temperature.value = range[1];
        showRangeValue(temperature);
      }
      if (note) note.hidden = provider.value !== "offline";
    }
    provider.addEventListener("change", apply);
    apply();
  }

  function setUpMcpForm(form) {
    const transport = form.querySelector("[name=transport]");
    function apply() {
      const isStdio = transport.value === "stdio";
      form.querySelectorAll("[data-transport-group]").forEach(function (group) {
        group.hidden = (group.getAttribute("data-transport-group") === "stdio") !== isStdio;
      });
    }
    transport.addEventListener("change", apply);
    apply();
  }

  /* --- Keyboard shortcuts --------------------------------------------------------------------- */
  const GO_TO = { d: "/", c: "/chat/", a: "/agents/", t: "/tools/", m: "/memories/", s: "/settings/" };
  let waitingForGoTo = false;

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && document.body.classList.contains("nav-open")) {
      closeNavigation();
      return;
    }
    const target = event.target;
    const isTyping = target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName);
    if (isTyping || event.ctrlKey || event.metaKey || event.altKey) return;
    if (waitingForGoTo) {
      waitingForGoTo = false;
      if (GO_TO[event.key]) { window.location.href = GO_TO[event.key]; event.preventDefault(); }
      return;
    }
    if (event.key === "/") {
      const field = document.querySelector("[data-search]") || document.getElementById("composer-input");
      if (field) { event.preventDefault(); field.focus(); }
    } else if (event.key === "?") {
      const shortcuts = document.getElementById("shortcuts");
      if (shortcuts) { event.preventDefault(); shortcuts.showModal(); }
    } else if (event.key === "g") {
      waitingForGoTo = true;
      window.setTimeout(function () { waitingForGoTo = false; }, 1500);
    }
  });

  /* --- HTMX: errors and toasts from the server ---------------------------------------------------- */
  document.body.addEventListener("agentry:toast", function (event) {
    agentry.toast(event.detail.message, event.detail.level);
  });
  document.body.addEventListener("htmx:responseError", function (event) {
    const status = event.detail.xhr.status;
    const messages = {
      403: "Your role does not allow this.",
      404: "That no longer exists (or belongs to another tenant).",
      429: "Too many requests; try again in a moment.",
    };
    agentry.toast(messages[status] || "Something went wrong (" + status + "). Try again.", "error");
  });
  document.body.addEventListener("htmx:sendError", function () {
    agentry.toast("Could not reach the server. Check your connection.", "error");
  });

  /* --- Form error summary: focused on arrival so its list of problems is read out first ------------ */
  function focusErrorSummary() {
    const summary = document.querySelector("[data-error-summary]");
    if (summary) summary.focus();
  }

  /* --- Start ------------------------------------------------------------------------------------ */
  function start() {
    document.querySelectorAll("[data-toast]").forEach(dismissLater);
    document.querySelectorAll("input[type=range]").forEach(showRangeValue);
    document.querySelectorAll("[data-markdown]:not(.is-streaming)").forEach(agentry.renderMarkdown);
    document.querySelectorAll("form[data-agent-form]").forEach(setUpAgentForm);
    document.querySelectorAll("form[data-mcp-form]").forEach(setUpMcpForm);
    focusErrorSummary();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
