/* selfevo report: renders the embedded JSON (curves as inline SVG, transcripts, eval items). No network, no libraries.
   Big data (episodes per step, eval items per combination) sits in its own JSON block, parsed when first shown. */
(function () {
  'use strict';

  var DATA = JSON.parse(document.getElementById('report-data').textContent);
  var PALETTE = ['#2f6fde', '#e4572e', '#17a398', '#f3a712', '#8e44ad', '#2e4057', '#d81159', '#76b041', '#ff8c42',
                 '#5c80bc', '#a0522d', '#0b6e4f', '#c2185b', '#455a64'];
  var DASHES = ['', '7 4', '2 3', '10 3 2 3', '4 4'];
  var PAGE_TASKS = 20, PAGE_TURNS = 40, PAGE_ITEMS = 25, MAX_SERIES_ROWS = 400;
  var SOURCES = DATA.sources;
  var RUNS = SOURCES.filter(function (s) { return s.kind === 'run'; });
  var EVALS = SOURCES.filter(function (s) { return s.kind === 'eval'; });
  var cache = {};

  // ---- helpers -------------------------------------------------------------------------------------------------
  function block(id) {
    if (!(id in cache)) {
      var node = document.getElementById(id);
      cache[id] = node ? JSON.parse(node.textContent) : [];
    }
    return cache[id];
  }

  function append(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child);
  }

  function el(tag, attrs) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }

  function setAttrs(node, attrs) {
    Object.keys(attrs || {}).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === 'text') node.textContent = v;
      else if (k.slice(0, 2) === 'on') node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? '' : v);
    });
  }

  var SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    var node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    return node;
  }

  function fmt(v) {
    if (v === null || v === undefined) return '–';
    if (typeof v !== 'number') return String(v);
    if (Number.isInteger(v)) return String(v);
    var a = Math.abs(v);
    if (a >= 1000) return v.toFixed(0);
    if (a >= 1) return String(+v.toFixed(3));
    if (a === 0) return '0';
    return String(+v.toPrecision(3));
  }

  function short(text, n) {
    text = String(text === null || text === undefined ? '' : text).replace(/\s+/g, ' ').trim();
    return text.length > n ? text.slice(0, n - 1) + '…' : text;
  }

  function json(value) { return JSON.stringify(value, null, 2); }

  function globRe(pattern) {
    var parts = pattern.split('*').map(function (p) { return p.replace(/[.+?^${}()|[\]\\]/g, '\\$&'); });
    return new RegExp('^' + parts.join('([^.]*)') + '$');
  }

  /* Series names matching any pattern, in pattern order, each once, with a short label (the starred parts). */
  function matchSeries(names, patterns) {
    var seen = {}, out = [];
    patterns.forEach(function (p) {
      var re = globRe(p), segs = p.split('.');
      var whole = segs.every(function (g) { return g === '*' || g.indexOf('*') < 0; }) && p.indexOf('*') >= 0;
      names.forEach(function (name) {
        var m = re.exec(name);
        if (m && !seen[name]) {
          seen[name] = true;
          out.push({name: name, label: whole ? m.slice(1).join('.') : name});
        }
      });
    });
    var labels = out.map(function (s) { return s.label; });
    if (labels.some(function (l, i) { return labels.indexOf(l) !== i; })) {
      var parts = out.map(function (s) { return s.name.split('.'); }), common = 0;
      while (parts.every(function (p) { return p.length > common + 1 && p[common] === parts[0][common]; })) common++;
      out.forEach(function (s, i) { s.label = parts[i].slice(common).join('.'); });
    }
    return out;
  }

  function lastValue(values) {
    for (var i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return values[i];
    return null;
  }

  function mean(values) {
    var v = values.filter(function (x) { return x !== null && x !== undefined; });
    return v.length ? v.reduce(function (a, b) { return a + b; }, 0) / v.length : null;
  }

  function seriesNames(run) { return Object.keys(run.metrics.series); }

  function allSeriesNames() {
    var seen = {}, out = [];
    RUNS.forEach(function (r) { seriesNames(r).forEach(function (n) { if (!seen[n]) { seen[n] = true; out.push(n); } }); });
    return out;
  }

  function pager(page, pages, onPage, label) {
    if (pages <= 1) return null;
    return el('div', {class: 'pager'},
      el('button', {class: 'small', disabled: page <= 0, onclick: function () { onPage(page - 1); }}, '◀'),
      label || ('page ' + (page + 1) + ' of ' + pages),
      el('button', {class: 'small', disabled: page >= pages - 1, onclick: function () { onPage(page + 1); }}, '▶'));
  }

  function select(options, value, onchange, attrs) {
    var s = el('select', attrs || {});
    options.forEach(function (o) {
      var opt = el('option', {value: String(o.value)}, o.label);
      if (String(o.value) === String(value)) opt.selected = true;
      s.appendChild(opt);
    });
    s.addEventListener('change', function () { onchange(s.value); });
    return s;
  }

  function kvTable(pairs) {
    return el('table', {class: 'kvtable'}, pairs.map(function (p) {
      var v = p[1];
      var text = (v !== null && typeof v === 'object') ? json(v) : null, cell;
      if (text === null) cell = String(v === null ? 'null' : v);
      else if (text.length <= 200) cell = el('code', {}, JSON.stringify(v));
      else cell = el('details', {}, el('summary', {}, (Array.isArray(v) ? 'list of ' + v.length : 'object') + ' (' + text.length + ' characters of JSON)'), el('pre', {}, text));
      return el('tr', {}, el('td', {}, p[0]), el('td', {}, cell));
    }));
  }

  /* A short line in a series' color and dash pattern (legends, run cards). */
  function sample(color, dash) {
    var s = svg('svg', {width: 22, height: 8, class: 'sample', viewBox: '0 0 22 8'});
    s.appendChild(svg('line', {x1: 1, y1: 4, x2: 21, y2: 4, stroke: color, 'stroke-width': 2.2, 'stroke-dasharray': dash || null}));
    return s;
  }

  function runStyle(ri) { return RUNS.length > 1 ? sample('#475467', DASHES[ri % DASHES.length]) : null; }

  function badge(kind, text, title) { return el('span', {class: 'badge ' + kind, title: title || null}, text); }

  // ---- charts ----------------------------------------------------------------------------------------------------
  function niceNum(x, round) {
    var e = Math.floor(Math.log10(x)), f = x / Math.pow(10, e), nf;
    if (round) nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nf * Math.pow(10, e);
  }

  function ticks(lo, hi, n, integer) {
    var step = niceNum(niceNum(hi - lo, false) / (n - 1), true);
    if (integer) step = Math.max(1, Math.round(step));
    var out = [], start = Math.ceil(lo / step) * step;
    for (var k = 0, v = start; v <= hi + step * 1e-9 && k < 50; k++, v = start + k * step) {
      out.push(Math.abs(v) < step * 1e-6 ? 0 : +v.toPrecision(10));
    }
    return out;
  }

  /* lines: [{label, color, dash, xs, ys}] -> a panel with an SVG line chart, hover values and a clickable legend. */
  function chart(title, lines, note) {
    var panel = el('div', {class: 'panel chart-panel'}, el('h3', {}, title));
    var pts = [];
    lines.forEach(function (l) {
      l.pts = [];
      l.xs.forEach(function (x, i) { if (l.ys[i] !== null && l.ys[i] !== undefined) l.pts.push([x, l.ys[i]]); });
      pts = pts.concat(l.pts);
    });
    if (!pts.length) { append(panel, el('div', {class: 'empty'}, 'no values')); return panel; }
    var W = 460, H = 220, M = {l: 48, r: 12, t: 8, b: 24};
    var xs = pts.map(function (p) { return p[0]; }), ys = pts.map(function (p) { return p[1]; });
    var span = [].concat.apply([], lines.map(function (l) { return l.xs; }));  // the runs' whole step range
    var x0 = Math.min.apply(null, span), x1 = Math.max.apply(null, span);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x0 === x1) { x0 -= 0.5; x1 += 0.5; }
    if (y0 === y1) { var pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
    var yt = ticks(y0, y1, 5, false);
    y0 = Math.min(y0, yt[0]); y1 = Math.max(y1, yt[yt.length - 1]);
    var xt = ticks(x0, x1, 6, true);
    var X = function (v) { return M.l + (v - x0) / (x1 - x0) * (W - M.l - M.r); };
    var Y = function (v) { return H - M.b - (v - y0) / (y1 - y0) * (H - M.t - M.b); };
    var s = svg('svg', {viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': title, class: 'chart'});
    var axis = svg('g', {class: 'axis'});
    yt.forEach(function (v) {
      axis.appendChild(svg('line', {x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), class: 'gridline'}));
      var t = svg('text', {x: M.l - 4, y: Y(v) + 3, 'text-anchor': 'end'}); t.textContent = fmt(v); axis.appendChild(t);
    });
    xt.forEach(function (v) {
      if (v < x0 || v > x1) return;
      var t = svg('text', {x: X(v), y: H - M.b + 13, 'text-anchor': 'middle'}); t.textContent = fmt(v); axis.appendChild(t);
    });
    axis.appendChild(svg('path', {d: 'M' + M.l + ',' + M.t + 'V' + (H - M.b) + 'H' + (W - M.r), fill: 'none'}));
    var xl = svg('text', {x: W - M.r, y: H - 2, 'text-anchor': 'end'}); xl.textContent = 'step'; axis.appendChild(xl);
    s.appendChild(axis);
    var groups = lines.map(function (l) {
      var g = svg('g', {class: 'series', 'data-label': l.label});
      if (l.pts.length > 1) {
        var d = l.pts.map(function (p, i) { return (i ? 'L' : 'M') + X(p[0]).toFixed(1) + ',' + Y(p[1]).toFixed(1); }).join('');
        g.appendChild(svg('path', {d: d, fill: 'none', stroke: l.color, 'stroke-width': 1.8, 'stroke-dasharray': l.dash || null}));
      }
      if (l.pts.length <= 60) {
        l.pts.forEach(function (p) { g.appendChild(svg('circle', {cx: X(p[0]), cy: Y(p[1]), r: 2.6, fill: l.color})); });
      }
      s.appendChild(g);
      return g;
    });
    var guide = svg('line', {y1: M.t, y2: H - M.b, stroke: '#98a2b3', 'stroke-dasharray': '3 3', visibility: 'hidden'});
    s.appendChild(guide);
    var overlay = svg('rect', {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, fill: 'transparent'});
    s.appendChild(overlay);
    var tip = el('div', {class: 'tip'});
    var allX = Array.from(new Set(xs)).sort(function (a, b) { return a - b; });
    overlay.addEventListener('mousemove', function (ev) {
      var box = s.getBoundingClientRect();
      var vx = x0 + ((ev.clientX - box.left) * W / box.width - M.l) / (W - M.l - M.r) * (x1 - x0);
      var best = allX.reduce(function (a, b) { return Math.abs(b - vx) < Math.abs(a - vx) ? b : a; });
      guide.setAttribute('x1', X(best)); guide.setAttribute('x2', X(best)); guide.setAttribute('visibility', 'visible');
      tip.textContent = '';
      append(tip, el('div', {}, el('b', {}, 'step ' + fmt(best))));
      lines.forEach(function (l, i) {
        if (groups[i].style.display === 'none') return;
        var p = l.pts.filter(function (q) { return q[0] === best; })[0];
        if (p) append(tip, el('div', {}, el('span', {class: 'swatch', style: 'background:' + l.color}), l.label + ': ' + fmt(p[1])));
      });
      tip.style.display = 'block';
      var px = (ev.clientX - panel.getBoundingClientRect().left);
      tip.style.left = Math.min(px + 12, panel.clientWidth - tip.offsetWidth - 4) + 'px';
      tip.style.top = (ev.clientY - panel.getBoundingClientRect().top + 12) + 'px';
    });
    overlay.addEventListener('mouseleave', function () { tip.style.display = 'none'; guide.setAttribute('visibility', 'hidden'); });
    append(panel, s);
    append(panel, tip);
    var legend = el('div', {class: 'legend'});
    lines.forEach(function (l, i) {
      var item = el('span', {title: 'click: hide/show ' + l.name},
        sample(l.color, l.dash), ' ' + l.label);
      item.addEventListener('click', function () {
        var off = groups[i].style.display !== 'none';
        groups[i].style.display = off ? 'none' : '';
        item.classList.toggle('off', off);
      });
      legend.appendChild(item);
    });
    append(panel, legend);
    if (note) append(panel, el('div', {class: 'muted'}, note));
    return panel;
  }

  /* The lines of one panel: every matching series of every run (several runs: color by series, dash by run). */
  function panelLines(patterns) {
    var lines = [], colorOf = {}, nextColor = 0;
    RUNS.forEach(function (run, ri) {
      matchSeries(seriesNames(run), patterns).forEach(function (m) {
        if (!(m.label in colorOf)) colorOf[m.label] = PALETTE[nextColor++ % PALETTE.length];
        lines.push({name: (RUNS.length > 1 ? run.name + ': ' : '') + m.name,
                    label: RUNS.length > 1 ? run.name + ' · ' + m.label : m.label,
                    color: colorOf[m.label], dash: RUNS.length > 1 ? DASHES[ri % DASHES.length] : '',
                    xs: run.metrics.steps, ys: smooth(run.metrics.series[m.name], smoothing)});
      });
    });
    return lines;
  }

  /* Trailing moving average over the last `window` logged values (gaps stay gaps). */
  var smoothing = 0;
  function smooth(values, window) {
    if (!window || window < 2) return values;
    var kept = [];
    return values.map(function (v) {
      if (v === null || v === undefined) return null;
      kept.push(v);
      if (kept.length > window) kept.shift();
      return kept.reduce(function (a, b) { return a + b; }, 0) / kept.length;
    });
  }

  // ---- tab: curves -----------------------------------------------------------------------------------------------
  function sourceCards() {
    return el('div', {class: 'cards'}, SOURCES.map(function (src) {
      var kv = function (k, v) { return el('div', {class: 'kv'}, k + ': ', el('b', {}, String(v))); };
      if (src.kind === 'eval') {
        var accs = src.records.map(function (r) { return r.accuracy; }).filter(function (a) { return typeof a === 'number'; });
        return el('div', {class: 'card source-card'}, el('div', {class: 'name'}, src.name),
          kv('kind', 'selfevo eval'), kv('combinations', src.combos.length || src.records.length),
          kv('models', Array.from(new Set(src.records.map(function (r) { return r.model; }))).join(', ') || '–'),
          kv('best accuracy', accs.length ? fmt(Math.max.apply(null, accs)) : '–'));
      }
      var ri = RUNS.indexOf(src), steps = src.metrics.steps;
      var launch = src.launches.length ? src.launches[src.launches.length - 1] : null;
      return el('div', {class: 'card source-card'},
        el('div', {class: 'name'}, runStyle(ri), RUNS.length > 1 ? ' ' : null, src.name),
        kv('recipe', src.recipe || '–'),
        kv('steps logged', steps.length ? steps.length + ' (last step ' + fmt(steps[steps.length - 1]) + ')' : 'none yet'),
        kv('episodes', src.n_episodes),
        kv('launches', src.launches.length + (launch && launch.git_commit ? ', commit ' + String(launch.git_commit).slice(0, 10) : '')),
        kv('mean reward (last step)', fmt(mean(matchSeries(seriesNames(src), ['reward.*']).map(function (m) {
          return lastValue(src.metrics.series[m.name]); })))));
    }));
  }

  function finalTable() {
    var cols = DATA.headline.map(function (h) {
      var values = RUNS.map(function (run) {
        var ms = matchSeries(seriesNames(run), h.patterns);
        return ms.length ? mean(ms.map(function (m) { return lastValue(run.metrics.series[m.name]); })) : null;
      });
      return {label: h.label, values: values};
    }).filter(function (c) { return c.values.some(function (v) { return v !== null; }); });
    var table = el('table', {id: 'final-metrics'},
      el('tr', {}, el('th', {}, 'run'), el('th', {}, 'last step'), cols.map(function (c) { return el('th', {}, c.label); })),
      RUNS.map(function (run, ri) {
        var steps = run.metrics.steps;
        return el('tr', {}, el('td', {}, runStyle(ri), RUNS.length > 1 ? ' ' : null, run.name),
          el('td', {class: 'num'}, steps.length ? fmt(steps[steps.length - 1]) : '–'),
          cols.map(function (c) { return el('td', {class: 'num'}, fmt(c.values[ri])); }));
      }));
    return el('div', {class: 'table-wrap'}, table);
  }

  function allSeriesTable() {
    var filter = el('input', {type: 'text', placeholder: 'filter series (substring)', size: 30});
    var holder = el('div', {class: 'table-wrap'});
    function draw() {
      var q = filter.value.trim().toLowerCase();
      var names = allSeriesNames().filter(function (n) { return n.toLowerCase().indexOf(q) >= 0; });
      holder.textContent = '';
      append(holder, el('table', {},
        el('tr', {}, el('th', {}, 'series'), RUNS.map(function (r) { return el('th', {}, r.name + ' (last)'); }),
           RUNS.map(function (r) { return el('th', {}, r.name + ' (mean)'); })),
        names.slice(0, MAX_SERIES_ROWS).map(function (n) {
          return el('tr', {}, el('td', {}, n),
            RUNS.map(function (r) { return el('td', {class: 'num'}, fmt(r.metrics.series[n] ? lastValue(r.metrics.series[n]) : null)); }),
            RUNS.map(function (r) { return el('td', {class: 'num'}, fmt(r.metrics.series[n] ? mean(r.metrics.series[n]) : null)); }));
        })));
      if (names.length > MAX_SERIES_ROWS) append(holder, el('div', {class: 'muted'}, (names.length - MAX_SERIES_ROWS) + ' more: narrow the filter'));
    }
    filter.addEventListener('input', draw);
    draw();
    return el('details', {}, el('summary', {}, 'every series: last and mean value per run (' + allSeriesNames().length + ' series)'),
      el('div', {class: 'controls'}, filter), holder);
  }

  function seriesPicker() {
    var names = allSeriesNames(), chosen = {};
    var filter = el('input', {type: 'text', placeholder: 'filter (substring)', size: 30});
    var list = el('div', {class: 'series-list'}), out = el('div', {class: 'grid'});
    function drawChart() {
      out.textContent = '';
      var sel = names.filter(function (n) { return chosen[n]; });
      if (!sel.length) { append(out, el('div', {class: 'empty'}, 'tick series above to plot them together')); return; }
      append(out, chart('chosen series', panelLines(sel)));
    }
    function drawList() {
      var q = filter.value.trim().toLowerCase();
      list.textContent = '';
      names.filter(function (n) { return n.toLowerCase().indexOf(q) >= 0; }).forEach(function (n) {
        var box = el('input', {type: 'checkbox'});
        box.checked = !!chosen[n];
        box.addEventListener('change', function () { chosen[n] = box.checked; drawChart(); });
        list.appendChild(el('label', {title: n}, box, ' ' + n));
      });
    }
    filter.addEventListener('input', drawList);
    drawList();
    drawChart();
    return el('div', {class: 'series-picker', id: 'series-picker'},
      el('h3', {}, 'plot any series (' + names.length + ' from metrics.jsonl, flattened to dotted names)'),
      el('div', {class: 'controls'}, filter,
         el('button', {class: 'small', onclick: function () { chosen = {}; drawList(); drawChart(); }}, 'clear')),
      list, out);
  }

  function renderCurves(tab) {
    append(tab, sourceCards());
    if (!RUNS.length) return;
    append(tab, el('h2', {}, RUNS.length > 1 ? 'Final metrics (last logged value; several agents: their mean)' : 'Final metrics'));
    append(tab, finalTable());
    append(tab, allSeriesTable());
    var names = allSeriesNames();
    if (!names.length) { append(tab, el('div', {class: 'empty'}, 'no metrics.jsonl lines yet')); return; }
    append(tab, el('h2', {}, 'Curves' + (RUNS.length > 1 ? ' (runs overlaid: one line style per run)' : '')));
    var grid = el('div', {class: 'grid', id: 'panels'});
    var covered = {};
    DATA.panels.forEach(function (p) { matchSeries(names, p.patterns).forEach(function (m) { covered[m.name] = true; }); });
    var other = names.filter(function (n) { return !covered[n] && n.indexOf('.') < 0; });
    function drawPanels() {
      grid.textContent = '';
      DATA.panels.forEach(function (p) {
        var lines = panelLines(p.patterns);
        if (lines.length) grid.appendChild(chart(p.title, lines));
      });
      if (other.length) grid.appendChild(chart('other scalars', panelLines(other.slice(0, 12)),
                                               other.length > 12 ? (other.length - 12) + ' more in the picker below' : null));
    }
    var longest = Math.max.apply(null, RUNS.map(function (r) { return r.metrics.steps.length; }));
    append(tab, el('div', {class: 'controls'}, el('label', {}, 'smoothing'),
      select([0, 5, 10, 25, 50].filter(function (w) { return w === 0 || w < longest; }).map(function (w) {
        return {value: w, label: w ? 'moving average of ' + w + ' steps' : 'none (raw values)'}; }), smoothing,
        function (v) { smoothing = +v; drawPanels(); }, {id: 'pick-smoothing'}),
      el('span', {class: 'muted'}, 'hover a chart for values; click a legend entry to hide or show its line')));
    drawPanels();
    append(tab, grid);
    append(tab, seriesPicker());
  }

  // ---- tab: transcripts ------------------------------------------------------------------------------------------
  // a turn of episodes.jsonl records its label under the key 'role' (Turn.to_json)
  var TURN_KEYS = ['agent', 'role', 'round', 'reward', 'messages', 'text', 'parsed_ok', 'parse_error', 'tokens',
                   'finish_reason', 'verdict', 'verdict_note'];
  var EPISODE_KEYS = ['step', 'task_id', 'domain', 'question', 'reference', 'turns'];
  var tstate = {run: 0, step: 0, taskPage: 0, task: 0, role: '', agent: '', turnPage: 0};
  var transcriptTab = null;

  function runsWithEpisodes() { return RUNS.filter(function (r) { return r.episode_steps && r.episode_steps.length; }); }

  function verdictBadge(turn) {
    var v = turn.verdict;
    if (v) {
      var ok = v.score >= 1;
      return badge(ok ? 'ok' : 'bad', 'verifier ' + (ok ? '✓' : '✗') + ' ' + fmt(v.score) +
                   (v.extracted !== null && v.extracted !== undefined ? ' (answer: ' + short(v.extracted, 30) + ')' : ''),
                   v.verifier + ' verifier against the ' + (v.against === 'new_task' ? 'generated task' : 'task') + ': ' + v.reason);
    }
    if (turn.verdict_note) return badge('none', 'verifier: –', turn.verdict_note);
    return null;
  }

  function renderTurn(turn, index, agentColor) {
    var parse = turn.parsed_ok === true ? badge('ok', 'parsed')
      : turn.parsed_ok === false ? badge('bad', 'parse failed' + (turn.parse_error ? ': ' + short(turn.parse_error, 60) : ''), turn.parse_error)
      : badge('none', 'no parse');
    var messages = Array.isArray(turn.messages) ? turn.messages : [];
    var chars = messages.reduce(function (a, m) { return a + String(m && m.content || '').length; }, 0);
    var prompt = el('details', {class: 'prompt'}, el('summary', {}, 'prompt: ' + messages.length + ' message' +
                    (messages.length === 1 ? '' : 's') + ', ' + chars + ' characters'));
    prompt.addEventListener('toggle', function () {
      if (!prompt.open || prompt.dataset.filled) return;
      prompt.dataset.filled = '1';
      messages.forEach(function (m) {
        append(prompt, el('div', {class: 'msg-role'}, String(m && m.role)));
        append(prompt, el('pre', {class: 'prompt-text'}, String(m && m.content)));
      });
    });
    var isShort = function (v) { return v === null || typeof v === 'number' || typeof v === 'boolean' ||
                                          (typeof v === 'string' && v.length <= 60 && v.indexOf('\n') < 0); };
    var extras = Object.keys(turn).filter(function (k) { return TURN_KEYS.indexOf(k) < 0 && !isShort(turn[k]); });
    var inline = Object.keys(turn).filter(function (k) { return TURN_KEYS.indexOf(k) < 0 && isShort(turn[k]); });
    var text = String(turn.text === null || turn.text === undefined ? '' : turn.text);
    return el('div', {class: 'turn', id: 'turn-' + index, 'data-role': turn.role, style: 'border-left-color:' + agentColor},
      el('div', {class: 'turn-head'},
        el('span', {class: 'muted'}, '#' + index),
        el('span', {class: 'turn-agent'}, turn.agent === null || turn.agent === undefined ? 'base model' : String(turn.agent)),
        el('span', {class: 'turn-role'}, String(turn.role)),
        turn.round !== null && turn.round !== undefined ? el('span', {class: 'muted'}, 'round ' + turn.round) : null,
        el('span', {class: 'turn-reward'}, 'reward ', el('b', {}, turn.reward === null || turn.reward === undefined ? 'none (masked)' : fmt(turn.reward))),
        parse,
        verdictBadge(turn),
        el('span', {class: 'muted'}, fmt(turn.tokens) + ' tokens'),
        turn.finish_reason ? (turn.finish_reason === 'length' ? badge('warn', 'cut at token limit') : el('span', {class: 'muted'}, 'finish: ' + turn.finish_reason)) : null,
        inline.map(function (k) { return el('span', {class: 'muted turn-meta'}, k + ': ' + fmt(turn[k])); })),
      prompt,
      el('div', {class: 'msg-role'}, 'response'),
      text ? el('pre', {class: 'turn-text'}, text) : el('div', {class: 'turn-text empty'}, '(empty response)'),
      extras.map(function (k) {
        var v = turn[k];
        return el('details', {class: 'turn-extra'}, el('summary', {}, k),
          el('pre', {}, typeof v === 'string' ? v : json(v)));
      }));
  }

  function episodeSummary(ep) {
    var rewards = (ep.turns || []).map(function (t) { return t.reward; });
    var verdicts = (ep.turns || []).filter(function (t) { return t.verdict; });
    var correct = verdicts.filter(function (t) { return t.verdict.score >= 1; }).length;
    var meta = Object.keys(ep).filter(function (k) { return EPISODE_KEYS.indexOf(k) < 0 && (typeof ep[k] !== 'object' || ep[k] === null); })
      .map(function (k) { return k + '=' + short(fmt(ep[k]), 24); }).join(' ');
    return {turns: (ep.turns || []).length, reward: mean(rewards), verified: verdicts.length ? correct + '/' + verdicts.length : '–', meta: meta};
  }

  function renderTranscripts() {
    var tab = transcriptTab;
    tab.textContent = '';
    var runs = runsWithEpisodes();
    if (!runs.length) { append(tab, el('div', {class: 'empty'}, 'no episodes.jsonl in the given run directories')); return; }
    var run = runs[Math.min(tstate.run, runs.length - 1)];
    var steps = run.episode_steps;
    tstate.step = Math.min(tstate.step, steps.length - 1);
    var stepInfo = steps[tstate.step];
    var episodes = block(stepInfo.block);
    tstate.task = Math.min(tstate.task, Math.max(episodes.length - 1, 0));
    var ep = episodes[tstate.task];
    function go(changes) { Object.keys(changes).forEach(function (k) { tstate[k] = changes[k]; }); renderTranscripts(); }

    var stats = run.verify || {};
    var note = !stats.enabled ? 'verifier verdicts not computed (--no-verify)'
      : 'verifier verdicts computed at report time for ' + stats.verified + ' solver-like turns (math, MCQ, numeric)' +
        (stats.code ? '; ' + stats.code + ' code turns not verified (the sandboxed tests are not cheap, and episodes.jsonl has no tests)' : '') +
        (stats.no_reference ? '; ' + stats.no_reference + ' without a reference' : '') +
        (stats.over_limit ? '; ' + stats.over_limit + ' not verified, over the limit of ' + stats.limit + ' (selfevo report --verify-limit N)' : '') +
        (stats.errors ? '; ' + stats.errors + ' verifier errors' : '');
    append(tab, el('div', {class: 'muted', id: 'verify-note'}, note));

    var controls = el('div', {class: 'controls'});
    if (runs.length > 1) {
      append(controls, [el('label', {}, 'run'), select(runs.map(function (r, i) { return {value: i, label: r.name}; }), tstate.run,
        function (v) { go({run: +v, step: 0, task: 0, taskPage: 0, turnPage: 0, role: '', agent: ''}); }, {id: 'pick-run'})]);
    }
    append(controls, [el('label', {}, 'step'),
      el('button', {class: 'small', disabled: tstate.step <= 0, onclick: function () { go({step: tstate.step - 1, task: 0, taskPage: 0, turnPage: 0}); }}, '◀'),
      select(steps.map(function (s, i) { return {value: i, label: 'step ' + s.step + ' (' + s.n + ' episodes)'}; }), tstate.step,
        function (v) { go({step: +v, task: 0, taskPage: 0, turnPage: 0}); }, {id: 'pick-step'}),
      el('button', {class: 'small', disabled: tstate.step >= steps.length - 1, onclick: function () { go({step: tstate.step + 1, task: 0, taskPage: 0, turnPage: 0}); }}, '▶'),
      el('label', {}, 'task'),
      select(episodes.map(function (e, i) { return {value: i, label: (i + 1) + '. ' + short(e.task_id, 50)}; }), tstate.task,
        function (v) { go({task: +v, taskPage: Math.floor(+v / PAGE_TASKS), turnPage: 0}); }, {id: 'pick-task'})]);
    append(tab, controls);

    var pages = Math.ceil(episodes.length / PAGE_TASKS);
    tstate.taskPage = Math.min(tstate.taskPage, Math.max(pages - 1, 0));
    var first = tstate.taskPage * PAGE_TASKS;
    append(tab, el('div', {class: 'table-wrap'}, el('table', {id: 'task-list'},
      el('tr', {}, ['#', 'task', 'domain', 'turns', 'mean reward', 'verifier ✓', 'episode data'].map(function (h) { return el('th', {}, h); })),
      episodes.slice(first, first + PAGE_TASKS).map(function (e, k) {
        var i = first + k, s = episodeSummary(e);
        return el('tr', {class: 'clickable' + (i === tstate.task ? ' selected' : ''), onclick: function () { go({task: i, turnPage: 0}); }},
          el('td', {class: 'num'}, i + 1), el('td', {}, String(e.task_id)), el('td', {}, String(e.domain)),
          el('td', {class: 'num'}, s.turns), el('td', {class: 'num'}, fmt(s.reward)), el('td', {class: 'num'}, s.verified),
          el('td', {class: 'muted'}, s.meta));
      }))));
    append(tab, pager(tstate.taskPage, pages, function (p) { go({taskPage: p}); }, 'tasks ' + (first + 1) + '–' +
      Math.min(first + PAGE_TASKS, episodes.length) + ' of ' + episodes.length));
    if (!ep) { append(tab, el('div', {class: 'empty'}, 'no episodes at this step')); return; }

    var meta = Object.keys(ep).filter(function (k) { return EPISODE_KEYS.indexOf(k) < 0; });
    var question = String(ep.question || '');
    append(tab, el('div', {class: 'episode-head', id: 'episode'},
      el('h3', {}, String(ep.task_id), el('span', {class: 'muted'}, '  ' + ep.domain + ' · step ' + ep.step)),
      el('details', {open: question.length < 1500}, el('summary', {}, 'question (' + question.length + ' characters)'), el('pre', {class: 'question'}, question)),
      el('div', {}, el('span', {class: 'muted'}, 'reference: '), ep.reference ? el('code', {}, short(ep.reference, 300)) : el('span', {class: 'muted'}, '(none)')),
      meta.length ? kvTable(meta.map(function (k) { return [k, ep[k]]; })) : null));

    var turns = (ep.turns || []).map(function (t, i) { return {t: t, i: i}; });
    var roles = Array.from(new Set(turns.map(function (x) { return String(x.t.role); })));
    var agents = Array.from(new Set(turns.map(function (x) { return String(x.t.agent); })));
    var shown = turns.filter(function (x) { return (!tstate.role || String(x.t.role) === tstate.role) && (!tstate.agent || String(x.t.agent) === tstate.agent); });
    append(tab, el('div', {class: 'controls'},
      el('label', {}, 'label'), select([{value: '', label: 'all labels'}].concat(roles.map(function (r) { return {value: r, label: r}; })), tstate.role,
        function (v) { go({role: v, turnPage: 0}); }, {id: 'pick-role'}),
      el('label', {}, 'agent'), select([{value: '', label: 'all agents'}].concat(agents.map(function (a) { return {value: a, label: a}; })), tstate.agent,
        function (v) { go({agent: v, turnPage: 0}); }, {id: 'pick-agent'}),
      el('span', {class: 'muted'}, shown.length + ' of ' + turns.length + ' turns')));
    var tpages = Math.ceil(shown.length / PAGE_TURNS);
    tstate.turnPage = Math.min(tstate.turnPage, Math.max(tpages - 1, 0));
    var tp = pager(tstate.turnPage, tpages, function (p) { go({turnPage: p}); });
    append(tab, tp);
    var list = el('div', {id: 'turns'});
    shown.slice(tstate.turnPage * PAGE_TURNS, (tstate.turnPage + 1) * PAGE_TURNS).forEach(function (x) {
      list.appendChild(renderTurn(x.t, x.i, PALETTE[agents.indexOf(String(x.t.agent)) % PALETTE.length]));
    });
    append(tab, list);
    if (tp) append(tab, pager(tstate.turnPage, tpages, function (p) { go({turnPage: p}); }));
  }

  // ---- tab: eval -------------------------------------------------------------------------------------------------
  var EVAL_COLS = ['benchmark', 'setup', 'n', 'accuracy', 'mean_score', 'model', 'adapters', 'temperature', 'max_new_tokens',
                   'steps', 'generations', 'generated_tokens', 'wall_time_s'];
  var EVAL_SKIP = ['split', 'engine', 'seed', 'agents', 'sampling', 'options'];
  var estate = {combo: 0, filter: 'all', page: 0, item: 0, query: ''};
  var evalItemsHolder = null;

  function evalCell(r, k) {
    if (k === 'temperature' || k === 'max_new_tokens') return r.sampling ? r.sampling[k] : null;
    if (k === 'adapters') return Array.isArray(r.adapters) && r.adapters.length ? r.adapters.join(', ') : '–';
    return r[k];
  }

  function evalTable(records, withDir) {
    var extra = [];
    records.forEach(function (r) {
      Object.keys(r).forEach(function (k) {
        if (EVAL_COLS.indexOf(k) < 0 && EVAL_SKIP.indexOf(k) < 0 && extra.indexOf(k) < 0 && typeof r[k] === 'number') extra.push(k);
      });
    });
    var cols = EVAL_COLS.concat(extra);
    return el('div', {class: 'table-wrap'}, el('table', {class: 'eval-table'},
      el('tr', {}, withDir ? el('th', {}, 'directory') : null, cols.map(function (c) { return el('th', {}, c.replace(/_/g, ' ')); })),
      records.map(function (r) {
        return el('tr', {}, withDir ? el('td', {}, r._dir) : null, cols.map(function (c) {
          var v = evalCell(r, c);
          if (c === 'accuracy' && typeof v === 'number') {
            return el('td', {class: 'num'}, fmt(v), el('span', {class: 'bar', style: 'width:' + Math.round(v * 60) + 'px'}));
          }
          return el('td', {class: typeof v === 'number' ? 'num' : null}, fmt(v));
        }));
      })));
  }

  function allCombos() {
    var out = [];
    EVALS.forEach(function (src) { src.combos.forEach(function (c) { out.push({src: src, combo: c}); }); });
    return out;
  }

  function renderEvalItems() {
    var holder = evalItemsHolder;
    holder.textContent = '';
    var combos = allCombos();
    if (!combos.length) { append(holder, el('div', {class: 'empty'}, 'no <benchmark>-<setup>/items.jsonl found')); return; }
    function go(changes) { Object.keys(changes).forEach(function (k) { estate[k] = changes[k]; }); renderEvalItems(); }
    var cur = combos[Math.min(estate.combo, combos.length - 1)];
    var items = block(cur.combo.block);
    var q = estate.query.toLowerCase();
    var shown = items.map(function (it, i) { return {it: it, i: i}; }).filter(function (x) {
      return (estate.filter === 'all' || (estate.filter === 'correct') === !!x.it.correct) &&
             (!q || String(x.it.id).toLowerCase().indexOf(q) >= 0);
    });
    var search = el('input', {type: 'text', placeholder: 'item id contains', size: 20, value: estate.query, id: 'item-search'});
    search.addEventListener('change', function () { go({query: search.value, page: 0, item: 0}); });
    append(holder, el('div', {class: 'controls'},
      el('label', {}, 'benchmark × setup'),
      select(combos.map(function (c, i) {
        return {value: i, label: (EVALS.length > 1 ? c.src.name + ': ' : '') + c.combo.name + ' (accuracy ' + fmt(c.combo.results.accuracy) + ')'};
      }), estate.combo, function (v) { go({combo: +v, page: 0, item: 0}); }, {id: 'pick-combo'}),
      el('label', {}, 'show'),
      select([{value: 'all', label: 'all items'}, {value: 'correct', label: 'correct'}, {value: 'wrong', label: 'incorrect'}], estate.filter,
        function (v) { go({filter: v, page: 0, item: 0}); }, {id: 'pick-filter'}),
      search, el('span', {class: 'muted'}, shown.length + ' of ' + items.length + ' items')));
    var pages = Math.ceil(shown.length / PAGE_ITEMS);
    estate.page = Math.min(estate.page, Math.max(pages - 1, 0));
    var first = estate.page * PAGE_ITEMS;
    append(holder, el('div', {class: 'table-wrap'}, el('table', {id: 'item-list'},
      el('tr', {}, ['#', 'id', 'verdict', 'extracted', 'reference', 'final response'].map(function (h) { return el('th', {}, h); })),
      shown.slice(first, first + PAGE_ITEMS).map(function (x) {
        return el('tr', {class: 'clickable' + (x.i === estate.item ? ' selected' : ''), onclick: function () { go({item: x.i}); }},
          el('td', {class: 'num'}, x.i + 1), el('td', {}, String(x.it.id)),
          el('td', {}, x.it.correct ? badge('ok', '✓ correct') : badge('bad', '✗ ' + fmt(x.it.verdict ? x.it.verdict.score : null))),
          el('td', {}, short(x.it.extracted, 30)), el('td', {}, short(x.it.reference, 30)), el('td', {}, short(x.it.final_response, 80)));
      }))));
    append(holder, pager(estate.page, pages, function (p) { go({page: p}); }));
    var item = items[estate.item];
    if (!item) return;
    var verdict = item.verdict || {};
    append(holder, el('div', {class: 'episode-head', id: 'eval-item'},
      el('h3', {}, String(item.id), ' ', item.correct ? badge('ok', '✓ correct') : badge('bad', '✗ incorrect')),
      el('div', {}, el('span', {class: 'muted'}, 'reference: '), el('code', {}, short(item.reference, 300)),
         el('span', {class: 'muted'}, '   extracted: '), el('code', {}, item.extracted === null || item.extracted === undefined ? '(nothing)' : short(item.extracted, 200)),
         el('span', {class: 'muted'}, '   verifier: ' + fmt(verdict.score) + ' (' + (verdict.reason || '') + ')')),
      el('details', {}, el('summary', {}, 'prompt'), el('pre', {}, String(item.prompt || ''))),
      el('div', {class: 'msg-role'}, 'final response'), el('pre', {class: 'item-final'}, String(item.final_response || '')),
      item.info && Object.keys(item.info).length ? el('details', {}, el('summary', {}, 'setup info'), el('pre', {}, json(item.info))) : null));
    var responses = Array.isArray(item.responses) ? item.responses : [];
    append(holder, el('div', {class: 'muted'}, responses.length + ' responses'));
    responses.forEach(function (r, i) {
      append(holder, el('div', {class: 'turn eval-response'},
        el('div', {class: 'turn-head'}, el('span', {class: 'muted'}, '#' + i), el('span', {class: 'turn-agent'}, String(r.agent === null ? 'base model' : r.agent)),
          el('span', {class: 'turn-role'}, String(r.label !== undefined ? r.label : r.role)),  // role, step: eval folders written before label, wave
          el('span', {class: 'muted'}, 'wave ' + fmt(r.wave !== undefined ? r.wave : r.step)),
          r.round !== null && r.round !== undefined ? el('span', {class: 'muted'}, 'round ' + r.round) : null,
          el('span', {class: 'muted'}, fmt(r.n_tokens) + ' tokens'),
          r.finish_reason === 'length' ? badge('warn', 'cut at token limit') : el('span', {class: 'muted'}, 'finish: ' + r.finish_reason)),
        el('pre', {class: 'turn-text'}, String(r.text || '')),
        r.meta && Object.keys(r.meta).length ? el('details', {}, el('summary', {}, 'meta'), el('pre', {}, json(r.meta))) : null));
    });
  }

  function renderEval(tab) {
    EVALS.forEach(function (src) {
      append(tab, el('h2', {}, src.name));
      append(tab, src.records.length ? evalTable(src.records, false) : el('div', {class: 'empty'}, 'no results'));
    });
    if (EVALS.length > 1) {
      append(tab, el('h2', {}, 'All eval directories'));
      var rows = [];
      EVALS.forEach(function (src) { src.records.forEach(function (r) { rows.push(Object.assign({_dir: src.name}, r)); }); });
      append(tab, evalTable(rows, true));
    }
    append(tab, el('h2', {}, 'Items'));
    evalItemsHolder = el('div', {id: 'eval-items'});
    append(tab, evalItemsHolder);
    renderEvalItems();
  }

  // ---- tab: round flows (MAESTRO) ----------------------------------------------------------------------------------
  var FLOW_LABELS = {correct: 'correct', missed: 'wrong, a correct candidate was on the slate',
                     uncovered: 'wrong, no correct candidate on the slate', no_answer: 'no answer (the decision did not parse)'};
  var FLOW_SHORT = {correct: 'correct', missed: 'missed', uncovered: 'not covered', no_answer: 'no answer'};
  var FLOW_COLORS = {correct: '#1a7f37', missed: '#f3a712', uncovered: '#c62828', no_answer: '#98a2b3'};

  function hasFlows() {
    return RUNS.some(function (r) { return r.flows; }) ||
      EVALS.some(function (s) { return s.combos.some(function (c) { return c.flows; }); });
  }

  function svgText(attrs, text) { var t = svg('text', attrs); t.textContent = text; return t; }

  /* A Sankey figure of one round_flows record: per round a column of outcome boxes (height ∝ questions), per non-zero
     flow between consecutive rounds a band (width ∝ questions) from its outcome in round t to that in round t + 1. */
  function sankey(flow) {
    var R = flow.rounds, nodeW = 16, colGap = 200, gap = 8, H = 260, M = {l: 30, t: 24, b: 6};
    var W = Math.max(320, M.l + nodeW + (R - 1) * colGap + 90);
    var totals = flow.columns.map(function (c) { return flow.states.reduce(function (a, s) { return a + c.counts[s]; }, 0); });
    var boxes = Math.max.apply(null, flow.columns.map(function (c) {
      return flow.states.filter(function (s) { return c.counts[s]; }).length; }));
    var scale = (H - M.t - M.b - gap * (boxes - 1)) / Math.max.apply(null, totals);
    var X = function (t) { return M.l + (t - 1) * colGap; };
    var s = svg('svg', {viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, role: 'img', class: 'sankey',
                        'aria-label': 'answers from round to round',
                        'data-rounds': R, 'data-bands': flow.flows.length});
    var out = {}, into = {};  // per round and outcome: where the next band leaves / arrives
    flow.columns.forEach(function (c) {
      var x = X(c.round), y = M.t, last = c.round === R && R > 1;
      s.appendChild(svgText({x: x + nodeW / 2, y: 12, 'text-anchor': 'middle', class: 'flow-head'}, 'round ' + c.round));
      flow.states.forEach(function (state) {
        var n = c.counts[state];
        if (!n) return;
        var h = n * scale;
        out[c.round + state] = y; into[c.round + state] = y;
        var box = svg('rect', {x: x, y: y, width: nodeW, height: Math.max(h, 1), fill: FLOW_COLORS[state], class: 'flow-node',
                               'data-round': c.round, 'data-state': state, 'data-count': n});
        box.appendChild(svgText({}, 'round ' + c.round + ': ' + FLOW_LABELS[state] + ' — ' + n + ' of ' + totals[c.round - 1]));
        s.appendChild(box);
        s.appendChild(svgText({x: last ? x - 4 : x + nodeW + 4, y: y + Math.min(h / 2, 40) + 4, 'text-anchor': last ? 'end' : 'start',
                               class: 'flow-label'}, FLOW_SHORT[state] + ' ' + n));
        y += h + gap;
      });
    });
    flow.flows.forEach(function (f) {
      var w = f.count * scale, x0 = X(f.from) + nodeW, x1 = X(f.from + 1), xm = (x0 + x1) / 2;
      var y0 = out[f.from + f.source], y1 = into[(f.from + 1) + f.target];
      out[f.from + f.source] += w; into[(f.from + 1) + f.target] += w;
      var d = 'M' + x0 + ',' + y0 + 'C' + xm + ',' + y0 + ' ' + xm + ',' + y1 + ' ' + x1 + ',' + y1 + 'L' + x1 + ',' + (y1 + w) +
              'C' + xm + ',' + (y1 + w) + ' ' + xm + ',' + (y0 + w) + ' ' + x0 + ',' + (y0 + w) + 'Z';
      var band = svg('path', {d: d, fill: FLOW_COLORS[f.source], class: 'flow-band', 'data-from': f.from,
                              'data-source': f.source, 'data-target': f.target, 'data-count': f.count});
      band.appendChild(svgText({}, 'round ' + f.from + ' ' + FLOW_SHORT[f.source] + ' → round ' + (f.from + 1) + ' ' +
                               FLOW_SHORT[f.target] + ': ' + f.count + ' questions'));
      s.insertBefore(band, s.firstChild);  // under the boxes
    });
    return s;
  }

  function flowPanel(flow) {
    var legend = el('div', {class: 'legend'}, flow.states.map(function (state) {
      return el('span', {}, el('span', {class: 'swatch', style: 'background:' + FLOW_COLORS[state]}), FLOW_LABELS[state]);
    }));
    var counts = el('table', {class: 'flow-counts'},
      el('tr', {}, el('th', {}, 'outcome'), flow.columns.map(function (c) { return el('th', {}, 'round ' + c.round); })),
      flow.states.map(function (state) {
        return el('tr', {}, el('td', {}, FLOW_LABELS[state]),
          flow.columns.map(function (c) { return el('td', {class: 'num'}, c.counts[state]); }));
      }));
    var keys = ['correct_correct', 'correct_wrong', 'wrong_correct', 'wrong_wrong'];
    var moves = flow.transitions.length ? el('table', {class: 'flow-transitions'},
      el('tr', {}, el('th', {}, 'rounds'), keys.map(function (k) { return el('th', {}, k.replace('_', ' → ')); })),
      flow.transitions.map(function (t) {
        return el('tr', {}, el('td', {}, t.from + ' → ' + t.to), keys.map(function (k) { return el('td', {class: 'num'}, t[k]); }));
      })) : el('div', {class: 'muted'}, 'one round: no flows between rounds');
    var title = flow.n + ' questions, ' + flow.rounds + ' round' + (flow.rounds === 1 ? '' : 's');
    return el('div', {class: 'panel flow-panel'}, el('h3', {}, title),
      sankey(flow), legend, el('div', {class: 'flow-tables'}, counts, moves),
      el('div', {class: 'muted'}, 'wrong: every outcome but correct (no answer included); hover a band or box for its count'));
  }

  function renderFlows(tab) {
    append(tab, el('div', {class: 'muted'}, 'MAESTRO runs and evals: each question\'s outcome in every round (the central ' +
      'decision correct; wrong although a correct candidate was on the slate; wrong with none; no answer) and how the ' +
      'questions move between outcomes from round to round (MAESTRO Fig. 5). Box heights and band widths are proportional ' +
      'to questions.'));
    RUNS.forEach(function (run) {
      if (!run.flows) return;
      var holder = el('div', {class: 'flow-holder'});
      function draw(i) {
        holder.textContent = '';
        append(holder, flowPanel(i < 0 ? run.flows.all : run.flows.steps[i].flow));
      }
      var steps = [{value: -1, label: 'all steps'}].concat(run.flows.steps.map(function (st, i) {
        return {value: i, label: 'step ' + st.step}; }));
      append(tab, [el('h2', {}, run.name, el('span', {class: 'muted'}, '  run: training rounds')),
        el('div', {class: 'controls'}, el('label', {}, 'step'), select(steps, -1, function (v) { draw(+v); }, {class: 'pick-flow-step'})),
        holder]);
      draw(-1);
    });
    EVALS.forEach(function (src) {
      src.combos.forEach(function (c) {
        if (!c.flows) return;
        append(tab, [el('h2', {}, src.name + ': ' + c.name, el('span', {class: 'muted'}, '  eval')), flowPanel(c.flows)]);
      });
    });
  }

  // ---- tab: config -----------------------------------------------------------------------------------------------
  function launchesTable(launches) {
    if (!launches.length) return el('div', {class: 'empty'}, 'no run.json');
    return el('div', {class: 'table-wrap'}, el('table', {class: 'launches'},
      el('tr', {}, ['#', 'time', 'command line', 'git commit', 'cwd', 'machine', 'packages'].map(function (h) { return el('th', {}, h); })),
      launches.map(function (l, i) {
        var machine = l.machine || {};
        return el('tr', {}, el('td', {class: 'num'}, i + 1), el('td', {}, String(l.time || '–')),
          el('td', {}, el('code', {}, Array.isArray(l.argv) ? l.argv.join(' ') : String(l.argv || '–'))),
          el('td', {}, el('code', {}, String(l.git_commit || '–'))), el('td', {}, String(l.cwd || '–')),
          el('td', {}, Object.keys(machine).map(function (k) { return el('div', {}, k + ': ' + fmt(machine[k])); })),
          el('td', {}, Object.keys(l.packages || {}).map(function (k) { return el('div', {}, k + ' ' + l.packages[k]); })));
      })));
  }

  function renderConfig(tab) {
    SOURCES.forEach(function (src) {
      append(tab, el('h2', {}, src.name, el('span', {class: 'muted'}, '  ' + (src.kind === 'run' ? 'run directory' : 'selfevo eval directory') + ': ' + src.path)));
      if (src.kind === 'run') {
        append(tab, el('h3', {}, 'launches (run.json)'));
        append(tab, launchesTable(src.launches));
        append(tab, el('h3', {}, 'resolved config (config.yaml)'));
        append(tab, src.config ? el('pre', {class: 'config'}, src.config) : el('div', {class: 'empty'}, 'no config.yaml'));
        append(tab, el('div', {class: 'muted'}, 'files: ' + src.files.join(', ')));
      } else {
        append(tab, el('h3', {}, 'table.md'));
        append(tab, src.table ? el('pre', {}, src.table) : el('div', {class: 'empty'}, 'no table.md'));
        append(tab, el('details', {}, el('summary', {}, 'summary.json (sampling, options, agents of every combination)'),
          el('pre', {}, json(src.records))));
      }
    });
  }

  // ---- page ------------------------------------------------------------------------------------------------------
  function main() {
    document.getElementById('title').textContent = DATA.title;
    document.getElementById('subtitle').textContent = RUNS.length + ' run' + (RUNS.length === 1 ? '' : 's') + ', ' +
      EVALS.length + ' eval director' + (EVALS.length === 1 ? 'y' : 'ies') + ' · generated ' + DATA.generated;
    var tabs = [];
    if (RUNS.length) tabs.push(['curves', 'Curves', renderCurves]);
    if (RUNS.length) tabs.push(['transcripts', 'Transcripts', function (tab) { transcriptTab = tab; renderTranscripts(); }]);
    if (EVALS.length) tabs.push(['eval', 'Eval', renderEval]);
    if (hasFlows()) tabs.push(['flows', 'Round flows', renderFlows]);
    tabs.push(['config', 'Config & launches', renderConfig]);
    var nav = document.getElementById('tabs'), mainEl = document.getElementById('main');
    mainEl.textContent = '';
    var buttons = {}, panels = {};
    function show(id) {
      if (!panels[id]) id = tabs[0][0];
      Object.keys(panels).forEach(function (k) {
        panels[k].classList.toggle('active', k === id);
        buttons[k].classList.toggle('active', k === id);
      });
      if (location.hash.slice(1) !== id) {
        try { history.replaceState(null, '', '#' + id); } catch (err) { /* some file:// contexts refuse it */ }
      }
    }
    tabs.forEach(function (t) {
      var panel = el('section', {class: 'tab-panel', id: 'tab-' + t[0]});
      panels[t[0]] = panel;
      buttons[t[0]] = el('button', {onclick: function () { show(t[0]); }}, t[1]);
      nav.appendChild(buttons[t[0]]);
      mainEl.appendChild(panel);
    });
    tabs.forEach(function (t) {
      try { t[2](panels[t[0]]); } catch (err) { window.reportError(t[1] + ': ' + (err && err.stack || err)); }
    });
    show(location.hash.slice(1));
    window.addEventListener('hashchange', function () { show(location.hash.slice(1)); });
    document.body.setAttribute('data-report-ready', '1');
  }

  main();
})();
