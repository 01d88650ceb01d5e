// pacer web's page: reads api/status every interval and draws each key and
// the fleet; with -write, sends set, pause and resume with the token in a
// header. Everything from Redis is set as text, never as HTML.
'use strict';

(() => {
  const $ = (sel, root = document) => root.querySelector(sel);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // fmtDur writes ms as a person reads it: 850ms, 12.3s, 9m 58s, 2h 05m.
  function fmtDur(ms) {
    if (!(ms > 0)) return '0s';
    if (ms < 1000) return Math.round(ms) + 'ms';
    if (ms < 59950) return (ms / 1000).toFixed(1) + 's';
    const s = Math.round(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + 'm ' + String(s % 60).padStart(2, '0') + 's';
    const m = Math.round(s / 60);
    if (m < 1440) return Math.floor(m / 60) + 'h ' + String(m % 60).padStart(2, '0') + 'm';
    return Math.floor(m / 1440) + 'd ' + Math.floor((m % 1440) / 60) + 'h';
  }

  const zeroTime = t => !t || t.startsWith('0001-');
  const stamp = t => new Date(t).toISOString().replace(/\.\d+Z$/, 'Z');
  function ago(now, t) {
    const d = Date.parse(now) - Date.parse(t);
    return d >= 0 ? fmtDur(d) + ' ago' : 'in ' + fmtDur(-d);
  }
  const num = x => (x === null || x === undefined || Number.isNaN(x)) ? 'unknown' : x.toFixed(1);
  function rateText(r) {
    return r >= 100 ? String(Math.round(r)) : String(Number(r.toPrecision(3)));
  }

  const state = {
    frame: null,
    at: 0, // performance.now() when the frame was read
    cards: new Map(),
    timer: 0,
    interval: 1000,
    sent: 0, // reads of api/status sent
    shown: 0, // the latest of them shown: an older one arriving later is dropped
  };

  // A countdown: an element whose text is the time left until a deadline
  // on performance.now()'s clock, redrawn every 100 ms between reads. With
  // soon true it reads "in 1.2s", then "now".
  function countdown(deadline, soon) {
    const span = el('span', 'countdown');
    span.dataset.until = String(deadline);
    if (soon) span.dataset.soon = '1';
    showLeft(span, performance.now());
    return span;
  }

  function showLeft(span, now) {
    const left = Number(span.dataset.until) - now;
    span.textContent = !span.dataset.soon ? fmtDur(left) : left > 0 ? 'in ' + fmtDur(left) : 'now';
  }

  function tick() {
    const now = performance.now();
    for (const span of document.querySelectorAll('[data-until]')) showLeft(span, now);
    if (state.frame) {
      $('#updated').textContent = 'read ' + fmtDur(now - state.at) + ' ago';
    }
  }

  // poll reads the status and shows it, unless a read sent after this one
  // was shown first (a view read before a change must not replace the one
  // read after it).
  async function poll() {
    clearTimeout(state.timer);
    state.timer = setTimeout(poll, state.interval); // whatever happens below
    const n = ++state.sent;
    let f;
    try {
      const r = await fetch('api/status', { cache: 'no-store' });
      f = await r.json();
      if (!r.ok) throw new Error(f.error || r.status + ' ' + r.statusText);
    } catch (e) {
      if (n < state.shown) return;
      state.shown = n;
      document.body.classList.add('stale');
      showErrors(['pacer web does not answer (stopped?): ' + e.message]);
      return;
    }
    if (n < state.shown) return;
    state.shown = n;
    document.body.classList.remove('stale');
    state.frame = f;
    state.at = performance.now() - f.age_ns / 1e6;
    state.interval = Math.max(100, f.interval_ns / 1e6);
    render(f);
  }

  function showErrors(errs) {
    const box = $('#errors');
    box.replaceChildren(...errs.map(e => el('div', 'error', e)));
    box.hidden = errs.length === 0;
  }

  function render(f) {
    $('#summary').textContent = 'keys "' + f.pattern + '" under prefix "' + f.prefix + '" of the Redis at ' +
      f.redis + ' · Redis clock ' + stamp(f.now) + ' · read every ' + fmtDur(f.interval_ns / 1e6);
    const mode = $('#access');
    mode.textContent = f.write ? 'changes allowed (-write): each needs the token' : 'read-only';
    mode.classList.toggle('write', f.write);
    $('#writer').hidden = !f.write;
    showErrors(f.errors);

    const main = $('#keys');
    const seen = new Set();
    for (const k of f.keys) {
      seen.add(k.key);
      let card = state.cards.get(k.key);
      if (!card) {
        card = makeCard(k.key, f.write);
        state.cards.set(k.key, card);
      }
      updateCard(card, k, f);
      main.appendChild(card.root); // in the frame's order
    }
    for (const [key, card] of state.cards) {
      if (!seen.has(key)) {
        card.root.remove();
        state.cards.delete(key);
      }
    }
    let none = $('#no-keys');
    if (f.keys.length === 0 && !none) {
      none = el('p', 'empty', 'No key matches "' + f.pattern + '" under this prefix (yet).');
      none.id = 'no-keys';
      main.appendChild(none);
    } else if (f.keys.length > 0 && none) {
      none.remove();
    }
    renderFleet(f);
  }

  function figure(cls, label) {
    const box = el('div', 'figure ' + cls);
    box.append(el('div', 'label', label));
    const value = el('div', 'value');
    const sub = el('div', 'sub');
    const spark = el('div', 'spark');
    spark.append(el('span', 'label', 'last minute '));
    const runes = el('span', 'runes');
    spark.append(runes);
    box.append(value, sub, spark);
    return { box, value, sub, spark, runes };
  }

  function makeCard(key, write) {
    const root = el('section', 'key');
    root.dataset.key = key;
    const head = el('header');
    head.append(el('h2', 'name', key));
    const badges = el('div', 'badges');
    head.append(badges);
    root.append(head);

    const figs = el('div', 'figures');
    const granted = figure('granted', 'slots granted per second');
    const bar = el('div', 'bar');
    const fill = el('div', 'fill');
    bar.append(fill);
    granted.box.insertBefore(bar, granted.sub);
    const limit = figure('limit', 'limit in force');
    const queue = figure('queue', 'queue (time to the last slot granted)');
    figs.append(granted.box, limit.box, queue.box);
    root.append(figs);

    const bands = el('div', 'bands');
    bands.append(el('h3', '', 'Bands'));
    const bandList = el('ul');
    bands.append(bandList);
    const tenants = el('div', 'tenants');
    tenants.append(el('h3', '', 'Tenants and lanes'));
    const tenantList = el('ul');
    tenants.append(tenantList);
    const seats = el('div', 'seats');
    seats.append(el('h3', '', 'In flight'));
    const seatList = el('ul');
    seats.append(seatList);
    const history = el('div', 'history');
    history.append(el('h3', '', 'History'));
    const histTable = el('table');
    const hh = el('thead');
    const hr = el('tr');
    for (const h of ['when', 'who', 'change', 'why']) hr.append(el('th', '', h));
    hh.append(hr);
    const histBody = el('tbody');
    histTable.append(hh, histBody);
    const histNote = el('p', 'note');
    history.append(histTable, histNote);
    root.append(bands, tenants, seats, history);

    const card = { root, badges, granted, fill, limit, queue, bandList, tenants, tenantList, seats, seatList, histBody, histNote };
    if (write) root.append(makeActions(card, key));
    return card;
  }

  function field(label, cls, value, placeholder) {
    const l = el('label', '', label + ' ');
    const input = el('input', cls);
    input.type = 'text';
    input.autocomplete = 'off';
    if (value) input.value = value;
    if (placeholder) input.placeholder = placeholder;
    l.append(input);
    return { l, input };
  }

  function makeActions(card, key) {
    const box = el('div', 'actions');
    box.append(el('h3', '', 'Change this key'));
    const reason = field('Reason', 'reason', '', 'why: goes to the history');
    box.append(reason.l);

    const pause = el('form', 'pause');
    const dur = field('Pause for', 'duration', '10m');
    const pauseBtn = el('button', 'do-pause', 'Pause');
    pauseBtn.type = 'submit';
    const resumeBtn = el('button', 'do-resume', 'Resume');
    resumeBtn.type = 'button';
    pause.append(dur.l, pauseBtn, resumeBtn);
    pause.addEventListener('submit', ev => {
      ev.preventDefault();
      send('pause', { key, duration: dur.input.value, reason: reason.input.value }, card);
    });
    resumeBtn.addEventListener('click', () => send('resume', { key, reason: reason.input.value }, card));

    const set = el('form', 'set');
    const band = field('Band', 'band', '', 'permits');
    const listId = 'bands-' + Math.random().toString(36).slice(2);
    band.input.setAttribute('list', listId);
    const list = el('datalist');
    list.id = listId;
    band.l.append(list);
    const rate = field('Rate /s', 'rate', '', '5');
    const burst = field('Burst', 'burst', '', '1');
    const n = field('or N', 'n', '', '1000');
    const win = field('per', 'window', '', '24h');
    const shadow = el('label', '', ' shadow');
    const shadowBox = el('input', 'shadow');
    shadowBox.type = 'checkbox';
    shadow.prepend(shadowBox);
    const add = el('label', '', ' new band');
    const addBox = el('input', 'add');
    addBox.type = 'checkbox';
    add.prepend(addBox);
    const setBtn = el('button', 'do-set', 'Set');
    setBtn.type = 'submit';
    set.append(band.l, rate.l, burst.l, n.l, win.l, shadow, add, setBtn);
    win.input.title = 'a length (1m, 24h), or a calendar period: day, week or month, then a time zone (day America/Los_Angeles)';
    set.addEventListener('submit', ev => {
      ev.preventDefault();
      // "day America/Los_Angeles": a calendar window (set's --per and --tz).
      const per = /^(day|week|month)(?:\s+(\S+))?$/.exec(win.input.value.trim());
      send('set', {
        key, band: band.input.value.trim(), rate: rate.input.value.trim(), burst: burst.input.value.trim(),
        n: n.input.value.trim(), window: per ? '' : win.input.value.trim(), per: per ? per[1] : '', tz: per && per[2] ? per[2] : '',
        shadow: shadowBox.checked, add: addBox.checked, reason: reason.input.value,
      }, card);
    });
    const result = el('pre', 'result');
    result.hidden = true;
    box.append(pause, set, result);
    Object.assign(card, { result, resumeBtn, bandOptions: list });
    return box;
  }

  async function send(op, body, card) {
    const token = $('#token').value;
    body.who = $('#who').value;
    try {
      localStorage.setItem('pacer.web.who', body.who);
    } catch (e) { /* storage may be off */ }
    let res;
    let ok = false;
    try {
      const r = await fetch('api/' + op, {
        method: 'POST',
        cache: 'no-store',
        headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token },
        body: JSON.stringify(body),
      });
      res = await r.json().catch(() => ({ error: r.status + ' ' + r.statusText }));
      ok = r.ok;
      if (r.status === 401) $('#token').focus();
    } catch (e) {
      res = { error: 'pacer web does not answer: ' + e.message };
    }
    await poll(); // the result is shown with the view read after the change
    card.result.hidden = false;
    card.result.classList.toggle('failed', !ok);
    card.result.textContent = ok ? res.message + (res.note ? '\nnote: ' + res.note : '') : res.error;
  }

  // setSpark shows a figure's sparkline (watch's), once it has a point.
  function setSpark(fig, runes) {
    fig.runes.textContent = runes || '';
    fig.spark.hidden = !runes || runes.trim() === '';
  }

  function badge(cls, ...parts) {
    const b = el('span', 'badge ' + cls);
    b.append(...parts);
    return b;
  }

  function updateCard(card, k, f) {
    const now = Date.parse(f.now);
    const badges = [];
    if (k.binding) {
      badges.push(badge('binding', 'binding: ' + k.binding + ' — frees ', countdown(state.at + k.frees_ns / 1e6, true)));
    }
    if (k.paused_ns > 0) {
      const end = new Date(now + k.paused_ns / 1e6).toISOString();
      badges.push(badge('paused', 'paused — ', countdown(state.at + k.paused_ns / 1e6), ' left, until ' + stamp(end)));
    }
    if (k.shadow) badges.push(badge('shadow', 'stored limit in shadow mode'));
    if (k.source === 'unknown') badges.push(badge('unknown', 'limit unknown'));
    card.badges.replaceChildren(...badges);
    card.root.classList.toggle('is-paused', k.paused_ns > 0);

    const g = k.admissions_per_s;
    card.granted.value.textContent = g === null ? 'n/a' : g.toFixed(1) + ' slots/s';
    // The gauge: the band that binds (else the bucket closest to it), in
    // its own units granted per second when the API could tell them
    // (use_per_s), else the slots granted per second, one unit each.
    const u = k.use_per_s;
    const used = u !== null && u !== undefined ? u : g;
    const pct = used === null || !(k.rate > 0) ? 0 : 100 * used / k.rate;
    let sub = used === null ? 'known from the second read; ' : k.rate > 0 ? Math.round(pct) + '% ' : '';
    sub += k.rate > 0 ? 'of ' + k.rate_band + ': ' + rateText(k.rate) + '/s' : 'no bucket band to compare with';
    if (k.rate > 0 && used !== null) {
      sub += u !== null && u !== undefined ? ' (' + rateText(u) + '/s of its units granted' : ' (counting the slots granted, one unit each';
      sub += k.rate_band === k.binding ? '; it binds)' : ')';
    }
    card.fill.style.width = Math.min(100, pct) + '%';
    card.fill.classList.toggle('over', pct > 100.5);
    card.granted.sub.textContent = sub;
    setSpark(card.granted, k.spark);

    card.limit.value.textContent = k.limit || 'unknown';
    let src = 'none stored, and no live Limiter reports the one in its code';
    if (k.source === 'stored') src = 'stored by an operator (see the history)';
    if (k.source === 'code') src = "the code's, reported by a Limiter " + ago(f.now, k.reported);
    const stored = k.stored ? 'stored: ' + k.stored + (k.shadow ? ' (shadow mode: counted, not enforced)' : ' (enforced)') : 'stored: none';
    card.limit.sub.textContent = src + '; ' + stored;

    let q = 0;
    for (const b of k.bands || []) if (b.bucket) q = Math.max(q, b.last_slot_ns);
    card.queue.value.textContent = !k.has_state ? 'empty' : q > 0 ? fmtDur(q / 1e6) : 'none queued';
    card.queue.sub.textContent = !k.has_state ? 'no state: no reservation lately' : '';
    setSpark(card.queue, k.queue_spark);

    const items = (k.band_texts || []).map((t, i) => {
      const b = k.bands[i];
      const li = el('li', b.name === k.binding ? 'band binding' : 'band', t);
      // A bucket nothing waits for (queued 0) follows the binding band's
      // slots: its own wait would only repeat that band's queue.
      if (b.wait_ns > 0 && !(b.bucket && b.queued === 0)) li.append(el('span', 'wait', ' — alone, it holds a call ' + fmtDur(b.wait_ns / 1e6)));
      return li;
    });
    if (items.length === 0) items.push(el('li', 'band', 'no state: every bucket full, no pause'));
    card.bandList.replaceChildren(...items);

    card.tenants.hidden = k.tenant_texts.length === 0;
    card.tenantList.replaceChildren(...k.tenant_texts.map(t => el('li', 'tenant', t)));

    // The in-flight band: its seats in use, N and waiters, then the holders.
    const seatTexts = k.seat_texts || [];
    card.seats.hidden = seatTexts.length === 0;
    card.seatList.replaceChildren(...seatTexts.map((t, i) => el('li', i === 0 ? 'seat-total' : 'seat-holder', t)));

    card.histBody.replaceChildren(...k.history.map(ch => {
      const tr = el('tr', 'change');
      tr.append(el('td', 'at', stamp(ch.at)), el('td', 'who', ch.who), el('td', 'what', ch.text), el('td', 'why', ch.reason));
      return tr;
    }));
    card.histNote.textContent = k.history_total === 0 ? 'No change recorded.' :
      k.history_total > k.history.length ? 'The latest ' + k.history.length + ' of ' + k.history_total + ' (pacer history lists them all).' : '';

    if (card.resumeBtn) {
      card.resumeBtn.disabled = !(k.paused_ns > 0);
      const names = new Set((k.bands || []).map(b => b.name));
      card.bandOptions.replaceChildren(...[...names].map(n => { const o = el('option'); o.value = n; return o; }));
    }
  }

  function renderFleet(f) {
    $('#fleet-summary').textContent = f.fleet_summary;
    const rows = f.fleet.map(m => {
      const tr = el('tr', 'member');
      const degraded = m.mode !== 'redis';
      tr.classList.toggle('degraded', degraded);
      const silent = Date.parse(f.now) - Date.parse(m.heard) > 5000;
      tr.classList.toggle('silent', silent);
      let mode = m.mode;
      if (m.mode === 'local') mode = 'local: pacing locally, Redis unavailable to it';
      tr.append(
        el('td', 'id', m.id),
        el('td', 'mode', mode),
        el('td', 'since', zeroTime(m.since) ? 'unknown' : stamp(m.since) + ' (' + ago(f.now, m.since) + ')'),
        el('td', 'heard', ago(f.now, m.heard) + (silent ? ' (silent)' : '')),
        el('td', 'writes', m.writes || 'format 1 (an older release)'),
      );
      return tr;
    });
    $('#fleet tbody').replaceChildren(...rows);
  }

  try {
    $('#who').value = localStorage.getItem('pacer.web.who') || '';
  } catch (e) { /* storage may be off */ }
  $('#credentials').addEventListener('submit', ev => ev.preventDefault());
  setInterval(tick, 100);
  poll();
})();
