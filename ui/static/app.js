// The delay-queue dashboard. Plain JavaScript, no library: every number on
// the page comes from the server's HTTP API (POST, JSON envelope), called
// relative to this page so that it works behind a proxy's path prefix.
//
// Job data (ids, topics, bodies, reasons) only ever reaches the page through
// textContent and setAttribute, never through HTML parsing.
'use strict';

(function () {
  const TOKEN_KEY = 'dq_auth_token'; // in sessionStorage only: gone with the tab
  const REFRESH_MS = 3000;
  const UPCOMING_MINUTES = 60;
  const DEAD_PAGE_SIZE = 20;
  const DEAD_KICK_BATCH = 1000; // the most /dead/kick takes at once
  const BODY_PREVIEW_CHARS = 500;
  const ROW_PREVIEW_CHARS = 80;

  // ApiError is a failed call: transport, HTTP status or code 1.
  class ApiError extends Error {}
  // AuthNeeded is a call answered 401; the token form is showing.
  class AuthNeeded extends Error {}

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY) || '',
    waitingForToken: false,
    topics: [], // names, sorted, from the last /stats
    deadCounts: {}, // topic → dead letters, from the last /stats
    deadTopic: '', // chosen in the dead-letter panel
    deadTopicChosen: false, // by the user (or used: paged, acted on), rather than by default
    deadOffset: 0,
    deadTotal: 0,
    deadRendered: '', // what the dead-letter table shows, to redraw only on change
    deadSeq: 0, // discards answers to superseded /dead/list calls
    topicsSeq: 0,
    upcoming: null, // last /upcoming data, redrawn on resize
    timer: 0,
  };

  const $ = (id) => document.getElementById(id);

  // el builds an element. props: class, text, title, data (dataset), attrs.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    if (props) {
      if (props.class) node.className = props.class;
      if (props.text !== undefined) node.textContent = String(props.text);
      if (props.title !== undefined) node.title = String(props.title);
      if (props.type) node.type = props.type;
      for (const [k, v] of Object.entries(props.data || {})) node.dataset[k] = String(v);
      for (const [k, v] of Object.entries(props.attrs || {})) node.setAttribute(k, String(v));
    }
    for (const child of children) node.append(child);
    return node;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  // ---- API ---------------------------------------------------------------

  // api POSTs body to the endpoint and returns the envelope of a code 0
  // answer; it throws ApiError otherwise, and AuthNeeded (after showing the
  // token form) on 401.
  async function api(endpoint, body) {
    const headers = { 'Content-Type': 'application/json' };
    const sentToken = state.token;
    if (sentToken) headers.Authorization = 'Bearer ' + sentToken;
    let resp;
    try {
      resp = await fetch(new URL('../' + endpoint, window.location.href), {
        method: 'POST',
        headers,
        body: JSON.stringify(body || {}),
        cache: 'no-store',
        credentials: 'omit',
      });
    } catch (err) {
      throw new ApiError('cannot reach the server (' + err.message + ')');
    }
    if (resp.status === 401) {
      // An answer to a call made before the user entered another token
      // says nothing about the new one.
      if (state.token === sentToken) {
        useToken(''); // a refused token is not kept, nor sent again
        askForToken(sentToken ? 'The server refused this token.' : '');
      }
      throw new AuthNeeded('token needed');
    }
    let envelope;
    try {
      envelope = await resp.json();
    } catch (err) {
      throw new ApiError('/' + endpoint + ': HTTP ' + resp.status + ' with an answer that is not JSON');
    }
    if (!envelope || envelope.code !== 0) {
      const message = envelope && envelope.message ? envelope.message : 'HTTP ' + resp.status;
      throw new ApiError('/' + endpoint + ': ' + message);
    }
    return envelope;
  }

  // ---- auth --------------------------------------------------------------

  function askForToken(reason) {
    state.waitingForToken = true;
    $('auth-panel').hidden = false;
    $('auth-error').textContent = reason;
    $('main').classList.add('locked');
    setStatus('token needed', 'warn');
    const input = $('auth-token');
    if (document.activeElement !== input) input.focus();
  }

  function useToken(token) {
    state.token = token;
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token);
    } else {
      sessionStorage.removeItem(TOKEN_KEY);
    }
    $('forget-token').hidden = !token;
  }

  $('auth-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const token = $('auth-token').value.trim();
    if (!token) return;
    useToken(token);
    $('auth-token').value = '';
    $('auth-error').textContent = '';
    $('auth-panel').hidden = true;
    $('main').classList.remove('locked');
    state.waitingForToken = false;
    refreshNow();
  });

  $('forget-token').addEventListener('click', () => {
    useToken('');
    refreshNow();
  });

  // ---- status and errors ---------------------------------------------------

  function setStatus(text, kind) {
    const status = $('status');
    status.textContent = text;
    status.className = 'status' + (kind ? ' ' + kind : '');
  }

  // panelError shows err under a panel; AuthNeeded is shown by the form.
  function panelError(id, err) {
    if (err instanceof AuthNeeded) return;
    $(id).textContent = err instanceof Error ? err.message : String(err);
    if (!(err instanceof ApiError)) console.error(err);
  }

  function showBanner(message) {
    $('error-text').textContent = message;
    $('error-banner').hidden = false;
  }

  $('error-dismiss').addEventListener('click', () => {
    $('error-banner').hidden = true;
  });

  // ---- formatting ----------------------------------------------------------

  const numberFormat = new Intl.NumberFormat();
  const formatCount = (n) => numberFormat.format(n);

  function plural(n, word) {
    return formatCount(n) + ' ' + word + (n === 1 ? '' : 's');
  }

  function formatDateTime(ms) {
    if (!ms) return 'unknown';
    return new Date(ms).toLocaleString(undefined, {
      year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit',
    });
  }

  function formatClock(ms) {
    return new Date(ms).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
  }

  // formatRelative says how far ms is from now: "in 5 min", "2 h ago".
  function formatRelative(ms) {
    if (!ms) return 'unknown';
    const diff = ms - Date.now();
    const abs = Math.abs(diff);
    if (abs < 5e3) return 'just now';
    let amount;
    if (abs < 60e3) amount = Math.round(abs / 1e3) + ' s';
    else if (abs < 3600e3) amount = Math.round(abs / 60e3) + ' min';
    else if (abs < 86400e3) amount = (abs / 3600e3).toFixed(1).replace(/\.0$/, '') + ' h';
    else amount = (abs / 86400e3).toFixed(1).replace(/\.0$/, '') + ' d';
    return diff >= 0 ? 'in ' + amount : amount + ' ago';
  }

  function formatSeconds(s) {
    if (s < 120) return s + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min (' + s + ' s)';
    return (s / 3600).toFixed(1).replace(/\.0$/, '') + ' h (' + s + ' s)';
  }

  // preview returns the first max characters (code points, not halves of
  // a surrogate pair) of text, and whether it cut anything.
  function preview(text, max) {
    let out = '';
    let count = 0;
    for (const ch of text) {
      if (count === max) return { text: out, cut: true };
      out += ch;
      count++;
    }
    return { text: out, cut: false };
  }

  // ---- topics ----------------------------------------------------------------

  const COLUMNS = ['delay', 'ready', 'reserved', 'dead'];

  async function refreshTopics() {
    const seq = ++state.topicsSeq;
    let envelope;
    try {
      envelope = await api('stats', {});
    } catch (err) {
      if (seq === state.topicsSeq) panelError('topics-error', err);
      throw err;
    }
    if (seq !== state.topicsSeq) return;
    $('topics-error').textContent = '';
    const stats = envelope.data || {};
    const names = Object.keys(stats).sort();
    const totals = { delay: 0, ready: 0, reserved: 0, dead: 0, total: 0 };
    // Rows are kept per topic and updated in place, so that a refresh does
    // not replace a button under the user's pointer.
    const body = $('topics-body');
    const existing = new Map([...body.children].map((row) => [row.dataset.topic, row]));
    names.forEach((name, index) => {
      const s = stats[name];
      const row = existing.get(name) || topicRow(name);
      existing.delete(name);
      let rowTotal = 0;
      for (const col of COLUMNS) {
        const n = Number(s[col]) || 0;
        rowTotal += n;
        totals[col] += n;
        setTopicCell(row.querySelector(`td[data-col="${col}"]`), name, col, n);
      }
      totals.total += rowTotal;
      setTopicCell(row.querySelector('td[data-col="total"]'), name, 'total', rowTotal);
      if (body.children[index] !== row) body.insertBefore(row, body.children[index] || null);
    });
    for (const gone of existing.values()) gone.remove();
    for (const cell of $('topics-total').querySelectorAll('td')) {
      const n = totals[cell.dataset.col];
      cell.textContent = formatCount(n);
      cell.dataset.value = String(n);
    }
    $('topics-empty').hidden = names.length > 0;
    const now = new Date();
    $('topics-updated').textContent = 'updated ' + now.toLocaleTimeString();
    setStatus('connected · updated ' + now.toLocaleTimeString(), 'ok');

    state.topics = names;
    state.deadCounts = {};
    for (const name of names) state.deadCounts[name] = Number(stats[name].dead) || 0;
    updateDeadTopics();
  }

  function topicRow(name) {
    const row = el('tr', { data: { topic: name } }, el('th', { text: name, attrs: { scope: 'row' } }));
    for (const col of [...COLUMNS, 'total']) row.append(el('td', { class: col === 'total' ? 'num strong' : 'num', data: { col } }));
    return row;
  }

  // setTopicCell shows n in a cell of the topics table, when it changed; a
  // non-zero dead count is a button that lists the topic's dead letters.
  function setTopicCell(cell, topic, col, n) {
    if (cell.dataset.value === String(n)) return;
    cell.dataset.value = String(n);
    cell.classList.toggle('zero', n === 0 && col !== 'total');
    if (col === 'dead' && n > 0) {
      const show = el('button', { type: 'button', class: 'link dead-count', text: formatCount(n),
        title: 'show the dead letters of ' + topic });
      show.addEventListener('click', () => chooseDeadTopic(topic));
      cell.replaceChildren(show);
    } else {
      cell.textContent = formatCount(n);
    }
  }

  // ---- upcoming chart --------------------------------------------------------

  async function refreshUpcoming() {
    let envelope;
    try {
      envelope = await api('upcoming', { minutes: UPCOMING_MINUTES });
    } catch (err) {
      panelError('upcoming-error', err);
      throw err;
    }
    $('upcoming-error').textContent = '';
    state.upcoming = envelope.data;
    drawUpcoming();
  }

  // niceStep picks a round step (1, 2 or 5 times a power of ten) that
  // divides max into at most `ticks` parts.
  function niceStep(max, ticks) {
    const raw = Math.max(max / ticks, 1);
    const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / magnitude;
    const nice = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10;
    return nice * magnitude;
  }

  function drawUpcoming() {
    const data = state.upcoming;
    const box = $('upcoming-chart');
    if (!data || !Array.isArray(data.counts)) {
      box.replaceChildren();
      return;
    }
    const counts = data.counts.map((n) => Number(n) || 0);
    const stepMs = (Number(data.step_seconds) || 60) * 1000;
    const startMs = Number(data.start_ms) || Number(data.start) * 1000;
    const total = counts.reduce((a, b) => a + b, 0);
    const max = Math.max(0, ...counts);
    $('upcoming-total').textContent = plural(total, 'job');

    const width = Math.max(box.clientWidth, 320);
    const height = 210;
    const margin = { top: 12, right: 12, bottom: 26, left: 44 };
    const plotW = width - margin.left - margin.right;
    const plotH = height - margin.top - margin.bottom;
    const step = niceStep(max, 4);
    const yMax = Math.max(step, Math.ceil(max / step) * step);
    const y = (v) => margin.top + plotH - (v / yMax) * plotH;

    const chart = svg('svg', {
      width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
      'aria-label': `${total} jobs due in the next ${counts.length} minutes`,
      'data-total': total, 'data-slots': counts.length,
    });
    const grid = svg('g', { class: 'grid' });
    for (let v = 0; v <= yMax; v += step) {
      grid.append(svg('line', { x1: margin.left, x2: width - margin.right, y1: y(v), y2: y(v) }));
      grid.append(svg('text', { x: margin.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' }, formatCount(v)));
    }
    chart.append(grid);

    const band = plotW / counts.length;
    const bars = svg('g', { class: 'bars' });
    counts.forEach((n, i) => {
      const from = startMs + i * stepMs;
      const top = y(n);
      const bar = svg('rect', {
        x: (margin.left + i * band + band * 0.12).toFixed(2),
        y: top.toFixed(2),
        width: Math.max(band * 0.76, 1).toFixed(2),
        height: Math.max(margin.top + plotH - top, 0).toFixed(2),
        'data-count': n,
        'data-start-ms': from,
      });
      bar.append(svg('title', {}, `${formatClock(from)}–${formatClock(from + stepMs)}: ${plural(n, 'job')}`));
      bars.append(bar);
    });
    chart.append(bars);

    const axis = svg('g', { class: 'x-axis' });
    const baseline = margin.top + plotH;
    axis.append(svg('line', { x1: margin.left, x2: width - margin.right, y1: baseline, y2: baseline }));
    // Ticks at "now" and at round clock times (every 10 minutes of a one-hour
    // chart), placed where that time falls rather than at a slot's start.
    const endMs = startMs + counts.length * stepMs;
    const tickMs = (counts.length * stepMs > 2 * 3600e3 ? 60 : counts.length * stepMs > 1800e3 ? 10 : 5) * 60e3;
    const xOf = (ms) => margin.left + ((ms - startMs) / stepMs) * band;
    const ticks = [{ x: xOf(startMs), label: 'now', anchor: 'start' }];
    const minGap = 46; // px between labels
    for (let ms = Math.ceil(startMs / tickMs) * tickMs; ms <= endMs; ms += tickMs) {
      const x = xOf(ms);
      if (x - ticks[ticks.length - 1].x < minGap || width - margin.right - x < minGap / 2) continue;
      ticks.push({ x, label: formatClock(ms), anchor: 'middle' });
    }
    for (const tick of ticks) {
      axis.append(svg('line', { x1: tick.x, x2: tick.x, y1: baseline, y2: baseline + 4 }));
      axis.append(svg('text', { x: tick.x, y: baseline + 17, 'text-anchor': tick.anchor, class: 'axis' }, tick.label));
    }
    chart.append(axis);

    if (total === 0) {
      chart.append(svg('text', { x: margin.left + plotW / 2, y: margin.top + plotH / 2, 'text-anchor': 'middle',
        class: 'empty-chart' }, 'nothing due in the next hour'));
    }
    box.replaceChildren(chart);
  }

  let resizeFrame = 0;
  window.addEventListener('resize', () => {
    cancelAnimationFrame(resizeFrame);
    resizeFrame = requestAnimationFrame(drawUpcoming);
  });

  // ---- dead letters ----------------------------------------------------------

  // updateDeadTopics refills the topic list of the dead-letter panel and,
  // until the user picks one, selects the first topic with dead letters.
  function updateDeadTopics() {
    if (!state.deadTopicChosen || !state.topics.includes(state.deadTopic)) {
      const withDead = state.topics.find((name) => state.deadCounts[name] > 0);
      const next = withDead || (state.topics.includes(state.deadTopic) ? state.deadTopic : state.topics[0] || '');
      if (next !== state.deadTopic) setDeadTopic(next);
    }
    const select = $('dead-topic');
    const options = state.topics.map((name) => {
      const dead = state.deadCounts[name];
      return el('option', { text: dead > 0 ? `${name} (${formatCount(dead)})` : name, attrs: { value: name } });
    });
    const wanted = JSON.stringify(options.map((o) => [o.value, o.textContent]));
    if (select.dataset.options !== wanted) {
      select.replaceChildren(...options);
      select.dataset.options = wanted;
    }
    select.value = state.deadTopic;
    select.disabled = state.topics.length === 0;
  }

  function setDeadTopic(name) {
    state.deadTopic = name;
    state.deadOffset = 0;
  }

  function chooseDeadTopic(name) {
    // Notices name their topic, so they survive the page's own switches
    // (when a topic empties), but not the user's.
    if (name !== state.deadTopic) $('dead-notice').textContent = '';
    setDeadTopic(name);
    state.deadTopicChosen = true;
    $('dead-topic').value = name;
    refreshDead().catch(() => {});
    $('dead-topic').scrollIntoView({ block: 'nearest' });
  }

  $('dead-topic').addEventListener('change', (event) => chooseDeadTopic(event.target.value));

  async function refreshDead() {
    const seq = ++state.deadSeq;
    const topic = state.deadTopic;
    if (!topic) {
      renderDead(topic, 0, []);
      return;
    }
    let envelope;
    try {
      envelope = await api('dead/list', { topic, offset: state.deadOffset, limit: DEAD_PAGE_SIZE });
    } catch (err) {
      if (seq === state.deadSeq) panelError('dead-error', err);
      throw err;
    }
    if (seq !== state.deadSeq) return;
    $('dead-error').textContent = '';
    const total = Number(envelope.data.total) || 0;
    const jobs = envelope.data.jobs || [];
    if (jobs.length === 0 && total > 0 && state.deadOffset > 0) {
      // The page emptied (kicked or deleted elsewhere): show the last one.
      state.deadOffset = Math.floor((total - 1) / DEAD_PAGE_SIZE) * DEAD_PAGE_SIZE;
      return refreshDead();
    }
    renderDead(topic, total, jobs);
  }

  function renderDead(topic, total, jobs) {
    state.deadTotal = total;
    const shown = JSON.stringify([topic, state.deadOffset, total, jobs.map((j) => [j.id, j.dead_at_ms, j.attempts, j.reason])]);
    if (shown === state.deadRendered) {
      // Unchanged: keep the rows the user may be about to click, and only
      // bring their ages up to date.
      for (const cell of $('dead-body').querySelectorAll('td[data-dead-at-ms]')) {
        cell.textContent = formatRelative(Number(cell.dataset.deadAtMs));
      }
      return;
    }
    state.deadRendered = shown;

    const rows = jobs.map((job) => {
      const idButton = el('button', { type: 'button', class: 'link mono', text: job.id, title: 'look this job up' });
      idButton.addEventListener('click', () => lookUp(job.id));
      const body = preview(job.body || '', ROW_PREVIEW_CHARS);
      const kick = el('button', { type: 'button', class: 'small kick', text: 'Kick', title: 'back to ready, attempts reset' });
      kick.addEventListener('click', () => kickDead(topic, job.id));
      const del = el('button', { type: 'button', class: 'small danger delete', text: 'Delete' });
      del.addEventListener('click', () => deleteDead(topic, job.id));
      return el('tr', { data: { id: job.id } },
        el('td', { class: 'id' }, idButton),
        el('td', { text: formatRelative(job.dead_at_ms), title: formatDateTime(job.dead_at_ms),
          data: { deadAtMs: job.dead_at_ms } }),
        el('td', { class: 'reason', text: (job.reason || 'unknown') + ' · ' + plural(job.attempts, 'attempt'),
          title: job.reason || '' }),
        el('td', { class: 'body mono', text: body.text + (body.cut ? '…' : ''), title: body.text }),
        el('td', { class: 'actions' }, kick, del));
    });
    $('dead-body').replaceChildren(...rows);

    const empty = $('dead-empty');
    empty.hidden = jobs.length > 0;
    empty.textContent = topic ? `No dead letters in ${topic}.` : 'No topic holds jobs.';
    const first = jobs.length ? state.deadOffset + 1 : 0;
    $('dead-range').textContent = total ? `${formatCount(first)}–${formatCount(state.deadOffset + jobs.length)} of ${formatCount(total)}` : '';
    $('dead-prev').disabled = state.deadOffset === 0;
    $('dead-next').disabled = state.deadOffset + jobs.length >= total;
    $('dead-kick-all').disabled = total === 0;
    $('dead-delete-all').disabled = total === 0;
  }

  $('dead-prev').addEventListener('click', () => {
    state.deadTopicChosen = true;
    state.deadOffset = Math.max(0, state.deadOffset - DEAD_PAGE_SIZE);
    refreshDead().catch(() => {});
  });
  $('dead-next').addEventListener('click', () => {
    state.deadTopicChosen = true;
    state.deadOffset += DEAD_PAGE_SIZE;
    refreshDead().catch(() => {});
  });

  // confirmAction asks in the page and resolves to true when the user
  // clicks OK; Cancel and Escape resolve to false.
  function confirmAction(message, okLabel) {
    const dialog = $('confirm-dialog');
    if (typeof dialog.showModal !== 'function') return Promise.resolve(window.confirm(message));
    $('confirm-text').textContent = message;
    $('confirm-ok').textContent = okLabel;
    dialog.returnValue = '';
    return new Promise((resolve) => {
      dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
      dialog.showModal();
      $('confirm-cancel').focus();
    });
  }

  // deadAction runs a confirmed change, reports it and refreshes the page.
  async function deadAction(question, okLabel, call, report) {
    if (!(await confirmAction(question, okLabel))) return;
    state.deadTopicChosen = true; // stay on this topic, even once it is empty
    $('dead-notice').textContent = '';
    try {
      $('dead-notice').textContent = report(await call());
      $('error-banner').hidden = true;
    } catch (err) {
      if (!(err instanceof AuthNeeded)) showBanner(err.message);
    }
    state.deadRendered = '';
    await refreshNow();
  }

  function kickDead(topic, id) {
    return deadAction(`Kick dead letter “${id}” of ${topic} back to ready? Its attempts start again from 0.`, 'Kick',
      () => api('dead/kick', { topic, id }),
      (envelope) => (envelope.data.kicked.length ? `Kicked ${id} of ${topic}: it is ready again.` : `${id} is no longer a dead letter of ${topic}.`));
  }

  function deleteDead(topic, id) {
    return deadAction(`Delete dead letter “${id}” of ${topic}? This cannot be undone.`, 'Delete',
      () => api('dead/delete', { topic, id }),
      (envelope) => (envelope.data.deleted ? `Deleted ${id} of ${topic}.` : `${id} of ${topic} was already gone.`));
  }

  $('dead-kick-all').addEventListener('click', () => {
    const topic = state.deadTopic;
    deadAction(`Kick all ${formatCount(state.deadTotal)} dead letters of ${topic} back to ready?`, 'Kick all',
      async () => {
        let kicked = 0;
        for (;;) {
          const envelope = await api('dead/kick', { topic, count: DEAD_KICK_BATCH });
          kicked += envelope.data.kicked.length;
          if (envelope.data.kicked.length < DEAD_KICK_BATCH) return kicked;
        }
      },
      (kicked) => `Kicked ${formatCount(kicked)} dead letters of ${topic}.`);
  });

  $('dead-delete-all').addEventListener('click', () => {
    const topic = state.deadTopic;
    deadAction(`Delete all ${formatCount(state.deadTotal)} dead letters of ${topic}? This cannot be undone.`, 'Delete all',
      () => api('dead/delete', { topic, all: true }),
      (envelope) => `Deleted ${formatCount(envelope.data.deleted)} dead letters of ${topic}.`);
  });

  // ---- job lookup --------------------------------------------------------------

  function field(name, label, value, extra) {
    const dd = el('dd', { data: { field: name } }, value);
    if (extra) dd.append(' ', el('span', { class: 'muted', text: extra }));
    return [el('dt', { text: label }), dd];
  }

  async function lookUp(id) {
    $('lookup-id').value = id;
    $('lookup-error').textContent = '';
    $('lookup-message').textContent = 'looking up…';
    let envelope;
    try {
      envelope = await api('get', { id });
    } catch (err) {
      $('lookup-message').textContent = '';
      panelError('lookup-error', err);
      return;
    }
    const job = envelope.data;
    const result = $('lookup-result');
    const bodyBox = $('lookup-body');
    if (!job) {
      $('lookup-message').textContent = `No job with id “${id}”.`;
      result.hidden = true;
      bodyBox.hidden = true;
      return;
    }
    // attempts_limit is the limit the server enforces (a retry schedule
    // without max_attempts has one); an older server sends max_attempts only.
    const limit = job.attempts_limit ?? job.max_attempts;
    const parts = [
      ...field('id', 'Id', el('span', { class: 'mono', text: job.id })),
      ...field('topic', 'Topic', job.topic),
      ...field('state', 'State', el('span', { class: 'badge state-' + job.state, text: job.state })),
      ...field('attempts', 'Attempts', String(job.attempts), limit ? `of at most ${limit}` : 'no limit'),
      ...field('due', 'Due', formatDateTime(job.delay_ms), job.delay_ms ? formatRelative(job.delay_ms) : ''),
      ...field('ttr', 'TTR', formatSeconds(job.ttr)),
      ...field('created', 'Created', formatDateTime(job.created_at_ms), job.created_at_ms ? formatRelative(job.created_at_ms) : ''),
    ];
    if (job.retry && job.retry.length) {
      parts.push(...field('retry', 'Retry after', job.retry.map((s) => s + ' s').join(', ')));
    }
    if (job.lease_until_ms) {
      parts.push(...field('lease', 'Lease until', formatDateTime(job.lease_until_ms), formatRelative(job.lease_until_ms)));
    }
    if (job.state === 'dead') {
      parts.push(...field('dead-at', 'Dead since', formatDateTime(job.dead_at_ms)));
      parts.push(...field('dead-reason', 'Dead because', job.dead_reason || 'unknown'));
    }
    const body = preview(job.body || '', BODY_PREVIEW_CHARS);
    const bodyLength = [...(job.body || '')].length;
    parts.push(...field('body-size', 'Body', body.cut
      ? `first ${formatCount(BODY_PREVIEW_CHARS)} of ${formatCount(bodyLength)} characters`
      : `${formatCount(bodyLength)} characters`));
    result.replaceChildren(...parts);
    result.hidden = false;
    bodyBox.textContent = body.text + (body.cut ? '\n…' : '');
    bodyBox.hidden = bodyLength === 0;
    $('lookup-message').textContent = '';
  }

  $('lookup-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const id = $('lookup-id').value.trim();
    if (id) lookUp(id);
  });

  // ---- refresh loop --------------------------------------------------------------

  let refreshing = null; // the round in flight
  let queued = null; // the round that starts when it ends

  // refreshNow reloads every panel, then schedules the next round when
  // auto-refresh is on. A call during a round gets a new round after it,
  // so that what a user just changed is always shown.
  function refreshNow() {
    clearTimeout(state.timer);
    if (state.waitingForToken) return Promise.resolve();
    if (!refreshing) {
      refreshing = refreshRound().finally(() => {
        refreshing = null;
      });
      return refreshing;
    }
    if (!queued) {
      queued = refreshing.then(() => {
        queued = null;
        return refreshNow();
      });
    }
    return queued;
  }

  async function refreshRound() {
    const results = await Promise.allSettled([
      refreshTopics().then(refreshDead),
      refreshUpcoming(),
    ]);
    const failed = results.find((r) => r.status === 'rejected' && !(r.reason instanceof AuthNeeded));
    if (failed && !state.waitingForToken) setStatus('error: ' + failed.reason.message, 'error');
    schedule();
  }

  function schedule() {
    clearTimeout(state.timer);
    if ($('autorefresh').checked && !state.waitingForToken) {
      state.timer = setTimeout(() => {
        if (document.hidden) schedule(); // no polling from a background tab
        else refreshNow();
      }, REFRESH_MS);
    }
  }

  $('autorefresh').addEventListener('change', schedule);
  $('refresh-now').addEventListener('click', () => refreshNow());
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) refreshNow();
  });

  useToken(state.token);
  refreshNow();
})();
