/* Gatehouse's admin pages. A long-running form says so on its button once sent (data-busy-label). */
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var label = event.target.dataset && event.target.dataset.busyLabel;
    var button = label && event.target.querySelector("[type=submit]");
    if (button) button.value = label;
  });
})();
