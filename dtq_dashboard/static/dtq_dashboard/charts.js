// dtq history charts: the server draws them (dtq_dashboard/charts.py); this swaps the page's
// #history section for a fresh one from its data-fragment-url when tasks move (live.js calls
// dtqCharts.moved for each task event), at most once every REDRAW_MS, and every IDLE_MS anyway.
// Open data tables stay open, and nothing is swapped while the keyboard focus is inside.
(function () {
  "use strict";
  var REDRAW_MS = 5000, IDLE_MS = 30000;
  var timer = null, busy = false;

  function section() { return document.getElementById("history"); }

  function redraw() {
    timer = null;
    var current = section();
    if (!current || busy || document.hidden) return;
    if (current.contains(document.activeElement)) { later(); return; }
    busy = true;
    fetch(current.dataset.fragmentUrl, { headers: { Accept: "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        var now = section();
        if (!html || !now || now.contains(document.activeElement)) return;
        var open = Array.prototype.map.call(now.querySelectorAll("details"), function (d) { return d.open; });
        var holder = document.createElement("template");
        holder.innerHTML = html.trim();
        var fresh = holder.content.firstElementChild;
        if (!fresh || fresh.id !== "history") return;
        fresh.querySelectorAll("details").forEach(function (d, i) { if (open[i]) d.open = true; });
        now.replaceWith(fresh);
        document.body.dataset.chartsDrawn = String(Number(document.body.dataset.chartsDrawn || 0) + 1);
      })
      .catch(function () { /* the next event or tick tries again */ })
      .then(function () { busy = false; });
  }

  function later() { if (!timer) timer = setTimeout(redraw, REDRAW_MS); }

  window.dtqCharts = { moved: later, redraw: redraw };
  setInterval(later, IDLE_MS);
})();
