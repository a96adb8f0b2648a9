// dtq console: behaviour shared by every page. Everything here only adds to plain HTML forms.
(function () {
  "use strict";

  function relative(seconds) {
    var ahead = seconds < 0, s = Math.abs(seconds), text;
    if (s < 5) return "just now";
    if (s < 60) text = Math.floor(s) + "s";
    else if (s < 3600) text = Math.floor(s / 60) + " min";
    else if (s < 36000) text = Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    else if (s < 86400) text = Math.floor(s / 3600) + " h";
    else text = Math.floor(s / 86400) + " d";
    return ahead ? "in " + text : text + " ago";
  }

  function exact(date) {
    return date.toISOString().replace("T", " ").replace("Z", " UTC");
  }

  // Render a <time> element for an ISO timestamp (used by the live feed too).
  function timeElement(iso) {
    var el = document.createElement("time");
    var date = new Date(iso);
    el.className = "rel";
    el.dateTime = iso;
    if (!isNaN(date)) {
      el.title = exact(date);
      el.textContent = relative((Date.now() - date.getTime()) / 1000);
    } else {
      el.textContent = String(iso || "—");
    }
    return el;
  }

  function refreshTimes() {
    document.querySelectorAll("time.rel[datetime]").forEach(function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (!isNaN(date)) el.textContent = relative((Date.now() - date.getTime()) / 1000);
    });
  }

  function badge(status) {
    var span = document.createElement("span");
    var name = String(status || "UNKNOWN");
    span.className = "badge st-" + (/^[A-Z_]+$/.test(name) ? name.toLowerCase().replace(/_/g, "-") : "unknown");
    span.dataset.status = name;
    span.textContent = name;
    return span;
  }

  // Ask before destructive submits (the server still refuses what the user may not do).
  document.addEventListener("submit", function (event) {
    var form = event.target, submitter = event.submitter;
    var message = (submitter && submitter.dataset.confirm) || form.dataset.confirm;
    if (message && !window.confirm(message)) event.preventDefault();
  });

  function wireSelection() {
    var all = document.querySelector("[data-select-all]");
    var boxes = Array.prototype.slice.call(document.querySelectorAll("input[type=checkbox][name=ids]"));
    var buttons = document.querySelectorAll("[data-needs-selection]");
    var counter = document.querySelector("[data-selection-count]");
    if (!boxes.length) {
      buttons.forEach(function (b) { b.disabled = true; });
      return;
    }
    function update() {
      var n = boxes.filter(function (b) { return b.checked; }).length;
      buttons.forEach(function (b) { b.disabled = n === 0; });
      if (counter) counter.textContent = n ? n + " selected" : "Select rows to act on them";
      if (all) all.checked = n === boxes.length;
    }
    boxes.forEach(function (b) { b.addEventListener("change", update); });
    if (all) all.addEventListener("change", function () {
      boxes.forEach(function (b) { b.checked = all.checked; });
      update();
    });
    update();
  }

  // On a phone a table is a list of cards and each cell shows its column's name from its
  // data-label (console.css). Templates write them; this fills in any a row lacks (rows added by
  // script, tables without them) from the table's header.
  function labelCells(row) {
    var table = row.closest("table.data");
    var heads = table ? table.querySelectorAll("thead th") : [];
    Array.prototype.forEach.call(row.cells, function (td, i) {
      if (td.hasAttribute("data-label") || td.colSpan > 1 || !heads[i]) return;
      td.setAttribute("data-label", heads[i].textContent.trim());
    });
  }

  window.dtq = { relative: relative, timeElement: timeElement, badge: badge, labelCells: labelCells };
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("table.data tbody tr").forEach(labelCells);
    wireSelection();
    setInterval(refreshTimes, 15000);
  });
})();
