(function () {
  "use strict";
  /* The copy button: hidden until this runs, so with scripts off the command is plain selectable text. */
  var button = document.getElementById("copy");
  var command = document.getElementById("command");
  if (button && command) {
    var say = function (text) {
      button.textContent = text;
      window.setTimeout(function () { button.textContent = "Copy"; }, 1600);
    };
    var select = function () {
      var range = document.createRange();
      range.selectNodeContents(command);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      try { say(document.execCommand("copy") ? "Copied" : "Press Ctrl+C"); } catch (e) { say("Press Ctrl+C"); }
    };
    button.hidden = false;
    button.addEventListener("click", function () {
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(command.textContent).then(function () { say("Copied"); }, select);
      } else {
        select();
      }
    });
  }
  /* Printed reports show what is folded on screen. */
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details:not([open])").forEach(function (el) {
      el.open = true;
      el.setAttribute("data-print-opened", "");
    });
  });
  window.addEventListener("afterprint", function () {
    document.querySelectorAll("details[data-print-opened]").forEach(function (el) {
      el.open = false;
      el.removeAttribute("data-print-opened");
    });
  });
})();
