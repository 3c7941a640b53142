package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// cdp is a minimal Chrome DevTools Protocol client over --remote-debugging-pipe:
// NUL-terminated JSON messages, commands on fd 3, replies and events on fd 4.
type cdp struct {
	w       io.Writer
	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpMessage
	events  chan cdpMessage
	session string
}

// cdpMessage is one reply or event.
type cdpMessage struct {
	ID        int             `json:"id"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	Error     *struct{ Message string }
	SessionID string `json:"sessionId"`
}

func newCDP(w io.Writer, r io.Reader) *cdp {
	c := &cdp{w: w, pending: map[int]chan cdpMessage{}, events: make(chan cdpMessage, 4096)}
	go func() {
		br := bufio.NewReader(r)
		for {
			raw, err := br.ReadBytes(0)
			if err != nil {
				close(c.events)
				return
			}
			var m cdpMessage
			if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
				continue
			}
			if m.ID != 0 {
				c.mu.Lock()
				ch := c.pending[m.ID]
				delete(c.pending, m.ID)
				c.mu.Unlock()
				if ch != nil {
					ch <- m
				}
				continue
			}
			select {
			case c.events <- m:
			default:
			}
		}
	}()
	return c
}

// call sends one command (on the attached page session unless browser is
// set) and waits for its reply.
func (c *cdp) call(t testing.TB, browser bool, method string, params any, result any) {
	t.Helper()
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	ch := make(chan cdpMessage, 1)
	c.pending[id] = ch
	msg := map[string]any{"id": id, "method": method, "params": params}
	if !browser && c.session != "" {
		msg["sessionId"] = c.session
	}
	data, _ := json.Marshal(msg)
	_, err := c.w.Write(append(data, 0))
	c.mu.Unlock()
	if err != nil {
		t.Fatalf("send %s: %v", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			t.Fatalf("%s: %s", method, m.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				t.Fatalf("decode %s: %v", method, err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no reply within 30s", method)
	}
}

// eval evaluates a JavaScript expression (awaiting promises) in the page.
func (c *cdp) eval(t testing.TB, expr string, out any) {
	t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	c.call(t, false, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &res)
	if res.ExceptionDetails != nil {
		t.Fatalf("evaluate %q: %s %s", expr, res.ExceptionDetails.Text, res.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(res.Result.Value) > 0 {
		if err := json.Unmarshal(res.Result.Value, out); err != nil {
			t.Fatalf("decode result of %q: %v", expr, err)
		}
	}
}

// waitFor polls a boolean expression until it holds or the timeout passes,
// returning how long it took.
func (c *cdp) waitFor(t testing.TB, expr string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var ok bool
		c.eval(t, "Boolean("+expr+")", &ok)
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("waited %v for %s", timeout, expr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cdp) screenshot(t testing.TB, path string) {
	t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	c.call(t, false, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("write screenshot: %v", err)
	}
}

// findChromium returns a Chromium binary, or "" when none is installed.
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// launchBrowser starts headless Chromium on a DevTools pipe, attaches to a
// page and returns the client; it skips the test when Chromium is missing
// unless CROSSTALK_BROWSER_TEST=1 requires it.
func launchBrowser(t *testing.T) *cdp {
	t.Helper()
	chromium := findChromium()
	if chromium == "" {
		if os.Getenv("CROSSTALK_BROWSER_TEST") == "1" {
			t.Fatal("CROSSTALK_BROWSER_TEST=1 but no chromium binary was found")
		}
		t.Skip("chromium is not installed; set CROSSTALK_BROWSER_TEST=1 to require it")
	}
	toChrome, chromeIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// The background-networking flags keep Chromium from reaching for
	// Google's hosts, which this machine's closed network refuses.
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--window-size=1440,900", "--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), "about:blank")
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	toChrome.Close()
	fromChrome.Close()
	t.Cleanup(func() {
		chromeIn.Close()
		cmd.Process.Kill()
		cmd.Wait()
		chromeOut.Close()
		if t.Failed() {
			t.Logf("chromium stderr:\n%s", stderr.String())
		}
	})
	c := newCDP(chromeIn, chromeOut)
	var created struct {
		TargetID string `json:"targetId"`
	}
	c.call(t, true, "Target.createTarget", map[string]any{"url": "about:blank"}, &created)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	c.call(t, true, "Target.attachToTarget", map[string]any{"targetId": created.TargetID, "flatten": true}, &attached)
	c.session = attached.SessionID
	c.call(t, false, "Page.enable", map[string]any{}, nil)
	return c
}

// screenshotDir returns CROSSTALK_SCREENSHOT_DIR, or a new temporary folder.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CROSSTALK_SCREENSHOT_DIR")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "crosstalk-screens-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots: %s", dir)
	return dir
}

// TestObserveInBrowser drives headless Chromium through all four views,
// watches a message arrive live, and checks that no request leaves loopback.
// It is long because it is one browser session, each step depending on the
// page state the previous one left.
func TestObserveInBrowser(t *testing.T) {
	c := launchBrowser(t)
	shots := screenshotDir(t)

	fx := newObserveFixture(t)
	groupID := seedShowcase(fx, time.Now())

	const poll = 500 * time.Millisecond
	obs := newObserver(fx.dir, poll, time.Now, time.Local)
	base := "http://" + serveObserver(t, obs) + "/"

	c.call(t, false, "Network.enable", map[string]any{}, nil)
	c.call(t, false, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1600, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil)
	c.call(t, false, "Emulation.setTimezoneOverride", map[string]any{"timezoneId": "Asia/Kolkata"}, nil)

	var requestsMu sync.Mutex
	var requests []string
	go func() {
		for ev := range c.events {
			if ev.Method != "Network.requestWillBeSent" {
				continue
			}
			var p struct {
				Request struct {
					URL string `json:"url"`
				} `json:"request"`
			}
			if json.Unmarshal(ev.Params, &p) == nil {
				requestsMu.Lock()
				requests = append(requests, p.Request.URL)
				requestsMu.Unlock()
			}
		}
	}()

	c.call(t, false, "Page.navigate", map[string]any{"url": base}, nil)
	c.waitFor(t, "document.readyState === 'complete' && document.querySelector('.overview .group-row')", 15*time.Second)
	c.waitFor(t, "document.getElementById('live-status').dataset.state === 'open'", 15*time.Second)
	var overviewText string
	c.eval(t, "document.getElementById('panel').textContent", &overviewText)
	for _, want := range []string{"Release train", "Needs attention", "Live activity", "Send Message"} {
		if !strings.Contains(overviewText, want) {
			t.Errorf("overview text lacks %q", want)
		}
	}
	var shown string
	c.eval(t, "document.querySelector('.failure time').textContent", &shown)
	if !strings.HasSuffix(shown, "(+0530)") {
		t.Errorf("got timestamp %q; want it in the viewer's zone (+0530)", shown)
	}
	var second struct {
		TargetID string `json:"targetId"`
	}
	c.call(t, true, "Target.createTarget", map[string]any{"url": base}, &second)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !workerShared(c, t, second.TargetID) {
		time.Sleep(50 * time.Millisecond)
	}
	// Give a tab that did not share the stream time to open its own.
	time.Sleep(2 * poll)
	if n := obs.hub.subscriberCount(); n != 1 {
		t.Errorf("two tabs hold %d event streams; want 1 shared stream", n)
	}
	c.call(t, true, "Target.closeTarget", map[string]any{"targetId": second.TargetID}, nil)
	var injected bool
	c.eval(t, "window.__xss === true || document.querySelector('#panel script') !== null", &injected)
	if injected {
		t.Error("a stored <script> became live markup")
	}
	c.screenshot(t, filepath.Join(shots, "overview.png"))

	c.eval(t, "document.querySelector('.rail-nav [data-nav=chats]').click()", nil)
	c.waitFor(t, "document.querySelector('.chats .chat[data-group-id]')", 10*time.Second)
	c.eval(t, fmt.Sprintf("document.querySelector('.chat-list button[data-group-id=%q]').click()", groupID), nil)
	c.waitFor(t, fmt.Sprintf("document.querySelector('.chat[data-group-id=%q]')", groupID), 10*time.Second)
	var before int
	c.eval(t, "document.querySelectorAll('#message-list .message').length", &before)
	if before != messagePageSize {
		t.Errorf("first chat page shows %d messages; want %d", before, messagePageSize)
	}
	c.eval(t, "document.querySelector('.load-older').click()", nil)
	c.waitFor(t, "!document.querySelector('.load-older') && document.querySelectorAll('#message-list .message').length === 130", 10*time.Second)

	ids := fx.messages(groupID, fixtureMessage{Sender: "arun", SenderName: "Arun", Content: "Live arrival check", At: time.Now()})
	took := c.waitFor(t, fmt.Sprintf("document.querySelector('#message-list .message[data-message-id=\"%d\"]')", ids[0]), 2*poll+3*time.Second)
	t.Logf("live message appeared %v after the write (poll interval %v)", took, poll)
	if took > 2*poll+250*time.Millisecond {
		t.Errorf("live message took %v; want within two poll intervals (%v)", took, 2*poll)
	}
	c.eval(t, "document.getElementById('message-list').scrollTop = document.getElementById('message-list').scrollHeight", nil)
	c.screenshot(t, filepath.Join(shots, "chats.png"))

	c.eval(t, "document.querySelector('.rail-nav [data-nav=analytics]').click()", nil)
	c.waitFor(t, "document.querySelector('.analytics svg.donut') && document.querySelector('.analytics svg.chart')", 10*time.Second)
	var titles int
	c.eval(t, "document.querySelectorAll('.analytics svg title').length", &titles)
	if titles == 0 {
		t.Error("analytics charts have no hover titles")
	}
	var pointTitle string
	c.eval(t, "document.querySelector('.analytics .point title').textContent", &pointTitle)
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d .*\(\+0530\): \d+ calls$`).MatchString(pointTitle) {
		t.Errorf("got point title %q; want the exact count at a local time", pointTitle)
	}
	c.screenshot(t, filepath.Join(shots, "analytics.png"))
	c.eval(t, "document.getElementById('panel').scrollTop = 1e6", nil)
	c.screenshot(t, filepath.Join(shots, "analytics-log.png"))
	c.eval(t, "var s = document.querySelector('select[name=outcome]'); s.value = 'error'; s.dispatchEvent(new Event('change', {bubbles: true}))", nil)
	c.waitFor(t, "document.querySelector('select[name=outcome]').value === 'error' && document.querySelectorAll('.event-log tbody tr').length === 11", 10*time.Second)

	c.eval(t, "document.querySelector('.rail-nav [data-nav=storage]').click()", nil)
	c.waitFor(t, "document.querySelector('.storage .details')", 10*time.Second)
	c.screenshot(t, filepath.Join(shots, "storage.png"))

	c.eval(t, "document.getElementById('rail-toggle').click()", nil)
	c.waitFor(t, "document.getElementById('shell').classList.contains('is-collapsed')", 5*time.Second)
	c.eval(t, "document.getElementById('rail-toggle').click()", nil)

	requestsMu.Lock()
	defer requestsMu.Unlock()
	if len(requests) == 0 {
		t.Fatal("no network requests were observed")
	}
	for _, raw := range requests {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "data" && u.Scheme != "about" && u.Scheme != "blob" && !allowedHost(u.Host)) {
			t.Errorf("request to a non-loopback host: %s", raw)
		}
	}
}

// workerShared reports whether the second tab's page finished loading and
// shows the live state, which it can only learn through the shared worker.
func workerShared(c *cdp, t testing.TB, targetID string) bool {
	var targets struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
			URL      string `json:"url"`
		} `json:"targetInfos"`
	}
	c.call(t, true, "Target.getTargets", map[string]any{}, &targets)
	pageReady, workers := false, 0
	for _, ti := range targets.TargetInfos {
		if ti.TargetID == targetID && strings.HasPrefix(ti.URL, "http://127.0.0.1") {
			pageReady = true
		}
		if ti.Type == "shared_worker" {
			workers++
		}
	}
	return pageReady && workers == 1
}

// seedShowcase fills a fixture with a realistic little deployment and
// returns the id of the busiest group.
func seedShowcase(fx *observeFixture, now time.Time) string {
	start := now.Add(-26 * time.Hour)
	members := []fixtureMember{{"arun", "Arun — Architect"}, {"vikas", "Vikas"}, {"ram", "Ram (Security Analyst)"}}
	fx.enableAudit(start)
	release := fx.group("Release train", "Release coordination for 1.2", start, members...)
	snakes := fx.group("test_snakes", "Security review of the Snake game", start, members[2], fixtureMember{"chai", "Chaitanya"})
	quiet := fx.group("quiet-room", "", start, members[0])
	var msgs []fixtureMessage
	for i := 0; i < 130; i++ {
		m := members[i%len(members)]
		content := fmt.Sprintf("Status update %d: build %d is green on all platforms.", i, 400+i)
		if i == 7 {
			content = "<script>window.__xss = true</script><img src=x onerror=\"window.__xss=true\">"
		}
		msgs = append(msgs, fixtureMessage{Sender: m.ContextID, SenderName: m.Name, Content: content, At: start.Add(time.Duration(i) * 11 * time.Minute), Priority: []string{"normal", "normal", "high", "urgent"}[i%4]})
	}
	ids := fx.messages(release, msgs...)
	fx.wakeup(release, ids[3], "vikas", start.Add(40*time.Minute), start.Add(41*time.Minute))
	fx.wakeup(release, ids[120], "ram", now.Add(-2*time.Hour), time.Time{})
	fx.messages(snakes, fixtureMessage{Sender: "ram", SenderName: "Ram (Security Analyst)", Content: "Review complete, approved.", At: now.Add(-3 * time.Hour)})
	_ = quiet
	tools := []string{"send_message", "get_unread_messages", "join_group", "list_groups", "get_users", "leave_group"}
	callers := []string{"Arun — Architect", "Vikas", "Ram (Security Analyst)", "MCP client"}
	var calls []fixtureCall
	for i := 0; i < 240; i++ {
		c := fixtureCall{At: start.Add(time.Duration(i) * 6 * time.Minute), Tool: tools[(i*7)%len(tools)], Group: release, GroupName: "Release train",
			Context: "ctx", Caller: callers[(i*3)%len(callers)], Duration: int64(5 + (i*37)%90)}
		if i%23 == 0 {
			c.Outcome, c.Category = "error", []string{"validation", "not_found"}[i%2]
		}
		if i%50 == 0 {
			c.Group, c.GroupName = "grp_"+strings.Repeat("d", 32), "Retired group"
		}
		calls = append(calls, c)
	}
	fx.calls(calls...)
	return release
}
