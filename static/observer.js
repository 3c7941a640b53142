// Crosstalk observer client: swaps server-rendered fragments into the page,
// follows the live event stream, and shows timestamps in the viewer's zone.
// It never writes group data; the only POSTs are the two Storage actions.
(function () {
  'use strict';

  var panel = document.getElementById('panel');
  var shell = document.getElementById('shell');
  var liveStatus = document.getElementById('live-status');
  var csrfMeta = document.querySelector('meta[name="csrf-token"]');
  var csrfToken = csrfMeta ? csrfMeta.getAttribute('content') : '';
  var eventTypes = ['snapshot', 'message.created', 'group.changed', 'group.deleted', 'member.changed', 'wakeup.changed', 'tool_call.completed'];

  function pad(n, width) {
    var s = String(Math.abs(n));
    while (s.length < (width || 2)) s = '0' + s;
    return s;
  }

  function zoneName(date) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: 'short' }).formatToParts(date);
      for (var i = 0; i < parts.length; i++) if (parts[i].type === 'timeZoneName') return parts[i].value;
    } catch (e) { /* older engines: offset only */ }
    return '';
  }

  function formatLocal(date, format) {
    var day = date.getFullYear() + '-' + pad(date.getMonth() + 1) + '-' + pad(date.getDate());
    if (format === 'date') return day;
    var clock = pad(date.getHours()) + ':' + pad(date.getMinutes());
    if (format === 'minute') return pad(date.getMonth() + 1) + '-' + pad(date.getDate()) + ' ' + clock;
    if (format === 'second') return day + ' ' + clock + ':' + pad(date.getSeconds());
    if (format === 'clock') return clock + ':' + pad(date.getSeconds());
    var offset = -date.getTimezoneOffset();
    var sign = offset < 0 ? '-' : '+';
    var zone = zoneName(date);
    return day + ' ' + clock + ':' + pad(date.getSeconds()) + (zone ? ' ' + zone : '') +
      ' (' + sign + pad(Math.floor(Math.abs(offset) / 60)) + pad(Math.abs(offset) % 60) + ')';
  }

  // localize rewrites server-rendered timestamps into the viewer's time zone.
  function localize(root) {
    (root || document).querySelectorAll('time[datetime]:not([data-local])').forEach(function (node) {
      var date = new Date(node.getAttribute('datetime'));
      if (isNaN(date.getTime())) return;
      // In table cells a compact local time fits; the full one is on hover.
      var compact = node.closest('.cell-time');
      node.title = compact ? formatLocal(date) + ' · ' + node.getAttribute('datetime') : node.getAttribute('datetime');
      node.textContent = formatLocal(date, node.closest('.delivery') ? 'clock' : compact ? 'second' : '');
      node.setAttribute('data-local', '1');
    });
    (root || document).querySelectorAll('[data-ts]:not([data-local])').forEach(function (node) {
      var date = new Date(node.getAttribute('data-ts'));
      if (isNaN(date.getTime())) return;
      node.textContent = formatLocal(date, node.getAttribute('data-ts-format')) + (node.getAttribute('data-ts-suffix') || '');
      node.setAttribute('data-local', '1');
    });
  }

  function fetchText(url, options) {
    var init = options || {};
    init.credentials = 'same-origin';
    init.headers = init.headers || {};
    init.headers['Accept'] = 'text/html';
    return fetch(url, init).then(function (response) {
      return response.text().then(function (text) { return { ok: response.ok, status: response.status, text: text }; });
    });
  }

  function currentView() {
    var view = panel.querySelector('[data-view-name]');
    return view ? view.getAttribute('data-view-name') : '';
  }

  function setActiveNav(name) {
    document.querySelectorAll('.rail-nav [data-nav]').forEach(function (button) {
      var on = button.getAttribute('data-nav') === name;
      button.classList.toggle('is-active', on);
      if (on) button.setAttribute('aria-current', 'page'); else button.removeAttribute('aria-current');
    });
  }

  // stateURL is the address of what the panel shows: its view, the open
  // chat and the analytics filters, so reload, Back and a shared link all
  // come back to it.
  function stateURL() {
    var view = currentView();
    var params = new URLSearchParams();
    if (view && view !== 'overview') params.set('view', view);
    var chat = panel.querySelector('.chats [data-group-id]:not(button)');
    if (view === 'chats' && chat) params.set('group_id', chat.getAttribute('data-group-id'));
    var form = panel.querySelector('form[data-get-form]');
    if (view === 'analytics' && form) {
      new FormData(form).forEach(function (value, key) {
        if (value !== '' && !(key === 'range_value' && value === '0')) params.set(key, value);
      });
    }
    var query = params.toString();
    return '/' + (query ? '?' + query : '');
  }

  // fragmentURL maps a page address to the fragment that renders it.
  function fragmentURL(location) {
    var params = new URLSearchParams(location.search);
    var view = params.get('view') || 'overview';
    params.delete('view');
    if (['overview', 'chats', 'analytics', 'storage'].indexOf(view) < 0) view = 'overview';
    var query = params.toString();
    return '/fragments/' + view + (query ? '?' + query : '');
  }

  function viewLabel(name) {
    var button = document.querySelector('.rail-nav [data-nav="' + name + '"]');
    return button ? button.getAttribute('title') : 'Observer';
  }

  function afterSwap(root) {
    localize(root);
    var view = panel.querySelector('[data-view-name]');
    if (view) {
      document.getElementById('page-title').textContent = view.getAttribute('data-title') || 'Observer';
      document.getElementById('page-description').textContent = view.getAttribute('data-description') || '';
      document.title = (view.getAttribute('data-title') || 'Observer') + ' · Crosstalk observer';
      setActiveNav(view.getAttribute('data-view-name'));
      markQuickRange();
    }
    var list = document.getElementById('message-list');
    if (list && !list.hasAttribute('data-scrolled')) {
      list.scrollTop = list.scrollHeight;
      list.setAttribute('data-scrolled', '1');
    }
  }

  var loadSerial = 0;
  var navigating = 0;

  // userIsReading reports whether the user is reading a chart's value (its
  // tooltip shows, or the chart has keyboard focus) or is in the analytics
  // filters. A live refresh waits until the user is done, also one whose
  // answer arrives meanwhile: replacing the panel would take the tooltip,
  // the focus or a half-set filter with it.
  function userIsReading() {
    var active = document.activeElement;
    return Boolean(panel.querySelector('[data-chart] .is-tipped') ||
      (active && active.closest && panel.contains(active) && active.closest('[data-chart], form[data-get-form]')));
  }

  // loadPanel replaces the whole view; a later load wins over an earlier one.
  // A live refresh (keepScroll) is skipped while the user's own navigation
  // is in flight, so it can never bring back the view the user just left.
  // A navigation records the new state in the URL: history is "push" (the
  // default), "replace" or "none" (Back and Forward, which already moved).
  function loadPanel(url, keepScroll, history) {
    if (keepScroll && navigating) return Promise.resolve();
    var serial = ++loadSerial;
    if (!keepScroll) navigating++;
    var settle = function () { if (!keepScroll) navigating--; };
    var scrolls = {};
    if (keepScroll) {
      panel.querySelectorAll('.scroll').forEach(function (node, index) { scrolls[index] = node.scrollTop; });
    }
    return fetchText(url).then(function (result) {
      settle();
      if (serial !== loadSerial) return;
      if (keepScroll && userIsReading()) { refreshView(currentView()); return; }
      panel.innerHTML = result.text;
      panel.classList.remove('is-stale');
      failedURL = '';
      if (keepScroll) {
        panel.querySelectorAll('.scroll').forEach(function (node, index) {
          if (scrolls[index] !== undefined) node.scrollTop = scrolls[index];
        });
      }
      afterSwap(panel);
      if (!keepScroll) recordState(history || 'push');
    }).catch(function () {
      settle();
      if (serial !== loadSerial || keepScroll) return;
      showUnreachable(url);
    });
  }

  function recordState(history) {
    var next = stateURL();
    var here = window.location.pathname + window.location.search;
    if (history === 'none') return;
    if (history === 'push' && next !== here) window.history.pushState({ crosstalk: 1 }, '', next);
    else window.history.replaceState({ crosstalk: 1 }, '', next);
  }

  // showUnreachable keeps the last view visible (marked stale) under a
  // banner that names the view that could not be opened; the navigation is
  // retried when the live stream reconnects.
  var failedURL = '';
  function showUnreachable(url) {
    var name = (url.match(/^\/fragments\/([a-z]+)/) || [])[1] || 'overview';
    failedURL = url;
    setActiveNav(name);
    document.getElementById('page-title').textContent = viewLabel(name) + ' · not loaded';
    document.getElementById('page-description').textContent = 'The observer could not be reached; showing the last loaded view.';
    panel.classList.add('is-stale');
    var banner = panel.querySelector('.unreachable');
    if (!banner) {
      banner = document.createElement('p');
      banner.className = 'banner unreachable';
      banner.setAttribute('role', 'alert');
      panel.insertBefore(banner, panel.firstChild);
    }
    banner.textContent = 'Could not open ' + viewLabel(name) + ': the observer could not be reached. It may have stopped; this page retries when it is back.';
  }

  function loadOlder(button) {
    var list = document.getElementById('message-list');
    var before = list ? list.scrollHeight - list.scrollTop : 0;
    button.disabled = true;
    fetchText(button.getAttribute('data-get')).then(function (result) {
      var holder = document.createElement('div');
      holder.innerHTML = result.text;
      localize(holder);
      var fragment = document.createDocumentFragment();
      while (holder.firstChild) fragment.appendChild(holder.firstChild);
      button.replaceWith(fragment);
      if (list) list.scrollTop = list.scrollHeight - before;
    }).catch(function () { button.disabled = false; });
  }

  // Quick ranges fill the range fields and apply them, like typing would.
  function markQuickRange() {
    var form = panel.querySelector('form[data-get-form]');
    if (!form || !form.range_value) return;
    form.querySelectorAll('[data-range-value]').forEach(function (button) {
      var value = form.range_value.value.trim() || '0';
      var on = button.getAttribute('data-range-value') === value &&
        (value === '0' || button.getAttribute('data-range-unit') === form.range_unit.value);
      button.setAttribute('aria-pressed', String(on));
    });
  }

  document.addEventListener('click', function (event) {
    var quick = event.target.closest('[data-range-value]');
    if (quick && quick.form) {
      quick.form.range_value.value = quick.getAttribute('data-range-value');
      quick.form.range_unit.value = quick.getAttribute('data-range-unit');
      applyFilters(quick.form);
      return;
    }
    var toggle = event.target.closest('#rail-toggle');
    if (toggle) {
      var collapsed = shell.classList.toggle('is-collapsed');
      toggle.setAttribute('aria-expanded', String(!collapsed));
      toggle.setAttribute('aria-label', collapsed ? 'Expand sidebar' : 'Collapse sidebar');
      toggle.title = toggle.getAttribute('aria-label');
      try { localStorage.setItem('crosstalk-rail', collapsed ? 'collapsed' : 'expanded'); } catch (e) { /* private mode */ }
      return;
    }
    var post = event.target.closest('[data-post]');
    if (post) {
      event.preventDefault();
      storageAction(post);
      return;
    }
    var control = event.target.closest('[data-get]');
    if (!control || control.closest('form')) return;
    event.preventDefault();
    if (control.getAttribute('data-swap') === 'outer') {
      loadOlder(control);
      return;
    }
    if (control.hasAttribute('data-nav')) setActiveNav(control.getAttribute('data-nav'));
    loadPanel(control.getAttribute('data-get'));
  });

  document.addEventListener('keydown', function (event) {
    if (event.key !== 'Enter' && event.key !== ' ') return;
    var row = event.target.closest('[role="link"][data-get]');
    if (!row) return;
    event.preventDefault();
    row.click();
  });

  var filterTimer;
  function applyFilters(form) {
    var params = new URLSearchParams(new FormData(form));
    loadPanel(form.getAttribute('data-get-form') + '?' + params.toString());
  }
  document.addEventListener('change', function (event) {
    var form = event.target.closest('form[data-get-form]');
    if (form) applyFilters(form);
  });
  document.addEventListener('input', function (event) {
    var form = event.target.closest('form[data-get-form]');
    if (!form || event.target.name !== 'range_value') return;
    clearTimeout(filterTimer);
    filterTimer = setTimeout(function () { applyFilters(form); }, 400);
  });
  document.addEventListener('submit', function (event) {
    var form = event.target.closest('form[data-get-form]');
    if (!form) return;
    event.preventDefault();
    applyFilters(form);
  });

  function storageAction(button) {
    var confirmText = button.getAttribute('data-confirm');
    if (confirmText && !window.confirm(confirmText)) return;
    var headers = {};
    if (button.getAttribute('data-post') === '/api/storage/delete-history') headers['X-Crosstalk-Confirm'] = 'DELETE AUDIT HISTORY';
    button.disabled = true;
    postWithToken(button.getAttribute('data-post'), headers, false).then(function (result) {
      return loadPanel('/fragments/storage').then(function () {
        var status = document.getElementById('maintenance-status');
        if (status) status.innerHTML = result.text;
        else panel.insertAdjacentHTML('beforeend', result.text);
      });
    }).catch(function () {
      button.disabled = false;
    });
  }

  // postWithToken posts with the page's CSRF token. An observer restarted
  // on this port (the page reconnects by itself) has a new one: on a refusal
  // the current token is read from a fresh page, and the post tried once more.
  function postWithToken(url, headers, retried) {
    headers['X-CSRF-Token'] = csrfToken;
    return fetchText(url, { method: 'POST', headers: headers }).then(function (result) {
      if (result.status !== 403 || retried) return result;
      return fetchText('/').then(function (page) {
        var fresh = /<meta name="csrf-token" content="([^"]*)"/.exec(page.text);
        if (!fresh || fresh[1] === csrfToken) return result;
        csrfToken = fresh[1];
        return postWithToken(url, headers, true);
      });
    });
  }

  // Live updates. Coalesce bursts: one refresh per view per short window.
  var timers = {};
  function soon(key, fn, delay) {
    if (timers[key]) return;
    timers[key] = setTimeout(function () { timers[key] = null; fn(); }, delay || 200);
  }

  function openChat() {
    return panel.querySelector('.chat[data-group-id]');
  }

  function lastShownMessageId(list) {
    var nodes = list.querySelectorAll('.message[data-message-id]');
    return nodes.length ? Number(nodes[nodes.length - 1].getAttribute('data-message-id')) : 0;
  }

  function refreshChat(groupId) {
    loadPanel('/fragments/chats?group_id=' + encodeURIComponent(groupId), true);
  }

  // appendMessages fetches every message between the last shown and latest,
  // so a burst inside one poll interval leaves no gap. One asked for while
  // another runs is kept (the newest) and run once that one is done.
  var appending = false;
  var queued = null;
  function appendQueued() {
    appending = false;
    var next = queued;
    queued = null;
    if (next) Promise.resolve().then(function () { appendMessages(next[0], next[1]); });
  }
  function appendMessages(groupId, latest) {
    if (appending) { queued = [groupId, latest]; return; }
    var chat = openChat();
    var list = document.getElementById('message-list');
    if (!chat || !list || chat.getAttribute('data-group-id') !== groupId) return;
    var last = lastShownMessageId(list);
    if (!latest || latest <= last) return;
    if (latest - last > 50) { refreshChat(groupId); return; }
    appending = true;
    var ids = [];
    for (var id = last + 1; id <= latest; id++) ids.push(id);
    Promise.all(ids.map(function (id) {
      return fetchText('/fragments/message?group_id=' + encodeURIComponent(groupId) + '&message_id=' + id)
        .then(function (result) { return result.ok ? result.text : ''; });
    })).then(function (fragments) {
      appendQueued();
      var current = document.getElementById('message-list');
      if (current !== list) return;
      var nearBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
      var empty = list.querySelector(':scope > .notice');
      fragments.forEach(function (html) {
        if (!html) return;
        var holder = document.createElement('div');
        holder.innerHTML = html;
        var article = holder.querySelector('.message[data-message-id]');
        if (!article || list.querySelector('.message[data-message-id="' + article.getAttribute('data-message-id') + '"]')) return;
        if (empty) { empty.remove(); empty = null; }
        localize(holder);
        article.classList.add('is-new');
        list.appendChild(article);
      });
      if (nearBottom) list.scrollTop = list.scrollHeight;
    }).catch(appendQueued);
  }

  function refreshChatSide(groupId) {
    var chat = openChat();
    if (!chat || chat.getAttribute('data-group-id') !== groupId) return;
    fetchText('/fragments/chat?group_id=' + encodeURIComponent(groupId)).then(function (result) {
      var holder = document.createElement('div');
      holder.innerHTML = result.text;
      var fresh = holder.querySelector('.chat[data-group-id]');
      var current = openChat();
      if (!fresh || !current || current.getAttribute('data-group-id') !== groupId) {
        if (!fresh) refreshChat(groupId);
        return;
      }
      localize(holder);
      var side = current.querySelector('.chat-side');
      var header = current.querySelector('.chat-header');
      if (side) side.replaceWith(fresh.querySelector('.chat-side'));
      if (header) header.replaceWith(fresh.querySelector('.chat-header'));
      // A read or a delivery also moves the receipts of the messages shown.
      fresh.querySelectorAll('.message[data-message-id] > footer').forEach(function (footer) {
        var shown = current.querySelector('.message[data-message-id="' + footer.parentNode.getAttribute('data-message-id') + '"] > footer');
        if (shown) shown.replaceWith(footer);
      });
    });
  }

  function refreshView(name) {
    if (currentView() !== name) return;
    soon(name, function () {
      if (currentView() !== name) return;
      if (name === 'analytics') {
        if (userIsReading()) { refreshView(name); return; } // look again soon
        var form = panel.querySelector('form[data-get-form]');
        if (form) { loadPanel(form.getAttribute('data-get-form') + '?' + new URLSearchParams(new FormData(form)).toString(), true); return; }
      }
      loadPanel('/fragments/' + name, true);
    }, 250);
  }

  function markPicker(groupId) {
    var button = panel.querySelector('.chat-picker button[data-group-id="' + groupId + '"]');
    if (button && !button.classList.contains('is-active')) button.classList.add('has-new');
  }

  function handle(type, raw) {
    var data = {};
    try { data = JSON.parse(raw || '{}'); } catch (e) { return; }
    var view = currentView();
    var chat = openChat();
    var chatGroup = chat ? chat.getAttribute('data-group-id') : '';
    switch (type) {
      case 'snapshot':
        // A stream opens with it, also after a drop, and replays nothing: reload what may have changed meanwhile.
        if (view && view !== 'chats') refreshView(view);
        if (chatGroup && data.groups && data.groups[chatGroup]) {
          appendMessages(chatGroup, data.groups[chatGroup].latest_message_id);
          refreshChatSide(chatGroup);
        }
        if (chatGroup && data.groups && !data.groups[chatGroup]) refreshChat(chatGroup);
        break;
      case 'message.created':
        if (chatGroup === data.group_id) appendMessages(data.group_id, data.message_id);
        else if (view === 'chats') markPicker(data.group_id);
        refreshView('overview');
        break;
      case 'member.changed':
      case 'wakeup.changed':
        if (chatGroup === data.group_id) refreshChatSide(data.group_id);
        refreshView('overview');
        break;
      case 'group.changed':
        if (view === 'chats') soon('chats', function () {
          var open = openChat();
          refreshChat(open ? open.getAttribute('data-group-id') : data.group_id);
        }, 250);
        refreshView('overview');
        break;
      case 'group.deleted':
        if (view === 'chats') soon('chats', function () {
          var open = openChat();
          var keep = open && open.getAttribute('data-group-id') !== data.group_id ? open.getAttribute('data-group-id') : '';
          loadPanel('/fragments/chats' + (keep ? '?group_id=' + encodeURIComponent(keep) : ''), true);
        }, 250);
        refreshView('overview');
        break;
      case 'tool_call.completed':
        refreshView('overview');
        refreshView('analytics');
        refreshView('storage');
        break;
    }
  }

  function setLive(state) {
    if (!liveStatus) return;
    if (state === 'open' && failedURL) loadPanel(failedURL);
    liveStatus.setAttribute('data-state', state);
    liveStatus.textContent = state === 'open' ? 'Live' : state === 'error' ? 'Reconnecting' : 'Connecting';
  }

  // All tabs of one browser share one /events stream through a SharedWorker;
  // without one, each tab opens its own EventSource.
  function connect() {
    if (window.SharedWorker) {
      try {
        var worker = new SharedWorker('/static/observer-events-worker.js', { name: 'crosstalk-events' });
        worker.port.onmessage = function (event) {
          var message = event.data || {};
          if (message.type === 'status') { setLive(message.data); return; }
          handle(message.type, message.data);
        };
        worker.port.start();
        worker.port.postMessage({ command: 'hello' });
        window.addEventListener('pagehide', function () {
          try { worker.port.postMessage({ command: 'bye' }); worker.port.close(); } catch (e) { /* already gone */ }
        });
        return;
      } catch (e) { /* fall back to a private stream */ }
    }
    var source = new EventSource('/events');
    source.onopen = function () { setLive('open'); };
    source.onerror = function () { setLive('error'); };
    eventTypes.forEach(function (type) {
      source.addEventListener(type, function (event) { setLive('open'); handle(type, event.data); });
    });
  }

  try {
    if (localStorage.getItem('crosstalk-rail') === 'collapsed') {
      shell.classList.add('is-collapsed');
      var toggle = document.getElementById('rail-toggle');
      toggle.setAttribute('aria-expanded', 'false');
      toggle.setAttribute('aria-label', 'Expand sidebar');
      toggle.title = 'Expand sidebar';
    }
  } catch (e) { /* storage unavailable */ }
  afterSwap(panel);
  // The server renders the view the URL names; an older server or an
  // address it does not know shows Overview, so load the right one here.
  var wanted = new URLSearchParams(window.location.search).get('view') || 'overview';
  if (wanted !== currentView()) loadPanel(fragmentURL(window.location), false, 'replace');
  else recordState('replace');
  window.addEventListener('popstate', function () {
    loadPanel(fragmentURL(window.location), false, 'none');
  });
  connect();
  window.crosstalkObserver = { handle: handle, loadPanel: loadPanel };
})();
