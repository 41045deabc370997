// The page of `octopus dashboard`: polls api/view and draws it. Everything is built with DOM
// calls and textContent, never innerHTML, because object names and condition messages come
// from the clusters.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const POLL_MS = 2000;
const HUB = { x: 400, y: 58 }, HUB_GW = { x: 400, y: 128 };
const CENTER = { x: 400, y: 250 }, RX = 290, RY = 210, BOX = { w: 160, h: 64 };

let selected = null;
let last = null;
let updates = 0;

function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

function fmtRTT(t) {
  return t.rttMillis > 0 ? t.rttMillis.toFixed(t.rttMillis < 10 ? 2 : 1) + " ms" : "–";
}

// layout places the hub at the top and the clusters on the lower half of an ellipse below
// it, from left to right, so that no cluster comes near the hub; each gateway sits between
// its cluster and the ellipse's centre.
function layout(clusters) {
  const pos = {};
  const n = clusters.length;
  clusters.forEach((c, i) => {
    const a = n === 1 ? Math.PI / 2 : Math.PI - (Math.PI * i) / (n - 1);
    const x = CENTER.x + RX * Math.cos(a), y = CENTER.y + RY * Math.sin(a);
    const k = n === 1 ? 0 : 0.46;
    pos[c.id] = { x, y, gw: { x: x + (CENTER.x - x) * k, y: y + (CENTER.y - y) * k + (n === 1 ? -70 : 0) } };
  });
  return pos;
}

function drawGraph(v) {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  const pos = layout(v.clusters);
  const gwPos = id => (id === "hub" && v.hub.gateway ? HUB_GW : pos[id] && pos[id].gw);
  const layers = { control: el("g"), tunnels: el("g"), labels: el("g"), nodes: el("g") };
  Object.values(layers).forEach(l => svg.append(l));

  // The hub and the control plane: every cluster's agent talks to it.
  const hub = el("g", { class: "hub" + (v.hub.error ? " down" : ""), "data-hub": v.hub.error ? "down" : "up" });
  hub.append(el("rect", { x: HUB.x - 80, y: HUB.y - 22, width: 160, height: 44, rx: 8 }));
  hub.append(el("text", { x: HUB.x, y: HUB.y - 3, "text-anchor": "middle" }, "hub"));
  hub.append(el("text", { x: HUB.x, y: HUB.y + 13, "text-anchor": "middle", class: "small", style: "fill:#c9cfdb" },
    v.hub.error ? "unreachable" : "namespace " + v.hub.namespace));
  hub.append(el("title", {}, v.hub.error || "the hub: clusters register and publish here"));
  layers.nodes.append(hub);
  for (const c of v.clusters) {
    const p = pos[c.id];
    layers.control.append(el("line", { class: "control", x1: HUB.x, y1: HUB.y + 22, x2: p.x, y2: p.y - BOX.h / 2 }));
  }
  if (v.hub.gateway) {
    layers.nodes.append(gatewayNode("hub", v.hub.gateway, HUB_GW));
    layers.control.append(el("line", { class: "link", x1: HUB.x, y1: HUB.y + 22, x2: HUB_GW.x, y2: HUB_GW.y }));
  }

  // Tunnels: each reported direction is drawn from its reporter's gateway to the midpoint
  // of the pair, so the two halves show the two sides' views. A tunnel relayed by the hub's
  // gateway is drawn on the reporter's half of its link to the relay.
  const reported = new Set(v.tunnels.map(t => t.from + ">" + (t.via || t.to)));
  const drawHalf = (from, to, t) => {
    const a = gwPos(from), b = t && t.via ? gwPos(t.via) : gwPos(to);
    if (!a || !b) return;
    const m = { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 };
    const state = t ? t.state : "none";
    const line = el("line", { class: "tunnel " + state, x1: a.x, y1: a.y, x2: m.x, y2: m.y,
      "data-from": from, "data-to": to, "data-state": state });
    line.append(el("title", {}, t ? `${from} → ${to}: ${t.state}${t.message ? " (" + t.message + ")" : ""}` : `${from} reports no tunnel to ${to}`));
    layers.tunnels.append(line);
    if (t) {
      const lx = a.x + (m.x - a.x) * 0.55, ly = a.y + (m.y - a.y) * 0.55;
      const label = el("text", { class: "tunnel-label", x: lx, y: ly + 19, "text-anchor": "middle" },
        `${fmtRTT(t)} · ${t.lossPercent}% loss`);
      layers.labels.append(label);
    }
  };
  // First the silent side of a pair that only one gateway reports, then the reports.
  for (const t of v.tunnels) {
    if (!t.via && !reported.has(t.to + ">" + t.from) && gwPos(t.to)) drawHalf(t.to, t.from, null);
  }
  for (const t of v.tunnels) drawHalf(t.from, t.to, t);

  // Clusters and their gateways.
  for (const c of v.clusters) {
    const p = pos[c.id];
    const exports = v.services.filter(s => s.exporters.includes(c.id)).length;
    const imports = v.services.filter(s => s.importers.includes(c.id)).length;
    const g = el("g", { class: "cluster " + c.heartbeat.toLowerCase().replace(/\s+/g, "-") + (selected === c.id ? " selected" : ""),
      "data-cluster": c.id, "data-heartbeat": c.heartbeat, tabindex: 0 });
    g.append(el("rect", { x: p.x - BOX.w / 2, y: p.y - BOX.h / 2, width: BOX.w, height: BOX.h, rx: 8 }));
    g.append(el("text", { x: p.x, y: p.y - 10, "text-anchor": "middle", "font-weight": "600" }, c.id));
    g.append(el("text", { x: p.x, y: p.y + 8, "text-anchor": "middle", class: "small" }, "heartbeat " + c.heartbeat));
    g.append(el("text", { x: p.x, y: p.y + 23, "text-anchor": "middle", class: "small" }, `exports ${exports} · imports ${imports}`));
    g.append(el("title", {}, c.error ? c.id + ": " + c.error : "show " + c.id + "'s conditions"));
    g.addEventListener("click", () => select(c.id));
    g.addEventListener("keydown", e => { if (e.key === "Enter") select(c.id); });
    layers.nodes.append(g);
    if (c.gateway) {
      layers.control.append(el("line", { class: "link", x1: p.x, y1: p.y, x2: p.gw.x, y2: p.gw.y }));
      layers.nodes.append(gatewayNode(c.id, c.gateway, p.gw));
    }
  }
}

function gatewayNode(id, gw, p) {
  const g = el("g", { class: "gateway " + gw.liveness, "data-gateway": id, "data-liveness": gw.liveness });
  g.append(el("circle", { cx: p.x, cy: p.y, r: 11 }));
  g.append(el("text", { x: p.x, y: p.y - 17, "text-anchor": "middle", class: "small" }, gw.hostname));
  g.append(el("title", {}, `gateway ${gw.hostname} (${gw.liveness}) ${gw.backend}${gw.driver ? "/" + gw.driver : ""} ${gw.endpoint || ""}`));
  return g;
}

function select(id) {
  selected = id;
  if (last) render(last);
}

function drawDetails(v) {
  const panel = document.getElementById("details");
  const c = v.clusters.find(c => c.id === selected);
  if (!c) {
    panel.replaceChildren(h("h2", {}, "Cluster"), h("p", { class: "muted" }, "Click a cluster in the graph."));
    panel.removeAttribute("data-cluster");
    return;
  }
  panel.setAttribute("data-cluster", c.id);
  const facts = h("table", { class: "facts" });
  const fact = (k, val) => { if (val) facts.append(h("tr", {}, h("th", {}, k), h("td", {}, val))); };
  fact("kubeconfig", c.source);
  fact("registered", c.registered ? "yes" : "no (not listed on the hub)");
  fact("heartbeat", c.heartbeat + (c.heartbeatSeconds != null ? ` (${c.heartbeatSeconds.toFixed(0)} s ago)` : ""));
  fact("agent", c.agentVersion);
  fact("addressing", c.addressing);
  fact("pod CIDRs", (c.podCIDRs || []).join(", "));
  fact("service CIDRs", (c.serviceCIDRs || []).join(", "));
  fact("global CIDR", c.globalCIDR);
  if (c.gateway) {
    fact("gateway", `${c.gateway.hostname} (${c.gateway.liveness})`);
    fact("endpoint", c.gateway.endpoint);
    fact("backend", c.gateway.backend + (c.gateway.driver ? " / " + c.gateway.driver : ""));
  } else {
    fact("gateway", "no Peer published");
  }
  const conds = h("table", { id: "conditions" },
    h("thead", {}, h("tr", {}, h("th", {}, "object"), h("th", {}, "type"), h("th", {}, "status"), h("th", {}, "reason"), h("th", {}, "message"), h("th", {}, "since"))));
  const body = h("tbody");
  for (const k of c.conditions) {
    body.append(h("tr", { "data-condition": k.object + "/" + k.type, "data-status": k.status },
      h("td", {}, k.object), h("td", {}, k.type), h("td", { class: "cond-" + k.status }, k.status), h("td", {}, k.reason),
      h("td", {}, k.message), h("td", {}, k.since ? new Date(k.since).toLocaleTimeString() : "")));
  }
  if (!c.conditions.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "no conditions reported")));
  conds.append(body);
  const children = [h("h2", {}, "Cluster " + c.id), facts];
  if (c.error) children.push(h("p", { class: "error-text" }, c.error));
  children.push(h("h3", {}, "Conditions"), conds);
  panel.replaceChildren(...children);
}

function drawTables(v) {
  const tb = document.querySelector("#tunnels tbody");
  tb.replaceChildren(...v.tunnels.map(t => h("tr", { "data-from": t.from, "data-to": t.to, title: t.message || "" },
    h("td", {}, t.from), h("td", {}, t.to + (t.via ? " via " + t.via : "")), h("td", {}, h("span", { class: "state " + t.state }, t.state)),
    h("td", {}, fmtRTT(t)), h("td", {}, t.lossPercent + "%"))));
  if (!v.tunnels.length) tb.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, "no gateway has reported a tunnel")));
  const sb = document.querySelector("#services tbody");
  sb.replaceChildren(...v.services.map(s => h("tr", { "data-service": s.namespace + "/" + s.name, "data-exporters": s.exporters.join(","), "data-importers": s.importers.join(",") },
    h("td", {}, s.namespace + "/" + s.name), h("td", {}, s.exporters.join(", ")), h("td", {}, s.importers.join(", ") || "–"))));
  if (!v.services.length) sb.append(h("tr", {}, h("td", { colspan: 3, class: "muted" }, "no service is exported")));
}

function render(v) {
  drawGraph(v);
  drawDetails(v);
  drawTables(v);
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const resp = await fetch("api/view", { cache: "no-store" });
    if (!resp.ok) throw new Error(resp.status + " " + (await resp.text()));
    last = await resp.json();
    render(last);
    updates++;
    document.body.dataset.updates = String(updates);
    document.body.dataset.taken = last.taken;
    status.className = "status" + (last.hub.error ? " error" : "");
    status.textContent = (last.hub.error ? "hub: " + last.hub.error + " · " : "") +
      `${last.clusters.length} clusters · updated ${new Date(last.taken).toLocaleTimeString()}`;
  } catch (e) {
    status.className = "status error";
    status.textContent = "cannot read the dashboard server: " + e.message;
  }
  setTimeout(poll, POLL_MS);
}

poll();
