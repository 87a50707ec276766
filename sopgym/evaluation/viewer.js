// The sopgym episode viewer (sopgym/evaluation/viewer.py writes it into the page, inline).
// Every text of the data is put in the page with textContent (or as a text node), never as HTML.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("sopgym-data").textContent);
  const RUNS = DATA.runs;
  const EPS = DATA.episodes;
  const KEYS = ["run", "env", "verdict", "status", "cause", "infra", "q", "episode", "compare", "differ"];
  const MAX_ROWS = 1000;
  const state = {};

  // ---------------------------------------------------------------------------------------------
  // Building blocks
  // ---------------------------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function hashOf(params) {
    const p = new URLSearchParams();
    for (const k of KEYS) if (params[k]) p.set(k, params[k]);
    return "#" + p.toString();
  }

  // Text with the search term marked: text nodes and <mark> elements only.
  function marked(text, cls) {
    const frag = document.createDocumentFragment();
    const q = (state.q || "").toLowerCase();
    const lower = text.toLowerCase();
    let at = 0;
    if (q) {
      for (let i = lower.indexOf(q); i >= 0; i = lower.indexOf(q, at)) {
        frag.append(text.slice(at, i), el("mark", {class: "hit", text: text.slice(i, i + q.length)}));
        at = i + q.length;
      }
    }
    frag.append(text.slice(at));
    if (!cls) return frag;
    const span = el("span", {class: cls});
    span.append(frag);
    return span;
  }

  // A reply, with the part after the first character that differs from the other run's reply marked.
  function replyBlock(text, other) {
    const pre = el("pre", {class: "reply"});
    if (other === undefined || other === null || other === text) {
      pre.append(marked(text));
      return pre;
    }
    let n = 0;
    while (n < text.length && n < other.length && text[n] === other[n]) n++;
    pre.append(marked(text.slice(0, n)), marked(text.slice(n) || "(ends here)", "diverged"));
    return pre;
  }

  function json(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 1);
  }

  function num(value) {  // a reward as the text output prints it
    return typeof value === "number" && !Number.isInteger(value) ? value.toFixed(3) : json(value);
  }

  function badge(verdict) {
    return el("span", {class: "badge " + verdict, text: verdict});
  }

  function runName(ep) { return RUNS[ep.run].name; }
  function epKey(ep) { return runName(ep) + "/" + ep.index; }
  function pairKey(ep) { return ep.env + "\u0000" + ep.task + "\u0000" + ep.sample; }

  // ---------------------------------------------------------------------------------------------
  // Address <-> state
  // ---------------------------------------------------------------------------------------------
  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    for (const k of KEYS) state[k] = p.get(k) || "";
  }

  function setState(changes) {
    Object.assign(state, changes);
    const hash = hashOf(state);
    if (hash !== location.hash && !(hash === "#" && !location.hash)) history.replaceState(null, "", hash);
    render();
  }

  // The run side-by-side mode puts on the left: the run filter, else the first run that is not the other.
  function leftRun() {
    if (state.run) return state.run;
    const other = RUNS.find((r) => r.name !== state.compare);
    return other ? other.name : "";
  }

  function comparing() {
    return state.compare && RUNS.some((r) => r.name === state.compare) && leftRun() !== state.compare;
  }

  // ---------------------------------------------------------------------------------------------
  // Search and filters
  // ---------------------------------------------------------------------------------------------
  function haystack(ep) {
    if (ep._hay === undefined) {
      const parts = [ep.env, ep.task, ep.input, ep.answer_text || "", ep.failed_request || "", ep.problem || ""];
      for (const s of ep.steps) {
        parts.push(s.reply, s.feedback, s.status);
        for (const c of s.calls) parts.push(c.name + " " + c.arguments);
        for (const r of s.results) parts.push(r.name, r.content);
      }
      ep._hay = parts.join("\n").toLowerCase();
    }
    return ep._hay;
  }

  function matches(ep, runFilter) {
    if (runFilter && runName(ep) !== runFilter) return false;
    if (state.env && ep.env !== state.env) return false;
    if (state.verdict && ep.verdict !== state.verdict) return false;
    if (state.status && !ep.statuses.includes(state.status)) return false;
    if (state.cause && (ep.cause || "none") !== state.cause) return false;
    if (state.infra && (ep.infra ? "yes" : "no") !== state.infra) return false;
    if (state.q && !haystack(ep).includes(state.q.toLowerCase())) return false;
    return true;
  }

  const PARTNERS = new Map();  // run name -> (pair key -> episode)
  function partner(ep, name) {
    if (!PARTNERS.has(name)) {
      const map = new Map();
      for (const other of EPS) if (runName(other) === name) map.set(pairKey(other), other);
      PARTNERS.set(name, map);
    }
    return PARTNERS.get(name).get(pairKey(ep)) || null;
  }

  function shown() {
    if (!comparing()) return EPS.filter((ep) => matches(ep, state.run));
    return EPS.filter((ep) => {
      if (!matches(ep, leftRun())) return false;
      const other = partner(ep, state.compare);
      return !state.differ || (other !== null && other.verdict !== ep.verdict);
    });
  }

  function options(values, all) {
    return [["", all], ...values.map((v) => [v, v])];
  }

  function distinct(fn) {
    const set = new Set();
    for (const ep of EPS) for (const v of [].concat(fn(ep))) set.add(v);
    return [...set].sort();
  }

  function select(id, label, opts, key) {
    // A new filter closes the episode (it may no longer be listed); side by side keeps it open.
    const sel = el("select", {id: id, onchange: (e) => setState(key === "compare" ? {compare: e.target.value}
      : {[key]: e.target.value, episode: ""})});
    for (const [value, text] of opts) sel.append(el("option", {value: value, text: text}));
    return el("label", {}, label + " ", sel);
  }

  function buildFilters() {
    const bar = el("div", {id: "filters"});
    const q = el("input", {id: "f-q", type: "search", placeholder: "search replies, tool results, inputs, answers",
                           oninput: (e) => setState({q: e.target.value})});
    bar.append(el("label", {}, "search ", q));
    bar.append(select("f-run", "run", options(RUNS.map((r) => r.name), "all runs"), "run"));
    bar.append(select("f-env", "env", options(distinct((ep) => ep.env), "all envs"), "env"));
    bar.append(select("f-verdict", "verdict", options(["success", "failure", "unscored"], "any"), "verdict"));
    bar.append(select("f-status", "turn status", options(distinct((ep) => ep.statuses), "any"), "status"));
    bar.append(select("f-cause", "truncation", options(["none"].concat(distinct((ep) => ep.cause || [])), "any"),
                      "cause"));
    bar.append(select("f-infra", "infrastructure failure", options(["yes", "no"], "any"), "infra"));
    if (RUNS.length > 1) {
      bar.append(select("f-compare", "side by side with", options(RUNS.map((r) => r.name), "(none)"), "compare"));
      const differ = el("input", {id: "f-differ", type: "checkbox",
                                  onchange: (e) => setState({differ: e.target.checked ? "1" : ""})});
      bar.append(el("label", {}, differ, " only verdicts that differ"));
    }
    bar.append(el("button", {id: "f-clear", type: "button", text: "clear",
                             onclick: () => setState(Object.fromEntries(KEYS.map((k) => [k, ""])))}));
    return bar;
  }

  function syncFilters() {
    for (const k of ["run", "env", "verdict", "status", "cause", "infra", "compare", "q"]) {
      const node = document.getElementById("f-" + k);
      if (!node) continue;
      if (node.tagName === "SELECT" && state[k] && ![...node.options].some((o) => o.value === state[k])) {
        node.append(el("option", {value: state[k], text: state[k] + " (not in these runs)"}));
      }
      if (node.value !== state[k]) node.value = state[k];
    }
    const differ = document.getElementById("f-differ");
    if (differ) differ.checked = state.differ === "1";
  }

  // ---------------------------------------------------------------------------------------------
  // Leaderboard: runs x envs, each cell a link to its episodes
  // ---------------------------------------------------------------------------------------------
  function buildLeaderboard() {
    const envs = distinct((ep) => ep.env);
    const table = el("table", {id: "leaderboard"});
    const head = el("tr", {}, el("th", {text: "run"}));
    for (const env of envs) head.append(el("th", {text: env}));
    head.append(el("th", {text: "all envs"}), el("th", {text: "infrastructure failures"}));
    table.append(head);
    for (const run of RUNS) {
      const row = el("tr", {}, el("th", {}, el("a", {href: hashOf({run: run.name}), text: run.name})));
      for (const env of envs.concat([""])) {
        const eps = EPS.filter((ep) => runName(ep) === run.name && (!env || ep.env === env));
        const ok = eps.filter((ep) => ep.verdict === "success").length;
        const fail = eps.length - ok;
        const cell = el("td");
        if (eps.length) {
          cell.append(el("a", {class: "cell-link", href: hashOf({run: run.name, env: env}),
                               text: (ok / eps.length).toFixed(3) + " (" + ok + "/" + eps.length + ")"}));
          if (fail) {
            cell.append(" ", el("a", {class: "fail-link", href: hashOf({run: run.name, env: env, verdict: "failure"}),
                                      "data-run": run.name, "data-env": env, text: fail + " failed"}));
          }
        }
        row.append(cell);
      }
      const infra = EPS.filter((ep) => runName(ep) === run.name && ep.infra).length;
      row.append(el("td", {}, infra ? el("a", {href: hashOf({run: run.name, infra: "yes"}), text: String(infra)}) : "0"));
      table.append(row);
    }
    return table;
  }

  // ---------------------------------------------------------------------------------------------
  // The list
  // ---------------------------------------------------------------------------------------------
  function renderList(eps) {
    const list = document.getElementById("list");
    list.replaceChildren();
    const cmp = comparing();
    const head = el("tr", {}, ...["run", "#", "env", "task", "verdict", "turns", "truncated", "infra."]
      .map((t) => el("th", {text: t})));
    if (cmp) head.append(el("th", {text: state.compare}));
    list.append(head);
    for (const ep of eps.slice(0, MAX_ROWS)) {
      const other = cmp ? partner(ep, state.compare) : null;
      const differs = cmp && (other === null || other.verdict !== ep.verdict);
      const row = el("tr", {class: "ep-row" + (epKey(ep) === currentKey() ? " current" : "") + (differs ? " differs" : ""),
                            "data-run": runName(ep), "data-index": String(ep.index), "data-verdict": ep.verdict,
                            "data-env": ep.env, onclick: () => setState({episode: epKey(ep)})},
        el("td", {text: runName(ep)}), el("td", {text: String(ep.index)}), el("td", {text: ep.env}),
        el("td", {text: ep.task + (ep.sample ? " #" + ep.sample : "")}), el("td", {}, badge(ep.verdict)),
        el("td", {text: String(ep.turns)}), el("td", {text: ep.cause || ""}), el("td", {text: ep.infra ? "yes" : ""}));
      if (cmp) row.append(el("td", {}, other ? badge(other.verdict) : el("span", {class: "muted", text: "no match"})));
      list.append(row);
    }
    const more = eps.length > MAX_ROWS ? " (the first " + MAX_ROWS + " listed: narrow the filters)" : "";
    document.getElementById("count").textContent = eps.length + " of " + EPS.length + " episodes" + more;
  }

  // ---------------------------------------------------------------------------------------------
  // One episode
  // ---------------------------------------------------------------------------------------------
  function currentKey() {
    if (!state.episode) return "";
    if (/^\d+$/.test(state.episode)) return (state.run || RUNS[0].name) + "/" + state.episode;
    return state.episode;
  }

  function findEpisode() {
    const key = currentKey();
    return key ? EPS.find((ep) => epKey(ep) === key) || null : null;
  }

  function section(title, ...content) {
    return el("div", {class: "section"}, el("h4", {text: title}), ...content);
  }

  function headBlock(ep, other) {
    const head = el("div", {class: "episode-head"});
    head.append(el("h3", {text: runName(ep) + " · episode " + ep.index}), el("div", {},
      badge(ep.verdict), " " + ep.env + " · " + ep.task + (ep.sample ? " #" + ep.sample : "") + " · " + ep.turns +
      " turns · " + ep.end + (ep.cause ? " (" + ep.cause + ")" : "") + (ep.infra ? " · infrastructure failure" : "") +
      (ep.reward !== undefined && ep.reward !== null ? " · reward " + num(ep.reward) : "")));
    if (other && other.verdict !== ep.verdict) head.append(el("div", {class: "verdicts-differ", text: "verdicts differ"}));
    if (ep.system !== null && ep.system !== undefined) {
      const sop = el("details", {class: "sop"}, el("summary", {text: "System message (the SOP)"}));
      sop.append(el("pre", {}, marked(DATA.systems[ep.system])));
      head.append(sop);
    }
    head.append(section("Task input", el("pre", {}, marked(ep.input))));
    return head;
  }

  function turnBlock(step, otherStep, first) {
    if (!step) return el("div", {class: "turn absent", text: "(no such turn)"});
    const differs = otherStep !== undefined && (!otherStep || otherStep.reply !== step.reply);
    const block = el("div", {class: "turn" + (differs ? " diverge" : "") + (first ? " first-divergence" : "")});
    block.append(el("div", {class: "turn-head"}, el("b", {text: "turn " + json(step.turn)}),
      " · " + step.status + (step.reward !== null && step.reward !== undefined ? " · reward " + num(step.reward) : ""),
      first ? el("span", {class: "tag", text: "replies diverge here"}) : differs ? el("span", {class: "tag", text: "differs"}) : null));
    if (step.model) block.append(el("div", {class: "muted", text: "model: " + step.model}));
    block.append(replyBlock(step.reply, otherStep === undefined ? undefined : otherStep ? otherStep.reply : ""));
    if (step.calls.length) {
      const table = el("table", {class: "calls"}, el("tr", {}, el("th", {text: "call"}), el("th", {text: "arguments"}),
                                                      el("th", {text: "status"})));
      for (const c of step.calls) {
        table.append(el("tr", {}, el("td", {}, marked(c.name)), el("td", {}, el("code", {}, marked(c.arguments))),
                        el("td", {class: c.status === "OK" || c.status === "SUBMITTED" ? "ok" : "bad", text: c.status})));
      }
      block.append(table);
    }
    for (const r of step.results) block.append(el("div", {class: "muted", text: "tool " + r.name}), el("pre", {}, marked(r.content)));
    if (step.feedback) block.append(el("div", {class: "muted", text: "env"}), el("pre", {}, marked(step.feedback)));
    return block;
  }

  function recordsTable(final, expected) {
    // Lists of records: one row per record and field, the fields that differ marked.
    const table = el("table", {class: "records"}, el("tr", {}, ...["record", "field", "final", "expected"].map((t) => el("th", {text: t}))));
    const n = Math.max(final.length, expected.length);
    for (let i = 0; i < n; i++) {
      const f = final[i], e = expected[i];
      const fieldNames = [...new Set(Object.keys(f || {}).concat(Object.keys(e || {})))];
      if (!f || !e) {
        table.append(el("tr", {class: "mismatch"}, el("td", {text: String(i)}), el("td", {text: f ? "(not expected)" : "(not in the final state)"}),
                        el("td", {}, el("code", {text: f ? json(f) : "—"})), el("td", {}, el("code", {text: e ? json(e) : "—"}))));
        continue;
      }
      fieldNames.forEach((name, j) => {
        const same = JSON.stringify(f[name]) === JSON.stringify(e[name]);
        table.append(el("tr", {class: same ? "" : "mismatch"}, el("td", {text: j === 0 ? String(i) : ""}), el("td", {text: name}),
                        el("td", {}, el("code", {text: name in f ? json(f[name]) : "(absent)"})),
                        el("td", {}, el("code", {text: name in e ? json(e[name]) : "(absent)"}))));
      });
    }
    return table;
  }

  function isRecords(value) {
    return Array.isArray(value) && value.length > 0 && value.every((v) => v && typeof v === "object" && !Array.isArray(v));
  }

  function stateBlock(st, ep) {
    const block = section("Final state against the expected state (" + (ep.state_ok ? "state_ok" : "state differs") + ")");
    block.classList.add("state");
    for (const k of st.keys) {
      const body = (isRecords(k.final) || isRecords(k.expected)) && Array.isArray(k.final) && Array.isArray(k.expected) ? recordsTable(k.final, k.expected)
        : el("table", {class: "records"}, el("tr", {}, el("th", {text: "final"}), el("th", {text: "expected"})),
             el("tr", {class: k.ok ? "" : "mismatch"}, el("td", {}, el("pre", {text: k.present ? json(k.final) : "(absent)"})),
                el("td", {}, el("pre", {text: json(k.expected)}))));
      block.append(el("div", {class: "state-key " + (k.ok ? "ok" : "bad")},
        el("div", {}, el("b", {text: k.key}), " ", el("span", {class: k.ok ? "ok" : "bad", text: k.ok ? "matches" : "differs"})), body));
    }
    if (Object.keys(st.unchecked).length) {
      const other = el("details", {}, el("summary", {text: "other keys of the final state (not checked)"}));
      other.append(el("pre", {text: json(st.unchecked)}));
      block.append(other);
    }
    return block;
  }

  function endBlock(ep) {
    const block = el("div", {class: "end"});
    if (ep.end === "unfinished") return el("div", {class: "end bad", text: ep.problem});
    block.append(el("h4", {text: "End: " + ep.end + (ep.cause ? " (" + ep.cause + ")" : "")}));
    if (ep.failed_request) block.append(el("p", {class: "bad", text: "ended by the harness: " + ep.failed_request}));
    if (ep.problem) block.append(el("p", {class: "bad", text: "evaluator: " + ep.problem}));
    if (ep.fields && ep.fields.length) {
      const table = el("table", {class: "fields"}, el("tr", {}, ...["field", "answer", "expected", "verdict"].map((t) => el("th", {text: t}))));
      for (const f of ep.fields) {
        table.append(el("tr", {}, el("td", {text: f.name}), el("td", {}, marked(f.answer)), el("td", {text: f.expected}),
                        el("td", {class: f.ok ? "ok" : "bad", text: f.ok ? "right" : "wrong"})));
      }
      block.append(table);
    }
    if (ep.state) block.append(stateBlock(ep.state, ep));
    if (ep.completed !== undefined) {
      block.append(el("p", {class: "muted", text: "evaluator: success=" + (ep.verdict === "success") + " · completed=" +
        ep.completed + " · state_ok=" + ep.state_ok + " · infrastructure_failure=" + ep.infra}));
    }
    const comps = Object.entries(ep.components || {});
    if (comps.length) block.append(el("p", {class: "muted", text: "reward components: " + comps.map(([k, v]) => k + " " + num(v)).join(" · ")}));
    return block;
  }

  function renderDetail() {
    const detail = document.getElementById("detail");
    detail.replaceChildren();
    const ep = findEpisode();
    if (!ep) {
      scrolledTo = "";
      detail.append(el("p", {class: "muted", text: state.episode ? "no episode " + state.episode + " in this page"
        : "Pick an episode in the list."}));
      return;
    }
    const other = comparing() && runName(ep) !== state.compare ? partner(ep, state.compare) : null;
    if (!other) {
      detail.append(headBlock(ep, null));
      ep.steps.forEach((s) => detail.append(turnBlock(s, undefined, false)));
      detail.append(endBlock(ep));
      scrollOnce(ep);
      return;
    }
    const grid = el("div", {class: "side-by-side"});
    grid.append(headBlock(ep, other), headBlock(other, ep));
    const n = Math.max(ep.steps.length, other.steps.length);
    let diverged = false;
    for (let i = 0; i < n; i++) {
      const a = ep.steps[i] || null, b = other.steps[i] || null;
      const first = !diverged && (!a || !b || a.reply !== b.reply);
      diverged = diverged || first;
      grid.append(turnBlock(a, b, first), turnBlock(b, a, first));
    }
    grid.append(endBlock(ep), endBlock(other));
    detail.append(grid);
    scrollOnce(ep);
  }

  let scrolledTo = "";
  function scrollOnce(ep) {  // to an episode when it is opened, not at every keystroke of a search
    if (scrolledTo === epKey(ep)) return;
    scrolledTo = epKey(ep);
    document.getElementById("detail").scrollIntoView({block: "start"});
  }

  // ---------------------------------------------------------------------------------------------
  // The page
  // ---------------------------------------------------------------------------------------------
  function render() {
    syncFilters();
    renderList(shown());
    renderDetail();
    document.body.dataset.rendered = location.hash;  // the address the page now shows (tests wait on it)
  }

  function build() {
    const success = EPS.filter((ep) => ep.verdict === "success").length;
    document.body.append(
      el("h1", {text: "sopgym episodes"}),
      el("p", {class: "muted", text: EPS.length + " episodes of " + RUNS.length + " run(s), " + success +
        " successes (the evaluator's verdict). Everything is in this file; nothing is loaded from the network."}),
      buildLeaderboard());
    const runs = el("details", {id: "runs"}, el("summary", {text: "runs: files and configuration"}));
    for (const run of RUNS) runs.append(el("h4", {text: run.name + " — " + run.path}), el("pre", {text: json(run.identity)}));
    document.body.append(runs, buildFilters(), el("div", {id: "count"}),
                         el("div", {class: "list-wrap"}, el("table", {id: "list"})), el("div", {id: "detail"}));
    window.addEventListener("hashchange", () => { readHash(); render(); });
    readHash();
    render();
  }

  build();
})();
