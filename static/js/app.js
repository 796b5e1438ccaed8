/* Agentry pages: toasts, loading states, dialogs, sliders, shortcuts, Markdown and copy buttons.
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

  /* A message already on screen is not repeated: a failure retried while offline says so once. */
  function isShowing(region, message, level) {
    return Array.prototype.some.call(region.querySelectorAll(".toast-" + level + ":not(.is-leaving)"), function (toast) {
      return toast.textContent === message;
    });
  }

  agentry.toast = function (message, level) {
    const region = document.getElementById("toasts");
    if (!region || !message || isShowing(region, message, level || "info")) return;
    const toast = document.createElement("div");
    toast.className = "toast toast-" + (level || "info");
    toast.textContent = message;
    region.appendChild(toast);
    dismissLater(toast);
  };

  /* --- Markdown: marked (GFM) → DOMPurify → highlight.js, all vendored ------------------------- */
  // Model output is untrusted: only what DOMPurify keeps reaches the page, and never anything
  // that runs script, submits, embeds or restyles it.
  const SANITIZE = {
    FORBID_TAGS: ["style", "iframe", "frame", "form", "input", "button", "textarea", "select", "option", "object", "embed", "svg", "math", "base", "link", "meta"],
    FORBID_ATTR: ["style", "id", "name", "target", "srcset"],
  };
  let markdownParser = null;

  /* Images load only from this site's own paths: a remote image would tell a third party what
     the answer held (prompt injection's favourite way out). The address is judged as the browser
     will resolve it, since "/\host" and a tab after the first slash both lead to another site.
     Links open apart, with no referrer. */
  function isOwnPath(source) {
    if (!source.startsWith("/")) return false;
    try {
      return new URL(source, window.location.href).origin === window.location.origin;
    } catch (error) {
      return false;
    }
  }

  function fenceSanitizedNode(node) {
    if (node.tagName === "A" && node.hasAttribute("href")) {
      node.setAttribute("rel", "noopener noreferrer");
      node.setAttribute("target", "_blank");
    } else if (node.tagName === "IMG") {
      if (!isOwnPath(node.getAttribute("src") || "")) node.replaceWith(document.createTextNode(node.getAttribute("alt") || ""));
    }
  }

  function parser() {
    if (!markdownParser && window.marked && window.DOMPurify) {
      markdownParser = new window.marked.Marked({ gfm: true, breaks: true, async: false });
      window.DOMPurify.addHook("afterSanitizeAttributes", fenceSanitizedNode);
      if (window.hljs) window.hljs.configure({ ignoreUnescapedHTML: true });
    }
    return markdownParser;
  }

  agentry.markdownHtml = function (source) {
    const markdown = parser();
    if (!markdown) return null;
    return window.DOMPurify.sanitize(markdown.parse(String(source)).trim(), SANITIZE);
  };

  /* A code block gets its language's colours and a Copy button above it. */
  function dressCodeBlock(code) {
    const pre = code.parentElement;
    const language = ((code.className.match(/language-([\w+#-]+)/) || [])[1] || "").toLowerCase();
    if (window.hljs) {
      if (language && !window.hljs.getLanguage(language)) code.classList.replace("language-" + language, "language-plaintext");
      window.hljs.highlightElement(code);
    }
    const block = document.createElement("div");
    block.className = "code-block";
    const head = document.createElement("div");
    head.className = "code-head";
    const label = document.createElement("span");
    label.className = "code-language";
    label.textContent = language || "text";
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "code-copy";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", "Copy code");
    copy.setAttribute("data-copy-code", "");
    head.append(label, copy);
    pre.replaceWith(block);
    block.append(head, pre);
  }

  /* Renders Markdown into the element (kept as its source for copying); without the libraries the
     source stays as plain text. */
  agentry.renderMarkdownInto = function (element, source) {
    element.markdownSource = source;
    const html = agentry.markdownHtml(source);
    if (html === null) { element.textContent = source; return; }
    element.innerHTML = html;
    element.querySelectorAll("pre > code").forEach(dressCodeBlock);
    element.classList.add("is-rendered");
  };

  agentry.renderMarkdown = function (element) {
    if (!element || element.classList.contains("is-rendered")) return;
    agentry.renderMarkdownInto(element, element.textContent);
  };

  /* --- Copy actions: a code block's code, a message's Markdown source --------------------------- */
  function writeClipboard(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    const isCopied = document.execCommand("copy");
    area.remove();
    return isCopied ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function showCopied(button) {
    const label = button.getAttribute("aria-label");
    const text = button.textContent;
    button.textContent = "Copied";
    button.setAttribute("aria-label", "Copied");
    window.clearTimeout(button.copiedTimer);
    button.copiedTimer = window.setTimeout(function () {
      button.textContent = text === "Copied" ? "Copy" : text;
      button.setAttribute("aria-label", label === "Copied" ? "Copy" : label);
    }, 2000);
  }

  /* The Markdown the message was written in: a person's text, or an answer's text parts. */
  function messageSource(button) {
    const turn = button.closest(".turn");
    if (!turn) return "";
    if (turn.classList.contains("turn-user")) return turn.querySelector(".bubble .text").textContent;
    const parts = turn.querySelectorAll(":scope > [data-parts] > .part-text");
    return Array.prototype.map.call(parts, function (part) {
      return part.markdownSource !== undefined ? part.markdownSource : part.textContent;
    }).join("\n\n");
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("[data-copy-code], [data-copy-message]");
    if (!button) return;
    const text = button.hasAttribute("data-copy-code")
      ? button.closest(".code-block").querySelector("pre > code").textContent.replace(/\n$/, "")  // marked ends code with a newline
      : messageSource(button);
    writeClipboard(text).then(
      function () { showCopied(button); },
      function () { agentry.toast("Copying was refused by the browser; select the text instead.", "error"); }
    );
  });

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
  // Refreshes nobody asked for (a list's polling) fail quietly: the next one tries again.
  function isBackground(event) {
    return Boolean(event.detail.elt && event.detail.elt.closest && event.detail.elt.closest("[data-background-refresh]"));
  }
  document.body.addEventListener("htmx:responseError", function (event) {
    if (isBackground(event)) return;
    const status = event.detail.xhr.status;
    const messages = {
      403: "Your role does not allow this.",
      404: "That no longer exists (or belongs to another tenant).",
      429: "Too many requests; try again in a moment.",
    };
    agentry.toast(messages[status] || "Something went wrong (" + status + "). Try again.", "error");
  });
  document.body.addEventListener("htmx:sendError", function (event) {
    if (isBackground(event)) return;
    agentry.toast("Could not reach the server. Check your connection.", "error");
  });

  /* --- Polling while the tab is visible --------------------------------------------------------------
     An element with data-poll-seconds receives "agentry:poll" that often while the page is seen
     (hx-trigger="agentry:poll"). htmx's own trigger filters would need eval, which the page's
     Content-Security-Policy refuses. */
  const lastPolled = new WeakMap();
  function pollVisibleElements() {
    if (document.visibilityState !== "visible" || !window.htmx) return;
    const now = Date.now();
    document.querySelectorAll("[data-poll-seconds]").forEach(function (element) {
      const since = lastPolled.get(element);
      if (since === undefined) {
        lastPolled.set(element, now);
      } else if (now - since >= Number(element.getAttribute("data-poll-seconds")) * 1000) {
        lastPolled.set(element, now);
        window.htmx.trigger(element, "agentry:poll");
      }
    });
  }

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
    window.setInterval(pollVisibleElements, 250);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
