// dtq live feed: one WebSocket to the page's data-events-path (/ws/events when the console is at
// the root). Dedups by event_id, updates counts and rows in place, reconnects with backoff and
// re-reads state over REST after every (re)connect.
(function () {
  "use strict";
  var script = document.getElementById("live-script");
  var stateUrl = script.dataset.stateUrl, taskUrl = script.dataset.taskUrl, queueUrl = script.dataset.queueUrl;
  var eventsPath = script.dataset.eventsPath || "/ws/events";  // under the console's prefix, from the page
  var onlyQueue = script.dataset.onlyQueue || null;
  var onlyTask = script.dataset.onlyTask || null;  // a task page: reloaded when its task moves
  // A workflow page: reloaded when one of its steps' tasks moves (its graph and progress are server-drawn).
  var watchTasks = script.dataset.watchTasks ? new Set(script.dataset.watchTasks.split(",")) : null;
  var reloadTimer = null;
  var feed = document.querySelector("#feed tbody");
  var label = document.getElementById("feed-state");
  var MAX_ROWS = 200, MAX_SEEN = 5000;
  var seen = new Set(), seenOrder = [];
  var socket = null, attempt = 0, refreshTimer = null;
  var stats = { received: 0, duplicates: 0, dropped: 0, reconnects: 0 };
  window.dtqFeed = stats;

  function setState(state, text) {
    document.body.dataset.feed = state;
    if (label) { label.dataset.state = state; label.textContent = text || state; }
  }

  function remember(id) {
    if (seen.has(id)) return false;
    seen.add(id); seenOrder.push(id);
    if (seenOrder.length > MAX_SEEN) seen.delete(seenOrder.shift());
    return true;
  }

  function cell(content) {
    var td = document.createElement("td");
    if (content instanceof Node) td.appendChild(content); else td.textContent = content == null ? "" : String(content);
    return td;
  }

  function link(href, text, mono) {
    var a = document.createElement("a");
    a.href = href;
    if (mono) { var c = document.createElement("code"); c.textContent = text; a.appendChild(c); } else a.textContent = text;
    return a;
  }

  function addFeedRow(ev) {
    if (!feed) return;
    var placeholder = feed.querySelector("tr.placeholder");
    if (placeholder) placeholder.remove();
    var tr = document.createElement("tr");
    tr.className = "flash";
    tr.dataset.event = ev.event_id;
    if (ev.task_id) tr.dataset.eventTask = ev.task_id;
    tr.appendChild(cell(window.dtq.timeElement(ev.ts)));
    tr.appendChild(cell(ev.type));
    tr.appendChild(cell(ev.task_id ? link(taskUrl + encodeURIComponent(ev.task_id) + "/", String(ev.task_id).slice(0, 12), true) : "—"));
    tr.appendChild(cell(ev.queue ? link(queueUrl + encodeURIComponent(ev.queue) + "/", ev.queue) : "—"));
    tr.appendChild(cell(ev.status ? window.dtq.badge(ev.status) : ""));
    window.dtq.labelCells(tr);  // each cell names its column: a phone shows rows as cards
    feed.insertBefore(tr, feed.firstChild);
    while (feed.rows.length > MAX_ROWS) feed.deleteRow(feed.rows.length - 1);
  }

  // Rows already on the page (queue, task, schedule pages) change status in place.
  function updateRows(ev) {
    if (!ev.task_id || !ev.status) return;
    document.querySelectorAll("[data-task]").forEach(function (row) {
      if (row.dataset.task !== ev.task_id) return;
      row.querySelectorAll("[data-f=status]").forEach(function (slot) {
        slot.replaceChildren(window.dtq.badge(ev.status));
      });
      if (typeof ev.attempt === "number" && ev.attempt >= 0) {
        row.querySelectorAll("[data-f=attempt]").forEach(function (slot) { slot.textContent = String(ev.attempt); });
      }
    });
  }

  // What changes with a task's status (actions, result, errors, timeline) and a queue's pause
  // (its buttons) is rendered by the server: reload rather than rebuild it here.
  function scheduleReload() {
    if (reloadTimer) return;
    reloadTimer = setTimeout(function () { location.reload(); }, 300);
  }

  function setText(el, value) {
    if (!el) return;
    var text = Number(value || 0).toLocaleString("en-US");
    if (el.textContent !== text) {
      el.textContent = text;
      el.classList.add("bump");
      setTimeout(function () { el.classList.remove("bump"); }, 600);
    }
  }

  // The overview's queue rows, workers table and leader line are rendered by the server. When
  // what they list changes (a queue appears, a worker comes, goes or is lost, the leader moves),
  // say so with a reload link: reloading by itself would wipe the live feed being watched.
  function shapeChanged(totals, data) {
    if (totals.dataset.queues === undefined) return false;
    var queues = data.queues.map(function (q) { return q.name; }).sort().map(function (n) { return n + ","; }).join("");
    var workers = data.workers.map(function (w) { return [w.id, w.alive ? "1" : "0"]; })
      .sort(function (a, b) { return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0; })
      .map(function (w) { return w[0] + ":" + w[1] + ","; }).join("");
    var leader = (data.leader || "") + ":" + (data.leader_beating ? "1" : "0");
    return queues !== totals.dataset.queues || workers !== totals.dataset.workers || leader !== totals.dataset.leader;
  }

  function applyState(data) {
    var totals = document.getElementById("totals");
    if (totals) {
      delete totals.dataset.stale;
      totals.removeAttribute("title");
      var notice = document.getElementById("shape-changed");
      if (notice) notice.hidden = !shapeChanged(totals, data);
      setText(totals.querySelector("[data-total=waiting]"), data.totals.waiting);
      setText(totals.querySelector("[data-total=pending]"), data.totals.pending);
      setText(totals.querySelector("[data-total=scheduled]"), data.scheduled_total);
      setText(totals.querySelector("[data-total=dlq]"), data.dlq_total);
      setText(totals.querySelector("[data-total=throughput]"), data.totals.finished_last_minute);
      setText(totals.querySelector("[data-total=workers]"), data.workers_alive);
    }
    // Worker rows (overview, /workers/): heartbeat age and counts move without a reload.
    (data.workers || []).forEach(function (w) {
      document.querySelectorAll("[data-worker]").forEach(function (row) {
        if (row.dataset.worker !== w.id) return;
        var beat = row.querySelector("[data-f=heartbeat]");
        if (beat) { beat.textContent = ageText(w.heartbeat_age_s) + " ago"; beat.title = w.heartbeat_at || ""; }
        setText(row.querySelector("[data-f=in_flight]"), w.in_flight);
        setText(row.querySelector("[data-f=processed]"), w.processed);
        // State: an operator's quiet or stop, a drain or a lost worker shows as it happens.
        var badge = row.querySelector("[data-f=state] .badge");
        if (badge) {
          badge.textContent = w.alive ? w.state : "lost";
          badge.className = "badge " + (!w.alive ? "st-failed" : w.state === "running" ? "st-succeeded" : "st-paused");
        }
        row.classList.toggle("stale", !w.alive);
      });
    });
    data.queues.forEach(function (q) {
      if (onlyQueue && q.name !== onlyQueue) return;
      document.querySelectorAll("[data-queue]").forEach(function (row) {
        if (row.dataset.queue !== q.name) return;
        var values = { high: q.depth.high, normal: q.depth.normal, low: q.depth.low, pending: q.pending,
                       retry_scheduled: q.retry_scheduled, dlq: q.dlq, finished_last_minute: q.finished_last_minute };
        Object.keys(values).forEach(function (key) {
          var slot = row.querySelector("[data-f=" + key + "]");
          if (!slot) return;
          var target = slot.querySelector("a") || slot;
          setText(target, values[key]);
        });
        var shown = row.dataset.paused;
        if (shown !== undefined && shown !== (q.paused ? "1" : "0")) scheduleReload();
        var paused = row.querySelector("[data-f=paused]");
        if (paused) {
          var b = document.createElement("span");
          b.className = "badge " + (q.paused ? "st-paused" : "st-active");
          b.textContent = q.paused ? "PAUSED" : "active";
          paused.replaceChildren(b);
        }
      });
    });
  }

  // As the server's `seconds` filter writes a heartbeat age: "1.2s", then minutes and hours.
  function ageText(s) {
    s = Number(s || 0);
    if (s < 60) return s.toFixed(1) + "s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    return Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
  }

  // Figures that could not be refreshed (Redis or the server down) are marked stale, not left
  // looking current.
  function markStale(why) {
    var totals = document.getElementById("totals");
    if (totals) { totals.dataset.stale = "1"; totals.title = "Not current: " + why; }
  }

  function refreshState() {
    return fetch(stateUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) markStale("the server answered " + r.status); return r.ok ? r.json() : null; })
      .then(function (data) { if (data) applyState(data); })
      .catch(function () { markStale("the server did not answer"); });
  }

  // Counts follow events, but at most one REST read per second however busy the feed is.
  // A running task's progress (ctx.progress): its bar and text on the page, moved in place.
  function showProgress(ev) {
    var p = ev.progress || {};
    document.querySelectorAll("[data-progress-task]").forEach(function (el) {
      if (el.dataset.progressTask !== ev.task_id) return;
      var bar = el.querySelector("progress"), text = el.querySelector("[data-progress-text]");
      if (bar && p.total) { bar.max = p.total; bar.value = Math.min(p.done, p.total); }
      else if (bar) bar.removeAttribute("value");  // no total: an indeterminate bar
      if (text) text.textContent = String(p.done) + (p.total ? " of " + p.total : "") + (p.message ? " · " + p.message : "");
    });
  }

  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(function () { refreshTimer = null; refreshState(); }, 1000);
  }

  function onMessage(raw) {
    var ev;
    try { ev = JSON.parse(raw); } catch (e) { return; }
    if (typeof ev.type === "string" && ev.type.indexOf("feed.") === 0) {
      if (ev.type === "feed.dropped") { stats.dropped += ev.count || 0; scheduleRefresh(); }
      if (ev.type === "feed.resync") refreshState();
      if (ev.type === "feed.status") { setState("reconnecting", "redis reconnecting…"); markStale("Redis is unreachable"); }
      return;
    }
    if (!ev.event_id || !remember(ev.event_id)) { stats.duplicates += 1; return; }
    if (ev.type === "task.progress") { stats.received += 1; showProgress(ev); return; }  // no row, no reload
    stats.received += 1;
    if (document.body.dataset.feed !== "live") setState("live", "live");
    if (!onlyQueue || ev.queue === onlyQueue) addFeedRow(ev);
    updateRows(ev);
    if (onlyTask && ev.task_id === onlyTask) scheduleReload();
    if (watchTasks && watchTasks.has(ev.task_id)) scheduleReload();
    if (window.dtqCharts) window.dtqCharts.moved(ev);  // charts.js: redraw the history, debounced
    scheduleRefresh();
  }

  function connect() {
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + eventsPath;
    socket = new WebSocket(url);
    socket.onopen = function () {
      if (attempt > 0) stats.reconnects += 1;
      if (attempt > 0 && onlyTask) scheduleReload();  // its events while we were away are gone
      attempt = 0;
      setState("live", "live");
      refreshState();  // events published while we were away are gone: re-derive state
    };
    socket.onmessage = function (m) { onMessage(m.data); };
    socket.onclose = function (e) {
      if (e.code === 4403) { setState("closed", "log in to see live events"); return; }
      attempt += 1;
      var delay = Math.min(15000, 500 * Math.pow(2, attempt - 1)) * (0.5 + Math.random() / 2);
      setState("reconnecting", "reconnecting…");
      setTimeout(connect, delay);
    };
  }

  if ("WebSocket" in window) { setState("connecting", "connecting…"); connect(); }
  // Events drive refreshes; this catches what publishes none (a worker dying on an idle cluster).
  if (document.getElementById("totals") || document.querySelector("[data-worker]")) setInterval(refreshState, 5000);
})();
