// Crosstalk observer tooltips: exact values of chart marks and full names of
// truncated cells, shown at once on hover, keyboard focus and tap. The marks
// keep their SVG <title> (and cells their title attribute) for screen
// readers and pages without JavaScript; while our tooltip shows, the native
// one is stashed so the two never appear together.
(function () {
  'use strict';

  var tip = document.createElement('div');
  tip.id = 'tip';
  tip.className = 'tip';
  tip.setAttribute('role', 'tooltip');
  tip.hidden = true;
  document.body.appendChild(tip);

  var owner = null;     // the element whose tooltip is showing
  var stashed = null;   // { node, attr } of the native title we hid
  var hideTimer = 0;

  // markOf returns the chart mark at node, or the truncated name/cell.
  function targetOf(node) {
    if (!node || !node.closest) return null;
    var mark = node.closest('[data-chart] .mark');
    if (mark) return mark;
    var named = node.closest('#panel [data-tip-id], #panel td[title], #panel .legend td[title], #panel .toplist [title]');
    return named || null;
  }

  function isTruncated(el) {
    return el.scrollWidth > el.clientWidth + 1;
  }

  // textOf reads the full text from a <title> child or a title attribute,
  // whichever is there or stashed.
  function textOf(el) {
    if (stashed && stashed.owner === el) return stashed.text;
    var title = el.querySelector(':scope > title');
    if (title) return title.textContent;
    return el.getAttribute('title') || el.getAttribute('aria-label') || el.textContent.trim();
  }

  function stash(el) {
    var title = el.querySelector(':scope > title');
    if (title) {
      stashed = { owner: el, text: title.textContent, restore: function () { title.textContent = stashed.text; } };
      title.textContent = '';
      return;
    }
    if (el.hasAttribute('title')) {
      var text = el.getAttribute('title');
      stashed = { owner: el, text: text, restore: function () { el.setAttribute('title', text); } };
      el.removeAttribute('title');
      return;
    }
    stashed = { owner: el, text: textOf(el), restore: function () {} };
  }

  function unstash() {
    if (stashed) { stashed.restore(); stashed = null; }
  }

  function copy(text, button) {
    var done = function () { button.textContent = 'Copied'; };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text) && done(); });
    } else if (fallbackCopy(text)) {
      done();
    }
  }

  function fallbackCopy(text) {
    var area = document.createElement('textarea');
    area.value = text;
    area.setAttribute('readonly', '');
    area.style.position = 'fixed';
    area.style.opacity = '0';
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
    area.remove();
    return ok;
  }

  // place puts the tooltip above rect (or below when there is no room),
  // inside the viewport.
  function place(rect, x) {
    var width = tip.offsetWidth;
    var height = tip.offsetHeight;
    var left = (x === undefined ? rect.left + rect.width / 2 : x) - width / 2;
    left = Math.max(6, Math.min(left, window.innerWidth - width - 6));
    var top = rect.top - height - 8;
    if (top < 6) top = Math.min(rect.bottom + 8, window.innerHeight - height - 6);
    tip.style.left = Math.round(left) + 'px';
    tip.style.top = Math.round(top) + 'px';
  }

  function show(el, x) {
    clearTimeout(hideTimer);
    if (owner === el && !tip.hidden) return;
    hide(true);
    var isMark = el.classList.contains('mark');
    var id = el.getAttribute('data-tip-id');
    if (!isMark && !id && !isTruncated(el)) return;
    owner = el;
    stash(el);
    tip.textContent = '';
    var main = document.createElement('div');
    main.className = 'tip-text';
    main.textContent = stashed.text;
    tip.appendChild(main);
    if (id) {
      var row = document.createElement('div');
      row.className = 'tip-id';
      var code = document.createElement('code');
      code.textContent = id;
      var button = document.createElement('button');
      button.type = 'button';
      button.className = 'tip-copy';
      button.textContent = 'Copy ID';
      button.addEventListener('click', function (event) { event.stopPropagation(); copy(id, button); });
      row.appendChild(code);
      row.appendChild(button);
      tip.appendChild(row);
    }
    tip.classList.toggle('is-interactive', Boolean(id));
    tip.hidden = false;
    el.classList.add('is-tipped');
    place(el.getBoundingClientRect(), x);
  }

  function hide(now) {
    clearTimeout(hideTimer);
    var go = function () {
      if (owner) owner.classList.remove('is-tipped');
      unstash();
      owner = null;
      tip.hidden = true;
    };
    if (now === true) go(); else hideTimer = setTimeout(go, 150);
  }

  // nearestPoint picks the line chart point closest to the pointer's x, so
  // the whole plot acts as a crosshair rather than 8 px targets.
  function nearestPoint(svg, clientX) {
    var best = null;
    var bestDistance = Infinity;
    svg.querySelectorAll('.point.mark').forEach(function (point) {
      var rect = point.getBoundingClientRect();
      var distance = Math.abs(rect.left + rect.width / 2 - clientX);
      if (distance < bestDistance) { best = point; bestDistance = distance; }
    });
    return best;
  }

  document.addEventListener('pointermove', function (event) {
    if (event.pointerType !== 'mouse') return;
    if (tip.contains(event.target)) { clearTimeout(hideTimer); return; }
    var svg = event.target.closest && event.target.closest('svg[data-chart]');
    var target = svg && svg.querySelector('.point.mark') ? nearestPoint(svg, event.clientX) : targetOf(event.target);
    if (target) show(target);
    else if (owner && !tip.classList.contains('is-interactive')) hide(true);
    else if (owner) hide();
  });

  // The pointer leaving the page takes its tooltip along, which also lets
  // a live refresh that waits for the user (observer.js) go ahead.
  document.addEventListener('pointerout', function (event) {
    if (event.pointerType === 'mouse' && !event.relatedTarget && owner && !tip.classList.contains('is-interactive')) hide(true);
  });

  // A tap on a mark shows its value; a tap elsewhere hides it.
  document.addEventListener('pointerdown', function (event) {
    if (event.pointerType === 'mouse' || tip.contains(event.target)) return;
    var target = targetOf(event.target);
    if (target && target.classList.contains('mark')) show(target);
    else if (target && !target.matches('button, [role="link"], [role="link"] *')) show(target);
    else hide(true);
  });

  // Keyboard: a chart is one tab stop; arrow keys walk its marks.
  function marksOf(chart) {
    return Array.prototype.slice.call(chart.querySelectorAll('.mark'));
  }

  function focusMark(chart, index) {
    var marks = marksOf(chart);
    if (!marks.length) return;
    index = Math.max(0, Math.min(index, marks.length - 1));
    chart.setAttribute('data-index', String(index));
    hide(true);
    show(marks[index]);
  }

  document.addEventListener('focusin', function (event) {
    var chart = event.target.closest && event.target.closest('[data-chart]');
    if (chart) {
      var start = chart.hasAttribute('data-index') ? Number(chart.getAttribute('data-index')) :
        chart.querySelector('.point.mark') ? marksOf(chart).length - 1 : 0;
      focusMark(chart, start);
      return;
    }
    var row = event.target.closest && event.target.closest('.group-row');
    var named = row ? row.querySelector('[data-tip-id]') : event.target.closest && event.target.closest('[data-tip-id]');
    if (named) show(named); else hide(true);
  });

  document.addEventListener('focusout', function (event) {
    if (owner && (event.target === owner || event.target.contains(owner)) && !tip.contains(event.relatedTarget)) hide(true);
  });

  document.addEventListener('keydown', function (event) {
    if (event.key === 'Escape') { hide(true); return; }
    var chart = event.target.closest && event.target.closest('[data-chart]');
    if (!chart) return;
    var index = Number(chart.getAttribute('data-index') || 0);
    var steps = { ArrowLeft: -1, ArrowUp: -1, ArrowRight: 1, ArrowDown: 1 };
    if (event.key in steps) index += steps[event.key];
    else if (event.key === 'Home') index = 0;
    else if (event.key === 'End') index = marksOf(chart).length - 1;
    else return;
    event.preventDefault();
    focusMark(chart, index);
  });

  // Scrolling moves the tooltip with its owner (focus scrolls a chart into
  // view); an owner scrolled out of sight takes the tooltip with it.
  document.addEventListener('scroll', function () {
    if (!owner) return;
    var rect = owner.getBoundingClientRect();
    if (rect.bottom < 0 || rect.top > window.innerHeight) hide(true);
    else place(rect);
  }, true);

  // The panel is replaced on navigation and live refreshes; a tooltip whose
  // owner left the page goes with it.
  new MutationObserver(function () {
    if (owner && !document.body.contains(owner)) { stashed = null; hide(true); }
  }).observe(document.getElementById('panel'), { childList: true, subtree: true });

  window.crosstalkTips = { show: show, hide: hide };
})();
