// driftwatch's web view: the fleet's open drift episodes and an Application's story.
// Everything shown comes from the operations API (/ui/api/*, behind the operations
// token) and is written with textContent: names, annotations and messages are the
// cluster's, so never markup.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const PAGE = 50;
  window.addEventListener("error", (e) => { $("errors").textContent += String(e.message) + "\n"; });
  window.addEventListener("unhandledrejection", (e) => { $("errors").textContent += String(e.reason) + "\n"; });

  // The view's state lives in the URL fragment (never sent to the server).
  function readHash() {
    const p = new URLSearchParams(location.hash.replace(/^#/, ""));
    const token = p.get("token");
    if (token !== null) {
      sessionStorage.setItem("driftwatch-token", token);
      p.delete("token");
      history.replaceState(null, "", "#" + p.toString());
    }
    return p;
  }
  function setHash(changes) {
    const p = readHash();
    for (const [k, v] of Object.entries(changes)) {
      if (v === "" || v === null || v === undefined) p.delete(k); else p.set(k, v);
    }
    location.hash = p.toString();
  }

  // "2026-12-04T14:09:55.820838664Z" as "2026-12-04 14:09:55Z".
  const when = (t) => String(t || "").replace("T", " ").replace(/\.\d+Z$/, "Z");

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  async function api(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
    const headers = {};
    const token = sessionStorage.getItem("driftwatch-token");
    if (token) headers["Authorization"] = "Bearer " + token;
    const r = await fetch(path + "?" + q.toString(), { headers });
    if (r.status === 401) {
      $("login").hidden = false;
      throw new Error("the operations token is required");
    }
    if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
    return r.json();
  }

  function argocdLink(base, namespace, name) {
    if (!/^https?:\/\//.test(base || "")) return null;
    return base.replace(/\/+$/, "") + "/applications/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(name);
  }

  // A datetime-local value (read as UTC) as RFC 3339, and back.
  const toRfc3339 = (v) => (v ? v + (v.length === 16 ? ":00" : "") + "Z" : "");
  const toLocalInput = (t) => (/^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(t || "") ? t.slice(0, 16) : "");
  const PRESETS = ["", "1h", "24h", "7d", "30d"];
  const SEVERITIES = ["critical", "error", "warning", "info"];

  // The time range of the filters: `since` (a preset or an instant) and `until`.
  function showRange(p) {
    const since = p.get("since") || "";
    $("f-since").value = PRESETS.includes(since) ? since : "";
    $("f-from").value = PRESETS.includes(since) ? "" : toLocalInput(since);
    $("f-to").value = toLocalInput(p.get("until") || "");
  }

  // One link that sets a filter (and goes back to the first page).
  function filterLink(text, changes, cls) {
    const a = el("a", text, cls);
    const p = readHash();
    for (const [k, v] of Object.entries(changes)) p.set(k, v);
    p.delete("offset");
    p.delete("app");
    a.href = "#" + p.toString();
    return a;
  }

  // A breakdown row: its first cell, then the total and one count per severity.
  function countsRow(first, counts) {
    const tr = el("tr");
    tr.appendChild(first);
    tr.appendChild(el("td", counts.total));
    for (const sev of SEVERITIES) tr.appendChild(el("td", counts[sev], counts[sev] ? "sev sev-" + sev : "zero"));
    return tr;
  }

  function fillBreakdown(id, key, data) {
    const body = $(id).tBodies[0];
    body.textContent = "";
    const rows = (data && data.rows) || [];
    for (const r of rows) {
      const name = el("td");
      name.appendChild(filterLink(r.name || "(none)", { [key]: r.name }));
      body.appendChild(countsRow(name, r));
    }
    if (data && data.others) body.appendChild(countsRow(el("td", data.others + " more", "empty"), data.othersCounts || {}));
    $(id).hidden = !rows.length;
  }

  function fillSelect(id, counts, chosen) {
    const s = $(id);
    while (s.options.length > 1) s.remove(1);
    const names = Object.keys(counts || {}).sort();
    if (chosen && !names.includes(chosen)) names.push(chosen);
    for (const n of names) {
      const o = el("option", n + (counts && counts[n] !== undefined ? " (" + counts[n] + ")" : ""));
      o.value = n;
      s.appendChild(o);
    }
    s.value = chosen || "";
  }

  async function showFleet(p) {
    $("story").hidden = true;
    $("fleet-filters").hidden = false;
    const offset = Number(p.get("offset") || 0);
    const data = await api("/ui/api/fleet", {
      severity: p.get("severity"), class: p.get("class"), project: p.get("project"), cluster: p.get("cluster"),
      since: p.get("since"), until: p.get("until"), limit: String(PAGE), offset: String(offset),
    });
    fillSelect("f-severity", data.counts.severity, p.get("severity"));
    fillSelect("f-class", data.counts.class, p.get("class"));
    fillSelect("f-project", data.counts.project, p.get("project"));
    fillSelect("f-cluster", data.counts.cluster, p.get("cluster"));
    showRange(p);
    const counts = $("counts");
    counts.textContent = "";
    counts.appendChild(el("span", data.total + " open episode(s)", "total"));
    for (const sev of SEVERITIES) {
      const n = (data.counts.severity || {})[sev];
      if (n) counts.appendChild(filterLink(sev + " " + n, { severity: sev }, "sev sev-" + sev));
    }
    fillBreakdown("by-project", "project", data.byProject);
    fillBreakdown("by-cluster", "cluster", data.byCluster);
    const body = $("episodes").tBodies[0];
    body.textContent = "";
    for (const ep of data.episodes) {
      const tr = el("tr");
      tr.appendChild(el("td", when(ep.openedAt)));
      tr.appendChild(el("td", ep.duration));
      const name = el("td");
      // A Flux or Fleet unit is named and looked up by its kind too.
      const unit = (ep.unitKind ? ep.unitKind + ":" : "") + ep.namespace + "/" + ep.name;
      const a = el("a", unit);
      a.href = "#app=" + encodeURIComponent(unit);
      name.appendChild(a);
      if (ep.breakGlass) name.appendChild(el("span", "break-glass " + ep.breakGlass, "tag"));
      tr.appendChild(name);
      tr.appendChild(el("td", ep.severity, "sev sev-" + ep.severity));
      tr.appendChild(el("td", (ep.classes || []).join(", ")));
      tr.appendChild(el("td", ep.project));
      tr.appendChild(el("td", ep.cluster));
      tr.appendChild(el("td", ep.who));
      body.appendChild(tr);
    }
    if (!data.episodes.length) {
      const tr = el("tr");
      const td = el("td", "nothing drifted", "empty");
      td.colSpan = 8;
      tr.appendChild(td);
      body.appendChild(tr);
    }
    $("page").textContent = data.total ? (offset + 1) + "–" + (offset + data.episodes.length) + " of " + data.total : "";
    $("prev").disabled = offset === 0;
    $("next").disabled = offset + data.episodes.length >= data.total;
    $("fleet").hidden = false;
    $("where").textContent = "the fleet, oldest first";
  }

  async function showApp(p) {
    const app = p.get("app");
    $("fleet").hidden = true;
    // Only the time range applies to one Application's story.
    $("fleet-filters").hidden = true;
    showRange(p);
    const data = await api("/ui/api/app", { app, since: p.get("since"), until: p.get("until") });
    $("story-title").textContent = app;
    $("where").textContent = "a unit's story";
    const [ns, name] = app.includes("/") ? app.split("/", 2) : ["argocd", app];
    // A Flux or Fleet unit (`Kind:namespace/name`) has no page in Argo CD.
    const link = ns.includes(":") ? null : argocdLink(data.argocdUrl, ns, name);
    const a = $("argocd-link");
    a.hidden = !link;
    if (link) a.href = link;
    const steps = $("steps");
    steps.textContent = "";
    for (const s of data.steps) {
      const li = el("li", null, "step step-" + s.event.replace(/[^a-z-]/g, ""));
      li.appendChild(el("time", when(s.time)));
      li.appendChild(el("span", s.event, "event"));
      if (s.revision) li.appendChild(el("code", s.revision.slice(0, 7)));
      if (s.by) li.appendChild(el("span", "by " + s.by, "by"));
      if (s.detail) li.appendChild(el("span", s.detail, "detail"));
      steps.appendChild(li);
    }
    if (!data.steps.length) steps.appendChild(el("li", "no history", "empty"));
    const eps = $("story-episodes");
    eps.textContent = "";
    for (const ep of data.episodes) {
      const d = el("details", null, "episode");
      // Open, or the worst it gets: unfolded; the rest one line each.
      d.open = !!ep.open || ep.severity === "critical";
      d.appendChild(el("summary", when(ep.openedAt) + "  " + ep.severity + "  " + (ep.classes || []).join(", ") + "  " +
        (ep.open ? "open" : (ep.resolution || "resolved") + " after " + ep.duration)));
      const ul = el("ul");
      for (const r of ep.resources || []) {
        const li = el("li", r.kind + " " + r.namespace + "/" + r.name + " (" + r.class + ")");
        for (const c of r.changes || []) {
          li.appendChild(el("div", c.path + ": " + c.desired + " → " + c.live + (c.user || c.manager ? " by " + (c.user || c.manager) : ""), "change"));
        }
        ul.appendChild(li);
      }
      for (const n of ep.notifications || []) {
        const to = n.trigger + " to " + n.service + (n.recipient ? ":" + n.recipient : "") + " (" + n.action + ") at " + n.at;
        ul.appendChild(n.failed ? el("li", "failed " + to + ": " + n.failed, "failed") : el("li", "sent " + to, "sent"));
      }
      if (ep.breakGlass) ul.appendChild(el("li", "under break-glass " + ep.breakGlass.ticket + ", approved by " + ep.breakGlass.approvedBy, "tag"));
      d.appendChild(ul);
      eps.appendChild(d);
    }
    $("story").hidden = false;
  }

  async function render() {
    const p = readHash();
    $("status").textContent = "loading…";
    try {
      if (p.get("app")) await showApp(p); else await showFleet(p);
      $("status").textContent = "";
    } catch (e) {
      $("status").textContent = String(e.message || e);
    }
  }

  for (const [id, key] of [["f-severity", "severity"], ["f-class", "class"], ["f-project", "project"], ["f-cluster", "cluster"], ["f-since", "since"]]) {
    $(id).addEventListener("change", (e) => setHash({ [key]: e.target.value, offset: "" }));
  }
  $("f-from").addEventListener("change", (e) => setHash({ since: toRfc3339(e.target.value), offset: "" }));
  $("f-to").addEventListener("change", (e) => setHash({ until: toRfc3339(e.target.value), offset: "" }));
  $("prev").addEventListener("click", () => { const p = readHash(); setHash({ offset: String(Math.max(0, Number(p.get("offset") || 0) - PAGE)) }); });
  $("next").addEventListener("click", () => { const p = readHash(); setHash({ offset: String(Number(p.get("offset") || 0) + PAGE) }); });
  $("home").addEventListener("click", (e) => { e.preventDefault(); setHash({ app: "", offset: "" }); });
  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("driftwatch-token", $("token").value);
    $("login").hidden = true;
    render();
  });
  window.addEventListener("hashchange", render);
  render();
})();
