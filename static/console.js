/* Gatehouse console: countdowns, keyboard shortcuts, money hints.
 * htmx does every request; this file only helps people read and move. */
(function () {
  "use strict";

  function compact(seconds) {
    var d = Math.floor(seconds / 86400), h = Math.floor((seconds % 86400) / 3600);
    var m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + String(m).padStart(2, "0") + "m";
    if (m) return m + "m " + String(s).padStart(2, "0") + "s";
    return s + "s";
  }

  function brl(cents) {
    var negative = cents < 0;
    cents = Math.abs(Math.trunc(cents));
    var units = String(Math.floor(cents / 100)).replace(/\B(?=(\d{3})+(?!\d))/g, ".");
    return (negative ? "-" : "") + "R$ " + units + "," + String(cents % 100).padStart(2, "0");
  }

  /* The server says how many seconds are left; counting from when this page saw
   * that number keeps the countdown right even if this computer's clock is not. */
  function tick() {
    var now = performance.now();
    document.querySelectorAll("[data-seconds-left]").forEach(function (el) {
      if (el._deadline === undefined) el._deadline = now + Number(el.dataset.secondsLeft) * 1000;
      var left = Math.round((el._deadline - now) / 1000);
      el.textContent = left > 0 ? compact(left) : "expired";
      el.classList.toggle("countdown-soon", left > 0 && left < 300);
      el.classList.toggle("countdown-expired", left <= 0);
      if (left <= 0 && el.dataset.disable) {
        var button = document.querySelector(el.dataset.disable);
        if (button) button.disabled = true;  // the server refuses anyway; this only saves a click
      }
    });
  }

  function moneyHints(root) {
    root.querySelectorAll("input[data-money='cents']").forEach(function (input) {
      if (input._hint) return;
      var hint = document.createElement("span");
      hint.className = "money-hint";
      hint.setAttribute("aria-live", "polite");
      input.insertAdjacentElement("afterend", hint);
      input._hint = hint;
      /* Red when the server would refuse it: not whole cents, or outside the tool's bounds. */
      var serverSaidNo = Boolean(input.closest(".field-error"));
      var update = function () {
        var value = Number(input.value), text = "", invalid = false;
        if (input.value !== "") {
          invalid = !Number.isInteger(value);
          text = Number.isFinite(value) ? "= " + brl(value) : "not an amount in cents";
          if (input.dataset.minimum !== undefined && value < Number(input.dataset.minimum)) {
            invalid = true;
            text += " · at least " + brl(Number(input.dataset.minimum));
          }
          if (input.dataset.maximum !== undefined && value > Number(input.dataset.maximum)) {
            invalid = true;
            text += " · at most " + brl(Number(input.dataset.maximum));
          }
          if (!Number.isInteger(value) && Number.isFinite(value)) text += " · whole cents only";
        }
        hint.textContent = text;
        hint.classList.toggle("money-hint-invalid", invalid || serverSaidNo);
        serverSaidNo = false;  // once the reviewer types, the hint speaks for the new value
      };
      input.addEventListener("input", update);
      update();
    });
  }

  function focusElement(selector) {
    var el = document.querySelector(selector);
    if (!el || el.disabled) return false;
    el.focus();
    el.scrollIntoView({ block: "nearest" });
    return true;
  }

  function moveInQueue(step) {
    var links = Array.prototype.slice.call(document.querySelectorAll("a.row-link"));
    if (!links.length) return;
    var index = links.indexOf(document.activeElement);
    var next = index < 0 ? (step > 0 ? 0 : links.length - 1) : Math.min(links.length - 1, Math.max(0, index + step));
    links[next].focus();
    links[next].scrollIntoView({ block: "nearest" });
  }

  var shortcuts = {
    a: function () { return focusElement("#approve-button"); },
    r: function () { return focusElement("#reject-reason"); },
    e: function () {
      var link = document.querySelector("#edit-link");
      if (link) window.location.assign(link.href);
      return Boolean(link);
    },
    j: function () { moveInQueue(1); return true; },
    k: function () { moveInQueue(-1); return true; },
    "/": function () { return focusElement(".filters select, .filters input"); },
  };

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    if (target.closest && target.closest("input, textarea, select, [contenteditable]")) {
      if (event.key === "Escape") target.blur();
      return;
    }
    var action = shortcuts[event.key];
    if (action && action()) event.preventDefault();
  });

  /* A queue refresh replaces the rows: keep the keyboard focus on the same call. */
  var focusedCall = null;
  document.addEventListener("htmx:beforeSwap", function () {
    var row = document.activeElement && document.activeElement.closest && document.activeElement.closest("tr[data-call]");
    focusedCall = row ? row.dataset.call : null;
  });
  /* The title carries the pending count, so a background tab shows it; keep it in step with the badge. */
  function titleCount() {
    var badge = document.getElementById("pending-badge");
    if (!badge) return;
    var count = badge.dataset.count;
    var bare = document.title.replace(/^\(\d+\+?\) /, "");
    document.title = count && count !== "0" ? "(" + count + ") " + bare : bare;
  }
  document.addEventListener("htmx:afterSettle", titleCount);
  document.addEventListener("htmx:afterSwap", function () {
    if (focusedCall) {
      var link = document.querySelector('tr[data-call="' + focusedCall + '"] a.row-link');
      if (link) link.focus({ preventScroll: true });
    }
    tick();
  });
  /* htmx leaves the page as it was when a request fails; say so instead of failing silently. */
  function showProblem(text) {
    var banner = document.getElementById("connection-problem");
    if (!banner) {
      banner = document.createElement("p");
      banner.id = "connection-problem";
      banner.className = "problem-banner";
      banner.setAttribute("role", "alert");
      document.body.appendChild(banner);
    }
    banner.textContent = text;
    banner.hidden = false;
  }
  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr.status;
    showProblem(status === 403
      ? "The server refused that request (403). Your session may have changed: reload the page."
      : "The server answered " + status + ". Try again; if it persists, reload the page.");
  });
  document.addEventListener("htmx:sendError", function () {
    showProblem("Cannot reach Gatehouse. The page will catch up by itself once the connection is back.");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var banner = document.getElementById("connection-problem");
    if (banner && event.detail.successful) banner.hidden = true;
  });
  document.addEventListener("htmx:load", function (event) { moneyHints(event.detail.elt); });
  document.addEventListener("DOMContentLoaded", function () { tick(); moneyHints(document); });
  setInterval(tick, 1000);
})();
