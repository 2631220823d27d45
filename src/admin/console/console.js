// aap-gateway admin console: reads the admin listener's JSON views with the admin token
// (kept in this tab's sessionStorage, sent as Authorization: Bearer) and renders them.
"use strict";
(function () {
  const KEY = "aap-admin-token";
  const $ = (id) => document.getElementById(id);
  let tenants = [];
  // Bumped by every load and every sign-out: an answer that arrives after a newer load
  // started, or after the user signed out, is dropped instead of re-showing the console.
  let epoch = 0;

  function token() { return sessionStorage.getItem(KEY) || ""; }

  function say(text, bad) {
    const m = $("message");
    m.textContent = text || "";
    m.className = bad ? "bad" : "";
  }

  async function api(method, path) {
    const r = await fetch(path, {method, headers: {"Authorization": "Bearer " + token()},
                                 cache: "no-store", credentials: "omit"});
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (r.status === 401 || r.status === 403) {
      sessionStorage.removeItem(KEY);
      showLogin();
      const why = body && body.message ? body.message : "refused";
      say("Refused (" + r.status + "): " + why, true);
      throw new Error("refused");
    }
    return {status: r.status, body: body || {}};
  }

  function cell(tr, value, cls) {
    const td = document.createElement("td");
    td.textContent = value === null || value === undefined ? "" : String(value);
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function fill(id, rows, render) {
    const tbody = $(id).querySelector("tbody");
    tbody.replaceChildren();
    for (const row of rows) {
      const tr = document.createElement("tr");
      render(tr, row);
      tbody.appendChild(tr);
    }
  }

  function showLogin() {
    epoch += 1;
    $("login").hidden = false;
    $("console").hidden = true;
    $("refresh").hidden = true;
    $("logout").hidden = true;
    document.body.dataset.state = "login";
  }

  function renderStatus(s) {
    const dl = $("status");
    dl.replaceChildren();
    const items = [
      ["Version", s.version + " (" + s.commit + ")"], ["PID", s.pid], ["Uptime (s)", s.uptime_secs],
      ["Config file", s.config_file], ["Config generation", s.config_generation],
      ["Tenants", s.tenants], ["Tenants not ready", (s.tenants_not_ready || []).join(", ") || "none"],
      ["Feeds", s.feeds], ["Clusters (not ready)", s.clusters + " (" + s.clusters_not_ready + ")"],
      ["Draining", s.draining], ["Log filter", s.log_filter]];
    for (const [k, v] of items) {
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); dd.textContent = v === null || v === undefined ? "" : String(v);
      dl.append(dt, dd);
    }
  }

  function renderTenants() {
    const q = $("tenant-search").value.trim().toLowerCase();
    const shown = tenants.filter((t) => !q || String(t.tenant).toLowerCase().includes(q));
    fill("tenants", shown, (tr, t) => {
      tr.dataset.tenant = t.tenant;
      cell(tr, t.tenant); cell(tr, t.path); cell(tr, t.requests); cell(tr, t.client_errors);
      cell(tr, t.server_errors, t.server_errors ? "bad" : ""); cell(tr, t.throttled); cell(tr, t.tool_calls);
      cell(tr, typeof t.mean_duration_ms === "number" ? t.mean_duration_ms.toFixed(1) : "");
    });
  }

  async function redrive(d, button) {
    button.disabled = true;
    const q = "tenant=" + encodeURIComponent(d.tenant) + "&lead_id=" + encodeURIComponent(d.lead_id);
    try {
      const r = await api("POST", "/admin/leads/redrive?" + q);
      if (r.status === 200) {
        say("Redriven: lead " + d.lead_id + " (" + r.body.deliveries + " deliveries queued)");
        document.body.dataset.redriven = d.lead_id;
      } else {
        say("Redrive refused (" + r.status + "): " + (r.body.reason || r.body.message || ""), true);
      }
    } catch (e) { /* shown by api() */ }
    await load();
  }

  async function load() {
    const mine = ++epoch;
    try {
      const [status, reloads, ts, feeds, leads, clusters] = await Promise.all([
        api("GET", "/admin/status"), api("GET", "/admin/reloads"), api("GET", "/admin/tenants"),
        api("GET", "/admin/feeds"), api("GET", "/admin/leads/dead-letters"), api("GET", "/admin/clusters")]);
      if (mine !== epoch) return;
      $("login").hidden = true;
      $("console").hidden = false;
      $("refresh").hidden = false;
      $("logout").hidden = false;
      renderStatus(status.body);
      fill("reloads", reloads.body.reloads || [], (tr, r) => {
        cell(tr, r.at); cell(tr, r.result, r.result === "reloaded" ? "ok" : "bad");
        cell(tr, r.config_generation); cell(tr, r.error);
      });
      tenants = ts.body.tenants || [];
      renderTenants();
      fill("feeds", feeds.body.feeds || [], (tr, f) => {
        cell(tr, f.source); cell(tr, f.state, f.state === "ok" ? "ok" : "bad"); cell(tr, f.rows);
        cell(tr, f.rejected); cell(tr, f.last_success); cell(tr, f.last_load); cell(tr, f.last_error); cell(tr, f.tenants);
      });
      fill("sinks", leads.body.sinks || [], (tr, q) => {
        tr.dataset.sink = q.tenant + "/" + q.sink;
        cell(tr, q.tenant); cell(tr, q.sink); cell(tr, q.pending);
        cell(tr, q.next_attempt_at || "-");
        cell(tr, q.oldest_pending_at); cell(tr, q.dead, q.dead ? "bad" : "ok");
      });
      const dead = leads.body.dead_letters || [];
      const bySink = {};
      for (const d of dead) { const k = d.tenant + " / " + d.sink; bySink[k] = (bySink[k] || 0) + 1; }
      $("outbox-summary").textContent = "Pending: " + (leads.body.pending || 0) + ". Dead letters: " + dead.length +
        (dead.length ? " (" + Object.entries(bySink).map(([k, n]) => k + ": " + n).join(", ") + ")" : "") + ".";
      fill("dead-letters", dead, (tr, d) => {
        tr.dataset.lead = d.lead_id;
        cell(tr, d.lead_id); cell(tr, d.tenant); cell(tr, d.sink); cell(tr, d.attempts);
        cell(tr, (d.last_error_class || "") + (d.last_error ? ": " + d.last_error : ""), "bad"); cell(tr, d.dead_at);
        const b = document.createElement("button");
        b.textContent = "Redrive";
        b.className = "redrive";
        b.addEventListener("click", () => redrive(d, b));
        cell(tr, "").appendChild(b);
      });
      fill("clusters", clusters.body.clusters || [], (tr, c) => {
        cell(tr, c.cluster); cell(tr, c.ready ? "yes" : "no", c.ready ? "ok" : "bad"); cell(tr, c.peers);
        cell(tr, c.peers_healthy); cell(tr, c.reason);
      });
      document.body.dataset.state = "loaded";
    } catch (e) {
      if (mine === epoch && String(e.message) !== "refused") say("Cannot read the admin listener: " + e, true);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    // A link may carry the token in its fragment (never sent to the server):
    // it moves to session storage and leaves the address bar at once.
    const m = /^#token=(.+)$/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname);
    }
    $("login").addEventListener("submit", (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(KEY, $("token").value.trim());
      $("token").value = "";
      say("");
      load();
    });
    $("logout").addEventListener("click", () => { sessionStorage.removeItem(KEY); showLogin(); say("Signed out."); });
    $("refresh").addEventListener("click", () => { say(""); load(); });
    $("tenant-search").addEventListener("input", renderTenants);
    $("reload").addEventListener("click", async () => {
      try {
        const r = await api("POST", "/reload");
        say(r.body.status === "reloaded" ? "Reloaded: generation " + r.body.config_generation
                                         : "Reload rejected: " + (r.body.error || ""), r.body.status !== "reloaded");
      } catch (e) { /* shown by api() */ }
      load();
    });
    if (token()) load(); else showLogin();
  });
})();
