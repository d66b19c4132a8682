/* The queue's batch decisions from the keyboard: x selects the focused row, Shift+A / Shift+R ask to confirm. */
(function () {
  "use strict";

  function focusedRow() {
    var el = document.activeElement;
    return el && el.closest ? el.closest("#queue-yours tr[data-call]") : null;
  }

  function toggleFocused() {
    var row = focusedRow();
    var box = row && row.querySelector(".pick input[type=checkbox]");
    if (!box) return false;
    box.checked = !box.checked;
    return true;
  }

  function press(id) {
    var button = document.getElementById(id);
    if (!button) return false;
    button.click();
    return true;
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    var typing = target.closest && target.closest("textarea, select, [contenteditable], input:not([type=checkbox])");
    if (typing) return;
    var done = false;
    if (event.key === "x" && !event.shiftKey) done = toggleFocused();
    else if (event.key === "A" && event.shiftKey) done = press("batch-approve");
    else if (event.key === "R" && event.shiftKey) done = press("batch-reject");
    if (done) event.preventDefault();
  });

  /* While the reviewer is picking calls, the queue's 5-second refresh waits (it would redraw the rows under the
     pointer); a refresh asked for by a decision (calls-changed) still happens. A poll comes with no event. */
  document.addEventListener("htmx:confirm", function (event) {
    if (event.detail.elt.id !== "queue-results" || event.detail.triggeringEvent) return;
    if (document.querySelector("#queue-results .pick input:checked")) event.preventDefault();
  });

  /* The confirm step takes the keyboard once htmx has taken it over (after settling, not at the swap: until
     then Enter would submit the form as a page): the reason to type, or the button Enter presses. */
  document.addEventListener("htmx:afterSettle", function (event) {
    if (!event.detail.target || event.detail.target.id !== "batch-panel") return;
    var reason = document.getElementById("batch-reason");
    var confirm = document.getElementById("batch-confirm-button");
    if (reason) reason.focus();
    else if (confirm) confirm.focus();
    if (document.getElementById("batch-results")) {
      /* Decided: clear the selection, so the queue refreshes again. */
      document.querySelectorAll("#queue-results .pick input:checked").forEach(function (box) { box.checked = false; });
    }
  });
})();
