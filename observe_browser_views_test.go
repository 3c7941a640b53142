package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// browserViewport is one screen size the views are checked at.
type browserViewport struct {
	Name          string
	Width, Height int
	Scale         float64
	Mobile        bool
}

var browserViewports = []browserViewport{
	{Name: "desktop", Width: 1440, Height: 900, Scale: 1},
	{Name: "phone", Width: 390, Height: 844, Scale: 2, Mobile: true},
}

// setViewport sizes the page; a phone viewport also gets touch input.
func (c *cdp) setViewport(t *testing.T, vp browserViewport) {
	t.Helper()
	c.call(t, false, "Emulation.setDeviceMetricsOverride", map[string]any{"width": vp.Width, "height": vp.Height, "deviceScaleFactor": vp.Scale, "mobile": vp.Mobile}, nil)
	c.call(t, false, "Emulation.setTouchEmulationEnabled", map[string]any{"enabled": vp.Mobile, "maxTouchPoints": 1}, nil)
}

// open navigates to url and waits until the named view is on screen.
func (c *cdp) open(t *testing.T, url, view string) {
	t.Helper()
	c.call(t, false, "Page.navigate", map[string]any{"url": url}, nil)
	c.waitForView(t, view)
}

func (c *cdp) waitForView(t *testing.T, view string) {
	t.Helper()
	c.waitFor(t, fmt.Sprintf("document.readyState === 'complete' && document.querySelector('#panel > [data-view-name=%q]') && document.getElementById('live-status').dataset.state === 'open'", view), 15*time.Second)
}

// center returns the viewport centre of the first element matching sel,
// scrolled into view first.
func (c *cdp) center(t *testing.T, sel string) (float64, float64) {
	t.Helper()
	var p struct{ X, Y float64 }
	// Two animation frames let the scroll event pass before the caller
	// hovers, since scrolling hides a tooltip.
	c.eval(t, fmt.Sprintf(`new Promise(done => { const el = document.querySelector(%q); el.scrollIntoView({block: 'center'});
		requestAnimationFrame(() => requestAnimationFrame(() => {
		if (el.matches('.donut-segment')) { // the middle of the arc, not of the ring's box
			const length = parseFloat(el.getAttribute('stroke-dasharray')), start = -parseFloat(el.getAttribute('stroke-dashoffset'));
			const q = el.getPointAtLength(start + length / 2).matrixTransform(el.getScreenCTM());
			return done({X: q.x, Y: q.y});
		}
		const r = el.getBoundingClientRect(); done({X: r.left + r.width / 2, Y: r.top + r.height / 2}); })); })`, sel), &p)
	return p.X, p.Y
}

// layoutProblems lists elements that stick out of their panel sideways
// (scroll containers may hold wider content), text cut by an ellipsis with
// no full value to hover, chart text too small to read, and legend or top
// list entries that are hidden. Tables must fit a desktop panel; a table
// that scrolls sideways on a phone must keep its first column pinned.
// It is a function of one argument: whether the viewport is a desktop.
const layoutProblems = `(desktop => {
  const bad = [];
  const root = document.getElementById('panel');
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.classList.length ? '.' + [...el.classList].join('.') : '');
  const scrolls = el => /(auto|scroll)/.test(getComputedStyle(el).overflowX) && el !== root;
  const panels = '.panel, .chart-card, .metrics, .event-log, .details, .chat-picker, .chat-side, .messages, .chat-header, .filters, .banner, .empty-state';
  if (root.scrollWidth > root.clientWidth + 1) bad.push('the view scrolls sideways: ' + root.scrollWidth + ' > ' + root.clientWidth);
  if (document.documentElement.scrollWidth > innerWidth + 1) bad.push('the page scrolls sideways');
  for (const el of [document.querySelector('.rail'), document.querySelector('.topbar')]) {
    const r = el.getBoundingClientRect();
    if (r.right > innerWidth + 1) bad.push(name(el) + ' ends at ' + Math.round(r.right) + ' beyond ' + innerWidth);
  }
  for (const el of root.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (!r.width || (el.closest('svg') && el.tagName !== 'svg')) continue;
    let box = el.parentElement;
    while (box !== root && !scrolls(box) && !box.matches(panels)) box = box.parentElement;
    if (scrolls(box)) continue;
    const b = box.getBoundingClientRect();
    if (r.right > b.right + 1 || r.left < b.left - 1) bad.push(name(el) + ' spans ' + Math.round(r.left) + '..' + Math.round(r.right) + ' outside ' + name(box) + ' ' + Math.round(b.left) + '..' + Math.round(b.right));
    const s = getComputedStyle(el);
    if (s.textOverflow === 'ellipsis' && el.scrollWidth > el.clientWidth + 1 && !el.closest('[title], [data-tip-id]')) bad.push(name(el) + ' is cut with no full value on hover: ' + el.textContent.slice(0, 40));
  }
  for (const box of root.querySelectorAll('.table-scroll')) {
    if (box.scrollWidth <= box.clientWidth + 1) continue;
    if (desktop) bad.push(name(box) + ' scrolls sideways at desktop width: ' + box.scrollWidth + ' > ' + box.clientWidth);
    const first = box.querySelector('tbody td:first-child');
    if (first && getComputedStyle(first).position !== 'sticky') bad.push(name(box) + ' scrolls sideways without a pinned first column');
  }
  for (const text of root.querySelectorAll('svg text')) {
    const h = text.getBoundingClientRect().height;
    if (h && h < 10) bad.push('chart text ' + JSON.stringify(text.textContent) + ' is ' + h.toFixed(1) + ' px tall');
  }
  const hidden = el => {
    const r = el.getBoundingClientRect();
    if (!r.height) return true;
    for (let a = el.parentElement; a && a !== root; a = a.parentElement) {
      if (getComputedStyle(a).overflow === 'visible') continue;
      const b = a.getBoundingClientRect();
      if (r.top < b.top - 1 || r.bottom > b.bottom + 1 || r.left < b.left - 1 || r.right > b.right + 1) return true;
    }
    return false;
  };
  for (const card of root.querySelectorAll('.chart-donut')) {
    const arcs = card.querySelectorAll('.donut-segment').length, rows = card.querySelectorAll('.legend tbody tr');
    if (rows.length !== arcs) bad.push(card.querySelector('h2').textContent + ': ' + rows.length + ' legend rows for ' + arcs + ' arcs');
    rows.forEach(row => { if (hidden(row)) bad.push(card.querySelector('h2').textContent + ': legend row ' + row.textContent + ' is hidden'); });
  }
  for (const row of root.querySelectorAll('.toplist .mark')) if (hidden(row)) bad.push('top list row ' + row.textContent + ' is hidden');
  return bad.slice(0, 25);
})`

// seedCrowded adds what broke the dashboard in review: a 117-character
// group name, a 73-character agent name, a pending wakeup for a UUID
// context, 11 tools and 23 callers over three days.
func seedCrowded(fx *observeFixture, now time.Time) string {
	start := now.Add(-70 * time.Hour)
	long := "Cross-team release readiness review for the quarterly platform migration, storage, networking and audit follow-ups"
	lead := fixtureMember{"0b3f0c7e-8a1d-4c52-9f3e-2d7f5a1c3f18", "Platform reliability engineering on-call rotation lead (primary), EMEA"}
	g := fx.group(long, "Review of everything that ships this quarter", start, lead, fixtureMember{"vikas", "Vikas"})
	ids := fx.messages(g, fixtureMessage{Sender: "vikas", SenderName: "Vikas", Content: "@lead please sign off the storage plan", At: now.Add(-time.Hour), Priority: "urgent"})
	fx.wakeup(g, ids[0], lead.ContextID, now.Add(-50*time.Minute), time.Time{})
	for i := 0; i < 3; i++ {
		fx.group(fmt.Sprintf("Team %d", i+1), "", start, fixtureMember{"vikas", "Vikas"})
	}
	tools := []string{"send_message", "get_unread_messages", "join_group", "list_groups", "get_users", "leave_group",
		"create_group", "search_messages", "get_all_messages", "get_latest_messages", "get_messages_after"}
	var calls []fixtureCall
	for i := 0; i < 323; i++ {
		tool := "send_message"
		if i%3 == 0 {
			tool = tools[i/3%len(tools)]
		}
		caller := fmt.Sprintf("agent-%02d", i%23)
		if i%23 == 5 {
			caller = lead.Name
		}
		c := fixtureCall{At: start.Add(time.Duration(i) * 13 * time.Minute), Tool: tool, Group: g, GroupName: long,
			Context: "ctx", Caller: caller, Duration: int64(5 + (i*37)%900)}
		if i%17 == 0 {
			c.Outcome, c.Category = "error", []string{"validation", "not_found", "authorization"}[i%3]
		}
		calls = append(calls, c)
	}
	fx.calls(calls...)
	return g
}

// axeSource reads the pinned axe-core that npm ci installs under
// conformance/axe; "" when it is not installed (a local run without npm).
func axeSource(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("conformance", "axe", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		if os.Getenv("CROSSTALK_BROWSER_TEST") == "1" {
			t.Fatalf("axe-core is not installed (npm ci --prefix conformance/axe): %v", err)
		}
		t.Logf("axe-core is not installed; skipping the accessibility audit: %v", err)
		return ""
	}
	return string(src)
}

// TestObserveViewsInBrowser checks every view at desktop and phone width:
// nothing sticks out of its panel, every chart category is visible, chart
// values show on hover, focus and tap, the URL keeps view and filters across
// reload and Back, and axe-core finds no violation. It saves screenshots of
// every view at both widths.
func TestObserveViewsInBrowser(t *testing.T) {
	c := launchBrowser(t)
	go func() {
		for range c.events { // this test waits on page state, not on events
		}
	}()
	shots := screenshotDir(t)
	axe := axeSource(t)
	fx := newObserveFixture(t)
	now := time.Now()
	release := seedShowcase(fx, now)
	crowded := seedCrowded(fx, now)
	obs := newObserver(fx.dir, 500*time.Millisecond, time.Now, time.Local)
	base := "http://" + serveObserver(t, obs) + "/"
	views := []struct{ name, query string }{
		{"overview", ""}, {"chats", "?view=chats&group_id=" + crowded}, {"analytics", "?view=analytics"}, {"storage", "?view=storage"},
	}
	for _, vp := range browserViewports {
		c.setViewport(t, vp)
		for _, v := range views {
			c.open(t, base+v.query, v.name)
			c.eval(t, "document.fonts.ready.then(() => true)", nil)
			var problems []string
			c.eval(t, fmt.Sprintf("%s(%v)", layoutProblems, !vp.Mobile), &problems)
			for _, p := range problems {
				t.Errorf("%s %s: %s", vp.Name, v.name, p)
			}
			if axe != "" {
				for _, violation := range axeViolations(t, c, axe) {
					t.Errorf("%s %s: axe: %s", vp.Name, v.name, violation)
				}
			}
			saveScrolledShots(t, c, filepath.Join(shots, fmt.Sprintf("%s-%s", vp.Name, v.name)))
		}
		checkTooltips(t, c, base, vp, filepath.Join(shots, vp.Name+"-tooltip"))
	}
	checkURLState(t, c, base, release)
	checkUnreachable(t, c, base)
}

// axeViolations runs axe-core in the page and returns one line per rule
// that failed, with up to three of its elements.
func axeViolations(t *testing.T, c *cdp, src string) []string {
	t.Helper()
	var loaded string
	c.eval(t, "typeof axe === 'undefined' ? '' : axe.version", &loaded)
	if loaded == "" {
		c.eval(t, src+"\n;axe.version", &loaded)
	}
	if loaded != "4.14.1" {
		t.Fatalf("got axe-core %q in the page; want the pinned 4.14.1", loaded)
	}
	var out []string
	c.eval(t, `axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v =>
		v.id + ' (' + v.nodes.length + '): ' + v.nodes.slice(0, 3).map(n => n.target.join(' ') + ' ' + (n.failureSummary || '').split('\n').slice(1, 2).join('')).join(' | ')))`, &out)
	return out
}

// saveScrolledShots saves the view, then one more screenshot per screenful
// the view scrolls (at most three more).
func saveScrolledShots(t *testing.T, c *cdp, prefix string) {
	t.Helper()
	c.eval(t, "document.getElementById('panel').scrollTop = 0", nil)
	c.screenshot(t, prefix+".png")
	for i := 1; i <= 3; i++ {
		var moved bool
		// Two animation frames let the scrolled view paint before the capture.
		c.eval(t, `new Promise(done => { const p = document.getElementById('panel'); const before = p.scrollTop;
			p.scrollTop = before + p.clientHeight * 0.9;
			requestAnimationFrame(() => requestAnimationFrame(() => done(p.scrollTop > before))); })`, &moved)
		if !moved {
			break
		}
		c.screenshot(t, fmt.Sprintf("%s-%d.png", prefix, i))
	}
	c.eval(t, "document.getElementById('panel').scrollTop = 0", nil)
}

// tipText returns the visible tooltip's text, "" when none shows.
func tipText(t *testing.T, c *cdp) string {
	t.Helper()
	var text string
	c.eval(t, "(() => { const tip = document.getElementById('tip'); return tip && !tip.hidden ? tip.textContent : ''; })()", &text)
	return text
}

// checkTooltips hovers (or taps, on a phone) a donut arc, a line point and
// a caller bar, and focuses the line chart, expecting the exact value in
// the tooltip each time; it saves a screenshot of each tooltip.
func checkTooltips(t *testing.T, c *cdp, base string, vp browserViewport, shot string) {
	t.Helper()
	c.open(t, base+"?view=analytics", "analytics")
	for i, sel := range []string{".chart-donut .donut-segment", ".point.mark", ".toplist .mark"} {
		c.eval(t, "window.crosstalkTips.hide(true)", nil)
		var present bool
		if c.eval(t, fmt.Sprintf("document.querySelector(%q) !== null", sel), &present); !present {
			t.Errorf("%s: analytics has no %s", vp.Name, sel)
			continue
		}
		x, y := c.center(t, sel)
		if vp.Mobile {
			point := []map[string]any{{"x": x, "y": y}}
			c.call(t, false, "Input.dispatchTouchEvent", map[string]any{"type": "touchStart", "touchPoints": point}, nil)
			c.call(t, false, "Input.dispatchTouchEvent", map[string]any{"type": "touchEnd", "touchPoints": []any{}}, nil)
		} else {
			c.call(t, false, "Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": x, "y": y}, nil)
		}
		if text := tipText(t, c); !strings.Contains(text, " calls") {
			t.Errorf("%s: got tooltip %q over %s; want its exact number of calls", vp.Name, text, sel)
		}
		c.screenshot(t, fmt.Sprintf("%s-%d.png", shot, i+1))
	}
	c.call(t, false, "Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": 1, "y": 1}, nil)
	c.eval(t, "window.crosstalkTips.hide(true); document.activeElement.blur(); document.querySelector('svg.chart-line').focus()", nil)
	first := tipText(t, c)
	c.call(t, false, "Input.dispatchKeyEvent", map[string]any{"type": "keyDown", "key": "ArrowLeft", "code": "ArrowLeft", "windowsVirtualKeyCode": 37}, nil)
	second := tipText(t, c)
	if !strings.Contains(first, " calls") || !strings.Contains(second, " calls") || first == second {
		t.Errorf("%s: focus and ArrowLeft on the line chart showed %q then %q; want two different exact values", vp.Name, first, second)
	}
	var titles int
	c.eval(t, "document.querySelectorAll('.analytics svg title:not(:empty)').length", &titles)
	if titles == 0 {
		t.Errorf("%s: chart marks lost their <title> for screen readers", vp.Name)
	}
}

// checkURLState sets analytics filters and opens a chat, then checks that
// reload, Back and Forward bring each back.
func checkURLState(t *testing.T, c *cdp, base, release string) {
	t.Helper()
	c.setViewport(t, browserViewports[0])
	c.open(t, base, "overview")
	c.eval(t, "document.querySelector('.rail-nav [data-nav=analytics]').click()", nil)
	c.waitForView(t, "analytics")
	c.eval(t, "document.querySelector('[data-range-value=\"24\"]').click()", nil)
	c.waitFor(t, "location.search.includes('range_value=24') && document.querySelector('[data-range-value=\"24\"]').getAttribute('aria-pressed') === 'true'", 10*time.Second)
	c.eval(t, "var s = document.querySelector('select[name=outcome]'); s.value = 'error'; s.dispatchEvent(new Event('change', {bubbles: true}))", nil)
	c.waitFor(t, "location.search.includes('outcome=error') && document.querySelector('select[name=outcome]').value === 'error'", 10*time.Second)
	var filtered string
	c.eval(t, "location.pathname + location.search", &filtered)
	var rows int
	c.eval(t, "document.querySelectorAll('.event-log tbody tr').length", &rows)

	c.call(t, false, "Page.reload", map[string]any{}, nil)
	c.waitForView(t, "analytics")
	var state struct {
		URL, Outcome, Range, Unit, Title string
		Rows                             int
	}
	readState := `({URL: location.pathname + location.search, Outcome: document.querySelector('select[name=outcome]').value,
		Range: document.querySelector('input[name=range_value]').value, Unit: document.querySelector('select[name=range_unit]').value,
		Title: document.getElementById('page-title').textContent, Rows: document.querySelectorAll('.event-log tbody tr').length})`
	c.eval(t, readState, &state)
	if state.URL != filtered || state.Outcome != "error" || state.Range != "24" || state.Unit != "h" || state.Rows != rows {
		t.Errorf("after reload got %+v; want %s with outcome error, 24 h and %d rows", state, filtered, rows)
	}

	c.eval(t, "document.querySelector('.rail-nav [data-nav=chats]').click()", nil)
	c.waitForView(t, "chats")
	c.eval(t, fmt.Sprintf("document.querySelector('.chat-list [data-group-id=%q]').click()", release), nil)
	c.waitFor(t, fmt.Sprintf("location.search.includes(%q) && document.querySelector('.chat[data-group-id=%q]')", release, release), 10*time.Second)
	c.eval(t, "history.back()", nil)
	c.waitFor(t, fmt.Sprintf("!location.search.includes(%q) && document.querySelector('.chat[data-group-id]')", release), 10*time.Second)
	c.eval(t, "history.back()", nil)
	c.waitFor(t, "document.querySelector('#panel > [data-view-name=analytics]') && document.querySelector('select[name=outcome]').value === 'error'", 10*time.Second)
	c.eval(t, readState, &state)
	if state.URL != filtered || state.Range != "24" || !strings.HasPrefix(state.Title, "Tool analytics") {
		t.Errorf("after Back got %+v; want %s with its filters", state, filtered)
	}
	c.eval(t, "history.forward()", nil)
	c.waitForView(t, "chats")
	c.eval(t, "history.forward()", nil)
	c.waitFor(t, fmt.Sprintf("document.querySelector('.chat[data-group-id=%q]')", release), 10*time.Second)
	c.call(t, false, "Page.reload", map[string]any{}, nil)
	c.waitFor(t, fmt.Sprintf("document.readyState === 'complete' && document.querySelector('.chat[data-group-id=%q]') && document.querySelector('.chat-list [aria-current=true]')", release), 15*time.Second)
	var raw json.RawMessage
	c.eval(t, "location.search", &raw)
	t.Logf("chat address after reload: %s", raw)
}

// checkUnreachable fails the next navigation (the browser goes offline)
// and checks that the page says which view could not be opened, keeps the
// last view visible and dims it, rather than a blank panel titled with the
// view the user left.
func checkUnreachable(t *testing.T, c *cdp, base string) {
	t.Helper()
	c.open(t, base, "overview")
	c.call(t, false, "Network.enable", map[string]any{}, nil)
	c.call(t, false, "Network.emulateNetworkConditions", map[string]any{"offline": true, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}, nil)
	c.eval(t, "document.querySelector('.rail-nav [data-nav=chats]').click()", nil)
	c.waitFor(t, "document.querySelector('#panel .unreachable')", 10*time.Second)
	var state struct {
		Title, Banner string
		Kept, Stale   bool
	}
	c.eval(t, `({Title: document.getElementById('page-title').textContent, Banner: document.querySelector('#panel .unreachable').textContent,
		Kept: document.querySelector('#panel > [data-view-name=overview]') !== null, Stale: document.getElementById('panel').classList.contains('is-stale')})`, &state)
	if state.Title != "Chats · not loaded" || !strings.HasPrefix(state.Banner, "Could not open Chats") || !state.Kept || !state.Stale {
		t.Errorf("after a failed navigation got %+v; want the Chats title marked not loaded, a banner, and Overview kept dimmed", state)
	}
	c.call(t, false, "Network.emulateNetworkConditions", map[string]any{"offline": false, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}, nil)
	c.eval(t, "document.querySelector('.rail-nav [data-nav=chats]').click()", nil)
	c.waitFor(t, "document.querySelector('#panel > [data-view-name=chats]') && !document.querySelector('#panel .unreachable') && !document.getElementById('panel').classList.contains('is-stale')", 10*time.Second)
}
