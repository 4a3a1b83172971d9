// Sluice's dashboard: polls /dashboard/state.json and draws it. No
// framework and nothing from other hosts; the plot is SVG drawn here.
(function () {
  "use strict";
  var POLL_MS = 1000;
  var HISTORY = 120; // points kept for the plot, one per poll
  var history = [];

  function $(id) { return document.getElementById(id); }
  function num(v) {
    if (v === undefined || v === null) return "–";
    if (v >= 100 || v === Math.floor(v)) return Math.round(v).toLocaleString("en");
    return v.toFixed(1);
  }
  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }
  function dl(el, rows) {
    el.textContent = "";
    rows.forEach(function (r) {
      var dt = document.createElement("dt"); dt.textContent = r[0];
      var dd = document.createElement("dd"); dd.textContent = r[1];
      if (r[2]) dd.className = r[2];
      el.appendChild(dt); el.appendChild(dd);
    });
  }

  function drawRules(s) {
    var tbody = $("rules").tBodies[0];
    tbody.textContent = "";
    var over = 0;
    s.rules.forEach(function (r) {
      over += r.over_limit_per_second;
      var tr = document.createElement("tr");
      tr.dataset.key = r.key;
      if (r.over_limit > 0) tr.className = "over";
      cell(tr, r.domain, "domain");
      cell(tr, r.key.indexOf(r.domain + ".") === 0 ? r.key.slice(r.domain.length + 1) : r.key, "key");
      cell(tr, (r.limit || "–") + (r.shadow_mode ? " (shadow)" : ""));
      cell(tr, num(r.calls_per_second), "calls-rate");
      cell(tr, num(r.over_limit_per_second), "over-rate over");
      cell(tr, num(r.near_limit_per_second));
      cell(tr, num(r.shadow_mode_per_second));
      var p = cell(tr, "", "pressure");
      var bar = document.createElement("span");
      bar.className = "bar";
      bar.style.width = Math.round(r.pressure * 50) + "px";
      p.appendChild(bar);
      p.appendChild(document.createTextNode(Math.round(r.pressure * 100) + "%"));
      cell(tr, num(r.over_limit), "over-total over");
      cell(tr, num(r.total_hits), "total");
      tbody.appendChild(tr);
    });
    $("rules-omitted").textContent = s.rules_omitted ? s.rules_omitted + " less pressed rules not shown" : "";
    var unknown = Object.keys(s.unknown_domains || {});
    $("unknown").textContent = unknown.length ? "Calls for domains no configuration defines: " +
      unknown.map(function (d) { return d + " (" + s.unknown_domains[d] + ")"; }).join(", ") : "";
    return over;
  }

  function drawStore(s) {
    if (!s.store) { dl($("store"), [["store", "none in this process"]]); return; }
    var st = s.store;
    dl($("store"), [
      ["kind", st.kind],
      ["health", st.healthy ? "answering" : "failing" + (st.error ? ": " + st.error : ""), st.healthy ? "good" : "bad"],
      ["ping", st.ping_ms.toFixed(2) + " ms"],
      ["calls failed by it", num(s.store_errors_per_second) + "/s (" + num(s.store_errors) + " in total)", s.store_errors_per_second > 0 ? "bad" : ""],
      ["on store error", st.on_store_error]
    ]);
  }

  function drawConfig(s) {
    if (!s.config) { dl($("config"), [["config", "none in this process"]]); return; }
    var c = s.config;
    var rows = [["source", c.source || "–"], ["from", c.location || "–"], ["domains", s.domains.join(", ") || "none"],
      ["rules", String(c.rules)], ["hash", c.hash || "–"]];
    if (c.last_reload && c.last_reload.indexOf("0001-") !== 0) {
      rows.push(["last load", new Date(c.last_reload).toLocaleString() + (c.last_reload_ok ? " — ok" : " — failed"), c.last_reload_ok ? "good" : "bad"]);
    }
    if (c.last_error) rows.push(["error", c.last_error, "bad"]);
    rows.push(["loads", c.loads + " (" + c.failures + " failed)"]);
    dl($("config"), rows);
  }

  function drawHot(s) {
    var tbody = $("hot").tBodies[0];
    tbody.textContent = "";
    if (!s.hot_keys || !s.hot_keys.length) {
      var tr = document.createElement("tr");
      var td = cell(tr, "no calls in the last minute", "muted");
      td.colSpan = 5;
      tbody.appendChild(tr);
      return;
    }
    var max = s.hot_keys[0].hits || 1;
    s.hot_keys.forEach(function (k) {
      var tr = document.createElement("tr");
      var sp = k.key.indexOf(" ");
      cell(tr, sp < 0 ? k.key : k.key.slice(0, sp));
      cell(tr, sp < 0 ? "" : k.key.slice(sp + 1), "key");
      var b = cell(tr, "");
      var bar = document.createElement("span");
      bar.className = "bar hits";
      bar.style.width = Math.round(k.hits / max * 80) + "px";
      b.appendChild(bar);
      cell(tr, num(k.hits));
      cell(tr, num(k.over_limit), "over");
      if (k.over_limit > 0) tr.className = "over";
      tbody.appendChild(tr);
    });
  }

  function drawKV(s) {
    var tbody = $("kv").tBodies[0];
    tbody.textContent = "";
    if (!s.kv.length) {
      var tr = document.createElement("tr");
      var td = cell(tr, "no key-value decisions yet", "muted");
      td.colSpan = 4;
      tbody.appendChild(tr);
    }
    s.kv.forEach(function (k) {
      var tr = document.createElement("tr");
      cell(tr, k.limit); cell(tr, num(k.allowed)); cell(tr, num(k.denied), "over"); cell(tr, num(k.error));
      if (k.denied > 0) tr.className = "over";
      tbody.appendChild(tr);
    });
  }

  function drawHistory() {
    var svg = $("history"), W = 600, H = 80;
    var max = 1;
    history.forEach(function (p) { max = Math.max(max, p.calls, p.over); });
    function line(field, color) {
      var pts = history.map(function (p, i) {
        var x = W - (history.length - 1 - i) * (W / (HISTORY - 1));
        var y = H - 2 - (p[field] / max) * (H - 14);
        return x.toFixed(1) + "," + y.toFixed(1);
      });
      return '<polyline fill="none" stroke="' + color + '" stroke-width="2" vector-effect="non-scaling-stroke" points="' + pts.join(" ") + '"/>';
    }
    svg.innerHTML = '<text x="4" y="11" font-size="10" fill="#6b7280">' + num(max) + '/s</text>' +
      line("calls", "#2563eb") + line("over", "#c0392b");
  }

  function drawAdaptive(s) {
    var a = s.adaptive;
    $("adaptive").hidden = !a;
    if (!a) return;
    $("adaptive-window").textContent = "(counts and rates per " + num(a.window_seconds) + " s window)";
    var curves = $("curves");
    curves.textContent = "";
    a.curves.forEach(function (c) {
      var keys = a.keys.filter(function (k) { return k.rule === c.rule; });
      var W = 400, H = 180, L = 40, B = 20;
      var maxX = 1, maxY = 1;
      c.points.forEach(function (p) { maxX = Math.max(maxX, p[0]); maxY = Math.max(maxY, p[1]); });
      keys.forEach(function (k) { maxX = Math.max(maxX, k.avg_ms); maxY = Math.max(maxY, k.calls); });
      function x(v) { return L + v / maxX * (W - L - 6); }
      function y(v) { return H - B - v / maxY * (H - B - 8); }
      var svg = '<line x1="' + L + '" y1="' + (H - B) + '" x2="' + W + '" y2="' + (H - B) + '" stroke="#9ca3af"/>' +
        '<line x1="' + L + '" y1="4" x2="' + L + '" y2="' + (H - B) + '" stroke="#9ca3af"/>' +
        '<text x="2" y="12" font-size="10" fill="#6b7280">' + num(maxY) + '</text>' +
        '<text x="' + (W - 4) + '" y="' + (H - 4) + '" font-size="10" fill="#6b7280" text-anchor="end">' + num(maxX) + ' ms</text>' +
        '<polyline fill="none" stroke="#c0392b" stroke-width="2" points="' +
        c.points.map(function (p) { return x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1); }).join(" ") + '"/>';
      keys.forEach(function (k) {
        svg += '<circle cx="' + x(k.avg_ms).toFixed(1) + '" cy="' + y(k.calls).toFixed(1) + '" r="4" fill="#2563eb"><title></title></circle>';
      });
      var card = document.createElement("div");
      card.className = "card";
      var label = document.createElement("div");
      label.className = "label";
      label.textContent = c.rule + " rule: allowed rate against mean latency (red), each URL's calls at its latency (blue); " + c.denied + " answered 429";
      card.appendChild(label);
      var el = document.createElement("div");
      el.innerHTML = '<svg viewBox="0 0 ' + W + ' ' + H + '" role="img">' + svg + '</svg>';
      // Name each dot in its tooltip, as text, not markup.
      Array.prototype.forEach.call(el.querySelectorAll("circle title"), function (t, i) {
        t.textContent = keys[i].key + ": " + keys[i].calls + " calls, " + keys[i].avg_ms.toFixed(1) + " ms";
      });
      card.appendChild(el);
      curves.appendChild(card);
    });
    var tbody = $("adaptive-keys").tBodies[0];
    tbody.textContent = "";
    a.keys.forEach(function (k) {
      var tr = document.createElement("tr");
      cell(tr, k.key, "key"); cell(tr, k.rule); cell(tr, num(k.calls)); cell(tr, k.avg_ms.toFixed(1));
      cell(tr, num(k.allowed_rate)); cell(tr, num(k.errors));
      if (k.calls >= k.allowed_rate) tr.className = "over";
      tbody.appendChild(tr);
    });
  }

  function drawListeners(s) {
    var l = s.listeners;
    $("listeners-section").hidden = !l || !(s.store || s.config);
    if (!l) return;
    var reasons = Object.keys(l.grpc_calls_refused || {}).sort();
    var refused = 0, byReason = [];
    reasons.forEach(function (r) {
      var n = l.grpc_calls_refused[r];
      refused += n;
      if (n > 0) byReason.push(r + " " + num(n));
    });
    function bad(n) { return n > 0 ? "bad" : ""; }
    dl($("listeners"), [
      ["gRPC connections", num(l.grpc_connections)],
      ["gRPC calls open", num(l.grpc_calls_open)],
      ["gRPC bytes of unfinished requests", num(l.grpc_pending_bytes)],
      ["gRPC calls refused", num(refused) + (byReason.length ? " (" + byReason.join(", ") + ")" : ""), bad(refused)],
      ["gRPC requests too late (reset)", num(l.grpc_late_requests), bad(l.grpc_late_requests)],
      ["gRPC connection errors", num(l.grpc_connection_errors), bad(l.grpc_connection_errors)],
      ["HTTP bodies refused (503)", num(l.http_bodies_refused), bad(l.http_bodies_refused)]
    ]);
  }

  function draw(s) {
    var rls = !!(s.store || s.config);
    Array.prototype.forEach.call(document.querySelectorAll(".rls"), function (el) { el.hidden = !rls; });
    drawAdaptive(s);
    var over = drawRules(s);
    $("calls-rate").textContent = num(s.requests_per_second);
    $("over-rate").textContent = num(over);
    $("requests").textContent = num(s.requests);
    drawHot(s); drawStore(s); drawConfig(s); drawKV(s); drawListeners(s);
    history.push({ calls: s.requests_per_second, over: over });
    if (history.length > HISTORY) history.shift();
    drawHistory();
    $("status").textContent = "updated " + new Date(s.now).toLocaleTimeString() +
      (s.window_seconds ? " · rates over the last " + s.window_seconds.toFixed(1) + " s" : "");
  }

  function poll() {
    fetch("/dashboard/state.json", { cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error(r.status + " " + r.statusText); return r.json(); })
      .then(draw)
      .catch(function (e) { $("status").textContent = "cannot read state.json: " + e.message; })
      .finally(function () { setTimeout(poll, POLL_MS); });
  }
  poll();
})();
