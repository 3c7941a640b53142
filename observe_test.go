package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// newTestObserver returns an observer over dir that renders times in UTC.
func newTestObserver(t testing.TB, dir string, poll time.Duration) *observer {
	t.Helper()
	obs, err := newObserver(dir, poll)
	if err != nil {
		t.Fatal(err)
	}
	obs.location = time.UTC
	t.Cleanup(obs.dbs.closeAll)
	return obs
}

// get performs a request against the observer's handler.
func get(t testing.TB, h http.Handler, target string) (int, string, http.Header) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8787"+target, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String(), rec.Header()
}

func TestParseObserveOptions(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want observeOptions
	}{
		{"defaults", nil, observeOptions{pollInterval: 500 * time.Millisecond}},
		{"all values", []string{"--silent", "--port", "8788", "--poll-interval", "1.25", "--groups-dir", "/tmp/groups"},
			observeOptions{silent: true, port: 8788, pollInterval: 1250 * time.Millisecond, groupsDir: "/tmp/groups"}},
		{"equals forms", []string{"--port=1", "--poll-interval=0.1", "--groups-dir=rel"},
			observeOptions{port: 1, pollInterval: 100 * time.Millisecond, groupsDir: "rel"}},
		{"highest port", []string{"--port", "65535"}, observeOptions{port: 65535, pollInterval: 500 * time.Millisecond}},
		{"huge interval", []string{"--poll-interval", "1e300"}, observeOptions{pollInterval: time.Duration(math.MaxInt64)}},
		{"tiny interval", []string{"--poll-interval", "1e-9"}, observeOptions{pollInterval: time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseObserveOptions(tt.args)
			if err != nil {
				t.Fatalf("parse %v: %v", tt.args, err)
			}
			if got != tt.want {
				t.Errorf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestRunObserveRejectsBadOptions(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--port", "0"}, "port must be an integer between 1 and 65535"},
		{[]string{"--port", "65536"}, "port must be an integer between 1 and 65535"},
		{[]string{"--port", "not-a-port"}, "port must be an integer between 1 and 65535"},
		{[]string{"--poll-interval", "0"}, "poll interval must be a finite positive number of seconds"},
		{[]string{"--poll-interval", "-1"}, "poll interval must be a finite positive number of seconds"},
		{[]string{"--poll-interval", "nan"}, "poll interval must be a finite positive number of seconds"},
		{[]string{"--poll-interval", "inf"}, "poll interval must be a finite positive number of seconds"},
		{[]string{"--poll-interval", "not-a-number"}, "poll interval must be a finite positive number of seconds"},
		{[]string{"--port"}, "expected one argument"},
		{[]string{"--bogus"}, "unrecognized arguments: --bogus"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runObserve(tt.args, &stdout, &stderr)
			if code != 2 {
				t.Errorf("got exit %d; want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) || !strings.HasPrefix(stderr.String(), "usage: crosstalk-mcp observe") {
				t.Errorf("got stderr %q; want usage and %q", stderr.String(), tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("got stdout %q; want nothing", stdout.String())
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"observe", "--help"}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "--poll-interval SECONDS") {
		t.Errorf("got exit %d and %q for --help; want 0 and the option list", code, stdout.String())
	}
}

func TestResolveObserveGroupsDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "not-yet")
	t.Setenv("CROSSTALK_GROUPS_DIR", "/env/groups")
	tests := []struct {
		name string
		opts observeOptions
		env  string
		want string
	}{
		{"flag wins", observeOptions{groupsDir: missing}, "/env/groups", missing},
		{"environment next", observeOptions{}, "/env/groups", "/env/groups"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CROSSTALK_GROUPS_DIR", tt.env)
			got, err := resolveObserveGroupsDir(tt.opts)
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	t.Run("default", func(t *testing.T) {
		t.Setenv("CROSSTALK_GROUPS_DIR", "")
		home := t.TempDir()
		t.Setenv("HOME", home)
		got, err := resolveObserveGroupsDir(observeOptions{})
		if want := filepath.Join(home, ".cache", "crosstalk"); err != nil || got != want {
			t.Errorf("got %q, %v; want %q", got, err, want)
		}
	})
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("resolving created %s; want it left missing", missing)
	}
}

func TestListenObserverPorts(t *testing.T) {
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	if ln, _, err := listenObserver(port); err == nil {
		ln.Close()
		t.Errorf("listening on busy explicit port %d succeeded; want an error", port)
	}
	held, heldErr := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", defaultObserverPort))
	if heldErr == nil {
		defer held.Close()
	}
	ln, fellBack, err := listenObserver(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !fellBack || ln.Addr().(*net.TCPAddr).Port == defaultObserverPort {
		t.Errorf("got port %v, fell back %v; want an OS-chosen port while 8787 is busy", ln.Addr(), fellBack)
	}
	if host := ln.Addr().(*net.TCPAddr).IP.String(); host != "127.0.0.1" {
		t.Errorf("got bind address %s; want 127.0.0.1", host)
	}
}

func TestRunObserveServesOpensAndShutsDownWithOpenStreams(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing-groups")
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()

	opened := make(chan string, 1)
	restoreOpen := openBrowser
	openBrowser = func(url string) error { opened <- url; return fmt.Errorf("no browser here") }
	ctx, cancel := context.WithCancel(context.Background())
	restoreSignals := observeSignals
	observeSignals = func(parent context.Context) (context.Context, context.CancelFunc) { return ctx, cancel }
	defer func() { openBrowser, observeSignals = restoreOpen, restoreSignals }()

	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runObserve([]string{"--port", fmt.Sprint(port), "--poll-interval", "0.05", "--groups-dir", dir}, &stdout, &stderr)
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	select {
	case got := <-opened:
		if got != url {
			t.Errorf("opened %q; want %q", got, url)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the browser opener was not called")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(stderr.String(), "Could not open a browser; visit "+url) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := stdout.String(); got != url+"\n" {
		t.Errorf("got stdout %q; want %q", got, url+"\n")
	}
	if !strings.Contains(stderr.String(), "Could not open a browser; visit "+url) {
		t.Errorf("got stderr %q; want the could-not-open note", stderr.String())
	}
	var streams []*http.Response
	for i := 0; i < 3; i++ {
		resp, err := http.Get(url + "events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "retry:") {
			t.Fatalf("got first stream line %q, %v; want a retry hint", line, err)
		}
		streams = append(streams, resp)
	}
	start := time.Now()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("got exit %d; want 0", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("observer did not shut down with streams open")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("shutdown took %v; want it prompt", took)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("observer created the missing groups directory")
	}
	for _, resp := range streams {
		if _, err := io.ReadAll(resp.Body); err != nil && !strings.Contains(err.Error(), "EOF") {
			t.Logf("stream ended with %v", err)
		}
	}
}

// seedBasic creates one group with two members, a few messages and a wake
// event, plus audit rows; it returns the group id.
func seedBasic(fx *observeFixture, now time.Time) string {
	fx.enableAudit(now.Add(-time.Hour))
	id := fx.group("Project launch", "Shipping 1.2", now.Add(-time.Hour), fixtureMember{"writer", "Writer"}, fixtureMember{"reader", "Reader"})
	ids := fx.messages(id,
		fixtureMessage{Sender: "writer", SenderName: "Writer", Content: "first", At: now.Add(-50 * time.Minute), Priority: "high"},
		fixtureMessage{Sender: "writer", SenderName: "Writer", Content: "<script>alert(1)</script>", At: now.Add(-40 * time.Minute)},
	)
	fx.wakeup(id, ids[0], "reader", now.Add(-50*time.Minute), time.Time{})
	fx.calls(
		fixtureCall{At: now.Add(-30 * time.Minute), Tool: "send_message", Group: id, GroupName: "Project launch", Context: "writer", Caller: "Writer", Duration: 12},
		fixtureCall{At: now.Add(-20 * time.Minute), Tool: "send_message", Group: id, GroupName: "Project launch", Context: "writer", Caller: "Writer", Outcome: "error", Category: "validation", Duration: 40},
		fixtureCall{At: now.Add(-10 * time.Minute), Tool: "list_groups", Caller: "<b>Mallory</b>", Duration: 3},
	)
	return id
}

func TestRoutes(t *testing.T) {
	fx := newObserveFixture(t)
	id := seedBasic(fx, time.Now())
	obs := newTestObserver(t, fx.dir, time.Second)
	tests := []struct {
		path   string
		status int
		ctype  string
		want   []string
	}{
		{"/", 200, "text/html", []string{`<meta name="csrf-token" content="` + obs.csrfToken + `">`, `src="/static/observer.js"`, "Live activity", "Project launch"}},
		{"/api/health", 200, "application/json", []string{`{"status":"ok"}`}},
		{"/fragments/overview", 200, "text/html", []string{"Group health", "Reliability", "Messages</strong><span>2", "Tool calls</strong><span>3", "Error rate</strong><span>33.3%", "Needs attention", "Validation Error", "Send Message", "high: 1"}},
		{"/fragments/overview-group-row?group_id=" + id, 200, "text/html", []string{`data-overview-group-id="` + id + `"`, "<td>2</td>", "Needs attention"}},
		{"/fragments/overview-group-row?group_id=invalid", 400, "text/html", nil},
		{"/fragments/overview-group-row?group_id=grp_" + strings.Repeat("0", 32), 200, "text/html", nil},
		{"/fragments/chats", 200, "text/html", []string{`title="` + id + `"`, ">Project launch</button>", "Members", "Wakeups", "message #1 → reader", "acknowledged pending", "0 unread", "2 unread"}},
		{"/fragments/chats?group_id=" + id, 200, "text/html", []string{`class="is-active"`}},
		{"/fragments/chat?group_id=" + id, 200, "text/html", []string{`data-group-id="` + id + `"`, `data-message-id="2"`}},
		{"/fragments/chat", 200, "text/html", []string{"Choose a chat"}},
		{"/fragments/messages?group_id=" + id, 200, "text/html", []string{`data-message-id="1"`}},
		{"/fragments/messages?group_id=" + id + "&older_than_message_id=x", 400, "text/html", []string{"Invalid message cursor."}},
		{"/fragments/messages?group_id=" + id + "&older_than_message_id=0", 400, "text/html", []string{"Invalid message cursor."}},
		{"/fragments/messages?group_id=nope", 200, "text/html", []string{"Choose a valid group."}},
		{"/fragments/message?group_id=" + id + "&message_id=2", 200, "text/html", []string{`data-message-id="2"`}},
		{"/fragments/message?group_id=" + id + "&message_id=99", 200, "text/html", []string{"no longer available"}},
		{"/fragments/message?group_id=" + id + "&message_id=abc", 400, "text/html", []string{"Message is unavailable."}},
		{"/fragments/analytics", 200, "text/html", []string{"Calls by tool", "Call outcomes", "Calls over time", "Calls by caller", "Event log", "3 matching calls", `value="error:validation">Validation Error`, `value="error:internal">Internal Error`, "<th>Caller</th>", `name="name"`}},
		{"/fragments/analytics?outcome=error", 200, "text/html", []string{"1 matching calls", `value="error" selected`}},
		{"/fragments/storage", 200, "text/html", []string{"Audit rows", "separate from group databases", `data-post="/api/storage/reclaim"`, `data-post="/api/storage/delete-history"`}},
		{"/static/observer.css", 200, "text/css", []string{".shell"}},
		{"/static/observer.js", 200, "javascript", []string{"SharedWorker"}},
		{"/static/observer-events-worker.js", 200, "javascript", []string{"new EventSource('/events')"}},
		{"/static/icon.svg", 200, "image/svg+xml", nil},
		{"/static/templates.html", 404, "", nil},
		{"/static/", 404, "", nil},
		{"/nowhere", 404, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body, h := get(t, obs, tt.path)
			if code != tt.status {
				t.Fatalf("got status %d; want %d (body %.200q)", code, tt.status, body)
			}
			if tt.ctype != "" && !strings.Contains(h.Get("Content-Type"), tt.ctype) {
				t.Errorf("got Content-Type %q; want %q", h.Get("Content-Type"), tt.ctype)
			}
			if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("got CSP %q; want a self-only policy", csp)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %q", w)
				}
			}
			// An HTML row that expects nothing renders the "empty" template.
			if tt.ctype == "text/html" && tt.want == nil && body != "" {
				t.Errorf("got body %.200q; want empty", body)
			}
		})
	}
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/fragments/overview", nil)
	rec := httptest.NewRecorder()
	obs.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST to a fragment got %d; want 405", rec.Code)
	}
}

func TestHostAndCSRFRejection(t *testing.T) {
	fx := newObserveFixture(t)
	seedBasic(fx, time.Now())
	obs := newTestObserver(t, fx.dir, time.Second)
	hosts := []struct {
		host string
		want int
	}{
		{"127.0.0.1:8787", 200}, {"localhost:8787", 200}, {"[::1]:8787", 200}, {"LOCALHOST", 200},
		{"evil.example:8787", 403}, {"127.0.0.1.evil.example", 403}, {"192.168.1.5:8787", 403}, {"", 403},
	}
	for _, tt := range hosts {
		t.Run("host "+tt.host, func(t *testing.T) {
			for _, path := range []string{"/", "/events", "/fragments/overview", "/static/observer.js", "/api/health"} {
				if path == "/events" && tt.want == 200 {
					continue
				}
				req := httptest.NewRequest(http.MethodGet, path, nil)
				req.Host = tt.host
				rec := httptest.NewRecorder()
				obs.ServeHTTP(rec, req)
				if rec.Code != tt.want {
					t.Errorf("%s with Host %q got %d; want %d", path, tt.host, rec.Code, tt.want)
				}
			}
		})
	}
	posts := []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		want    int
		body    string
	}{
		{"get is not allowed", http.MethodGet, "/api/storage/reclaim", nil, 405, ""},
		{"no token", http.MethodPost, "/api/storage/reclaim", nil, 403, "invalid CSRF token"},
		{"wrong token", http.MethodPost, "/api/storage/delete-history", map[string]string{"X-CSRF-Token": "wrong", "X-Crosstalk-Confirm": "DELETE AUDIT HISTORY"}, 403, "invalid CSRF token"},
		{"cross origin", http.MethodPost, "/api/storage/reclaim", map[string]string{"X-CSRF-Token": obs.csrfToken, "Origin": "http://evil.example"}, 403, "cross-origin"},
		{"delete without confirmation", http.MethodPost, "/api/storage/delete-history", map[string]string{"X-CSRF-Token": obs.csrfToken}, 400, "explicit confirmation"},
		{"delete with wrong confirmation", http.MethodPost, "/api/storage/delete-history", map[string]string{"X-CSRF-Token": obs.csrfToken, "X-Crosstalk-Confirm": "yes"}, 400, "explicit confirmation"},
	}
	for _, tt := range posts {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, nil)
			req.Host = "127.0.0.1:8787"
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			obs.ServeHTTP(rec, req)
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
				t.Errorf("got %d %q; want %d containing %q", rec.Code, rec.Body.String(), tt.want, tt.body)
			}
		})
	}
	if n := countRows(t, fx.dir, "tool_calls"); n != 3 {
		t.Errorf("rejected requests left %d audit rows; want 3", n)
	}
}

func TestStorageActions(t *testing.T) {
	fx := newObserveFixture(t)
	id := seedBasic(fx, time.Now())
	var bulk []fixtureCall
	for i := 0; i < 3000; i++ {
		bulk = append(bulk, fixtureCall{At: time.Now().Add(-time.Duration(i) * time.Minute), Tool: fmt.Sprintf("tool_%d", i%40), Caller: fmt.Sprintf("caller %d", i%30), Duration: int64(i % 900)})
	}
	fx.calls(bulk...)
	obs := newTestObserver(t, fx.dir, time.Second)
	groupFile := groupPath(fx.dir, id)
	groupBefore, err := os.ReadFile(groupFile)
	if err != nil {
		t.Fatal(err)
	}
	post := func(path string, headers map[string]string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8787"+path, nil)
		req.Header.Set("X-CSRF-Token", obs.csrfToken)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		obs.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := post("/api/storage/reclaim", nil); code != 200 || !strings.Contains(body, "Reclaimed") {
		t.Errorf("reclaim got %d %q; want 200", code, body)
	}
	code, body := post("/api/storage/delete-history", map[string]string{"X-Crosstalk-Confirm": "DELETE AUDIT HISTORY", "Origin": "http://127.0.0.1:8787"})
	if code != 200 || !strings.Contains(body, "Deleted 3003 audit-history rows") {
		t.Errorf("delete got %d %q; want 200 and the count", code, body)
	}
	for _, table := range auditHistoryTables {
		if n := countRows(t, fx.dir, table); n != 0 {
			t.Errorf("%s has %d rows after deletion; want 0", table, n)
		}
	}
	if n := countRows(t, fx.dir, "groups"); n != 1 {
		t.Errorf("catalog has %d rows after deletion; want 1 (kept)", n)
	}
	if n := countRows(t, fx.dir, "metadata"); n != 1 {
		t.Errorf("metadata has %d rows after deletion; want 1 (kept)", n)
	}
	groupAfter, _ := os.ReadFile(groupFile)
	if !bytes.Equal(groupBefore, groupAfter) {
		t.Error("a storage action changed a group database")
	}
	freeBefore := observabilityInt(t, fx.dir, "PRAGMA freelist_count")
	if freeBefore == 0 {
		t.Fatal("deleting history left no free pages to reclaim")
	}
	if code, _ := post("/api/storage/reclaim", nil); code != 200 {
		t.Errorf("second reclaim got %d; want 200", code)
	}
	if freeAfter := observabilityInt(t, fx.dir, "PRAGMA freelist_count"); freeAfter >= freeBefore {
		t.Errorf("free pages went from %d to %d; want fewer after reclaim", freeBefore, freeAfter)
	}
	empty := newTestObserver(t, filepath.Join(t.TempDir(), "none"), time.Second)
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/api/storage/reclaim", nil)
	req.Header.Set("X-CSRF-Token", empty.csrfToken)
	rec := httptest.NewRecorder()
	empty.ServeHTTP(rec, req)
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "No audit database exists yet.") {
		t.Errorf("reclaim without a database got %d %q; want 409", rec.Code, rec.Body.String())
	}
	if _, err := os.Stat(filepath.Join(empty.dir, catalogFileName)); !os.IsNotExist(err) {
		t.Error("a storage action created observability.sqlite3")
	}
}

func TestEscaping(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	fx.enableAudit(now.Add(-time.Hour))
	evil := `<img src=x onerror=alert(1)>`
	id := fx.group(evil, `"><script>alert(2)</script>`, now, fixtureMember{"<ctx>", `<b>bold</b>`})
	fx.messages(id, fixtureMessage{Sender: "<ctx>", SenderName: "<i>Sender</i>", Content: "<script>alert(1)</script>", At: now, Priority: "<u>p</u>"})
	fx.calls(fixtureCall{At: now, Tool: "<svg onload=alert(3)>", Group: id, GroupName: evil, Caller: "<script>c</script>", Duration: 1})
	obs := newTestObserver(t, fx.dir, time.Second)
	const (
		group    = "&lt;img src=x onerror=alert(1)&gt;"
		desc     = "&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;"
		member   = "&lt;b&gt;bold&lt;/b&gt;"
		sender   = "&lt;i&gt;Sender&lt;/i&gt;"
		message  = "&lt;script&gt;alert(1)&lt;/script&gt;"
		priority = "&lt;u&gt;p&lt;/u&gt;"
		tool     = "&lt;svg onload=alert(3)&gt;"
		caller   = "&lt;script&gt;c&lt;/script&gt;"
	)
	tests := []struct {
		path    string
		escaped []string
	}{
		{"/", []string{group, tool, sender, message, priority}},
		{"/fragments/overview", []string{group, tool, sender, message, priority}},
		{"/fragments/chats", []string{group, desc, member, sender, message, priority}},
		{"/fragments/chat?group_id=" + id, []string{group, desc, member, sender, message, priority}},
		{"/fragments/messages?group_id=" + id, []string{sender, message, priority}},
		{"/fragments/message?group_id=" + id + "&message_id=1", []string{sender, message, priority}},
		{"/fragments/analytics", []string{group, tool, caller}},
		{"/fragments/overview-group-row?group_id=" + id, []string{group}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body, _ := get(t, obs, tt.path)
			if code != http.StatusOK {
				t.Fatalf("got status %d; want 200 (body %.200q)", code, body)
			}
			for _, raw := range []string{"<script>alert", "<img src=x", "<svg onload", "<script>c", "<i>Sender", "<b>bold", "<u>p"} {
				if strings.Contains(body, raw) {
					t.Errorf("body contains live markup %q", raw)
				}
			}
			for _, e := range tt.escaped {
				if !strings.Contains(body, e) {
					t.Errorf("body lacks the escaped form %q", e)
				}
			}
		})
	}
	_, body, _ := get(t, obs, "/fragments/chat?group_id="+id)
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("chat does not show the escaped message text")
	}
	if !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Error("chat does not show the escaped group name")
	}
}

func TestMessagePagination(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := fx.group("Paged", "", now, fixtureMember{"w", "Writer"})
	exact := fx.group("Exact", "", now, fixtureMember{"w", "Writer"})
	var msgs []fixtureMessage
	for i := 0; i < 205; i++ {
		msgs = append(msgs, fixtureMessage{Sender: "w", SenderName: "Writer", Content: fmt.Sprintf("m%d", i+1), At: now.Add(time.Duration(i) * time.Second)})
	}
	fx.messages(id, msgs...)
	fx.messages(exact, msgs[:100]...)
	obs := newTestObserver(t, fx.dir, time.Second)
	idPattern := regexp.MustCompile(`data-message-id="(\d+)"`)
	cursorPattern := regexp.MustCompile(`older_than_message_id=(\d+)`)
	seen := map[string]bool{}
	var order []string
	path := "/fragments/messages?group_id=" + id
	var pages []int
	for path != "" {
		code, body, _ := get(t, obs, path)
		if code != 200 {
			t.Fatalf("%s got %d", path, code)
		}
		var page []string
		for _, m := range idPattern.FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Errorf("message %s shown twice", m[1])
			}
			seen[m[1]] = true
			page = append(page, m[1])
		}
		order = append(page, order...)
		pages = append(pages, len(page))
		path = ""
		if m := cursorPattern.FindStringSubmatch(body); m != nil {
			path = "/fragments/messages?group_id=" + id + "&older_than_message_id=" + m[1]
		}
	}
	if fmt.Sprint(pages) != "[100 100 5]" {
		t.Errorf("got page sizes %v; want [100 100 5]", pages)
	}
	for i, got := range order {
		if want := fmt.Sprint(i + 1); got != want {
			t.Fatalf("position %d holds message %s; want %s (no gaps, chronological)", i, got, want)
		}
	}
	_, body, _ := get(t, obs, "/fragments/messages?group_id="+exact)
	if strings.Contains(body, "Load older") || len(idPattern.FindAllString(body, -1)) != 100 {
		t.Errorf("a group of exactly 100 messages got a Load older button or a wrong page")
	}
}

// fileDigest maps each file in dir to its contents.
func fileDigest(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasSuffix(path, "-shm") {
			return nil
		}
		data, err := os.ReadFile(path)
		out[filepath.Base(path)] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBrowsingChangesNoFile(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := seedShowcase(fx, now)
	before := fileDigest(t, fx.dir)
	obs := newTestObserver(t, fx.dir, 50*time.Millisecond)
	srv := httptest.NewServer(obs)
	defer srv.Close()
	paths := []string{"/", "/fragments/overview", "/fragments/chats", "/fragments/chats?group_id=" + id, "/fragments/chat?group_id=" + id,
		"/fragments/messages?group_id=" + id, "/fragments/messages?group_id=" + id + "&older_than_message_id=31",
		"/fragments/message?group_id=" + id + "&message_id=5", "/fragments/overview-group-row?group_id=" + id,
		"/fragments/analytics", "/fragments/analytics?range_value=2&range_unit=d&outcome=error:validation",
		"/fragments/analytics?range_value=30&range_unit=m", "/fragments/analytics?range_value=1&range_unit=Y&tool_name=send_message",
		"/fragments/storage", "/api/health", "/static/observer.js"}
	for _, p := range paths {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s got %d", p, resp.StatusCode)
		}
	}
	for i := 0; i < 3; i++ {
		obs.pollOnce()
	}
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			break
		}
	}
	resp.Body.Close()
	obs.dbs.closeAll()
	after := fileDigest(t, fx.dir)
	for name, data := range before {
		if !bytes.Equal(data, after[name]) {
			t.Errorf("%s changed while browsing", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok && strings.HasSuffix(name, ".sqlite3") {
			t.Errorf("browsing created %s", name)
		}
	}
}

func TestDisabledAuditStates(t *testing.T) {
	cases := map[string]func(fx *observeFixture) string{
		"no observability file": func(fx *observeFixture) string {
			id := fx.group("Solo", "", time.Now(), fixtureMember{"a", "A"})
			os.Remove(filepath.Join(fx.dir, catalogFileName))
			return id
		},
		"catalog only": func(fx *observeFixture) string {
			return fx.group("Solo", "", time.Now(), fixtureMember{"a", "A"})
		},
	}
	for name, seed := range cases {
		t.Run(name, func(t *testing.T) {
			fx := newObserveFixture(t)
			id := seed(fx)
			obs := newTestObserver(t, fx.dir, time.Second)
			checks := []struct{ path, want string }{
				{"/fragments/overview", "Audit analytics are disabled"},
				{"/fragments/overview", "Tool calls</strong><span>—"},
				{"/fragments/overview", "Solo"},
				{"/fragments/analytics", "Audit data is unavailable"},
				{"/fragments/storage", "No audit database exists yet."},
				{"/fragments/chats?group_id=" + id, "Solo"},
			}
			for _, c := range checks {
				if _, body, _ := get(t, obs, c.path); !strings.Contains(body, c.want) {
					t.Errorf("%s lacks %q", c.path, c.want)
				}
			}
		})
	}
	t.Run("missing directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "later")
		obs := newTestObserver(t, dir, time.Second)
		if _, body, _ := get(t, obs, "/fragments/overview"); !strings.Contains(body, "does not exist yet") {
			t.Errorf("overview of a missing directory lacks the notice")
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatal("observer created the groups directory")
		}
		fx := &observeFixture{t: t, dir: dir}
		fx.group("Arrived later", "", time.Now(), fixtureMember{"a", "A"})
		if _, body, _ := get(t, obs, "/fragments/overview"); !strings.Contains(body, "Arrived later") {
			t.Errorf("a group created after start does not appear")
		}
	})
}

func TestDeletedGroupStates(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := seedBasic(fx, now)
	obs := newTestObserver(t, fx.dir, time.Second)
	obs.pollOnce()
	sub := obs.hub.subscribe()
	defer obs.hub.unsubscribe(sub)
	if err := os.Remove(groupPath(fx.dir, id)); err != nil {
		t.Fatal(err)
	}
	os.Remove(groupPath(fx.dir, id) + "-wal")
	os.Remove(groupPath(fx.dir, id) + "-shm")
	obs.pollOnce()
	select {
	case ev := <-sub.ch:
		if want := `event: group.deleted` + "\n" + `data: {"group_id":"` + id + `"}`; !strings.HasPrefix(string(ev), want) {
			t.Errorf("got %q; want %q", ev, want)
		}
	default:
		t.Error("no group.deleted event")
	}
	checks := []struct {
		path   string
		status int
		want   string
	}{
		{"/fragments/chat?group_id=" + id, 200, "Chat unavailable"},
		{"/fragments/analytics", 200, "Project launch (deleted)"},
		{"/fragments/analytics?group_id=grp_" + strings.Repeat("e", 32), 200, "Unavailable group (deleted)"},
		{"/fragments/overview-group-row?group_id=" + id, 200, ""},
		{"/fragments/overview", 200, "Groups</strong><span>0"},
	}
	for _, c := range checks {
		code, body, _ := get(t, obs, c.path)
		// An empty want means the "empty" template: the body must be empty.
		if code != c.status || !strings.Contains(body, c.want) || (c.want == "" && body != "") {
			t.Errorf("%s got %d %.300q; want %d containing %q", c.path, code, body, c.status, c.want)
		}
	}
}

func TestVersion1AuditDatabase(t *testing.T) {
	fx := newObserveFixture(t)
	fx.mkdir()
	fx.script(catalogFileName, `CREATE TABLE tool_calls (id INTEGER PRIMARY KEY, occurred_at TEXT NOT NULL, tool_name TEXT NOT NULL, outcome TEXT NOT NULL, duration_ms INTEGER NOT NULL, error_category TEXT);
INSERT INTO tool_calls(occurred_at, tool_name, outcome, duration_ms, error_category) VALUES ('2026-01-01T00:00:00+00:00', 'list_groups', 'error', 17, 'validation');`)
	obs := newTestObserver(t, fx.dir, time.Second)
	audit, err := obs.readAuditSchema(context.Background())
	if err != nil {
		t.Fatalf("read audit schema: %v", err)
	}
	rel := obs.reliability(context.Background(), audit)
	if got := fmt.Sprint(rel.Calls, " ", rel.ErrorRate, " ", rel.P95); got != "1 100.0% 17 ms p95" {
		t.Errorf("got reliability %q; want %q", got, "1 100.0% 17 ms p95")
	}
	_, body, _ := get(t, obs, "/fragments/analytics")
	for _, want := range []string{"Total calls</strong><span>1", "17 / 17 ms", "raw rollup", "Validation Error", "List Groups"} {
		if !strings.Contains(body, want) {
			t.Errorf("v1 analytics lacks %q", want)
		}
	}
	_, body, _ = get(t, obs, "/fragments/storage")
	if !strings.Contains(body, "unknown (legacy audit database)") {
		t.Errorf("v1 storage lacks the legacy retention note")
	}
}

func TestToolAnalytics(t *testing.T) {
	fx := newObserveFixture(t)
	fx.enableAudit(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	gid := "grp_" + strings.Repeat("a", 32)
	fx.calls(
		fixtureCall{At: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), Tool: "send_message", Group: gid, Context: "writer", Caller: "Writer", Duration: 12},
		fixtureCall{At: time.Date(2026, 1, 1, 13, 0, 0, 0, time.UTC), Tool: "send_message", Group: gid, Context: "writer", Caller: "Writer", Outcome: "error", Category: "validation", Duration: 40},
		fixtureCall{At: time.Date(2025, 6, 1, 13, 0, 0, 0, time.UTC), Tool: "list_groups", Caller: "Old", Duration: 2000},
	)
	obs := newTestObserver(t, fx.dir, time.Second)
	obs.now = func() time.Time { return time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) }
	tests := []struct {
		query string
		want  []string
	}{
		{"range_value=2&range_unit=d", []string{"Total calls</strong><span>2", "12 / 40 ms", "50.0%", "2 matching calls", "1h rollup"}},
		{"range_value=2&range_unit=d&outcome=error:validation", []string{"Total calls</strong><span>1", "1 matching calls"}},
		{"range_value=2&range_unit=d&outcome=success", []string{"Total calls</strong><span>1", "12 / 12 ms", "0.0%"}},
		{"tool_name=list_groups", []string{"Total calls</strong><span>1", "1024 / 1024 ms", "1d rollup"}},
		{"range_value=11&range_unit=h", []string{"Total calls</strong><span>1", "1h rollup"}},
		{"range_value=360&range_unit=m", []string{"Total calls</strong><span>0", "1m rollup", "No calls match these filters."}},
		{"name=Writer&range_value=1&range_unit=Y", []string{"Total calls</strong><span>2", "30d rollup"}},
		{"range_value=3&range_unit=months", []string{"Total calls</strong><span>2"}},
		{"range_value=0", []string{"Total calls</strong><span>3", "1d rollup"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			_, body, _ := get(t, obs, "/fragments/analytics?"+tt.query)
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("analytics?%s lacks %q", tt.query, w)
				}
			}
		})
	}
}

func TestRangeStartAndTiers(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		amount, unit string
		want         time.Time
		ok           bool
	}{
		{"30", "s", now.Add(-30 * time.Second), true},
		{"5", "m", now.Add(-5 * time.Minute), true},
		{"2", "hours", now.Add(-2 * time.Hour), true},
		{"1", "M", time.Date(2026, 2, 28, 12, 0, 0, 0, time.UTC), true},
		{"1", "Y", time.Date(2025, 3, 31, 12, 0, 0, 0, time.UTC), true},
		{"0", "h", time.Time{}, false},
		{"1000001", "s", time.Time{}, false},
		{"1", "weeks", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.amount+tt.unit, func(t *testing.T) {
			got, ok := rangeStart(tt.amount, tt.unit, now)
			if ok != tt.ok || !got.Equal(tt.want) {
				t.Errorf("got %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	tiers := []struct {
		span time.Duration
		want string
	}{{6 * time.Hour, "1m"}, {7 * time.Hour, "1h"}, {15 * 24 * time.Hour, "1h"}, {16 * 24 * time.Hour, "1d"}, {400 * 24 * time.Hour, "30d"}}
	for _, tt := range tiers {
		if got, _ := chooseTier(auditFilter{From: now.Add(-tt.span)}, now, time.Time{}); got != tt.want {
			t.Errorf("span %v got tier %s; want %s", tt.span, got, tt.want)
		}
	}
	if got, _ := chooseTier(auditFilter{}, now, time.Time{}); got != "30d" {
		t.Errorf("no range and no data got tier %s; want 30d", got)
	}
}

func TestPollerPublishesChanges(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := seedBasic(fx, now)
	obs := newTestObserver(t, fx.dir, time.Second)
	obs.pollOnce()
	sub := obs.hub.subscribe()
	defer obs.hub.unsubscribe(sub)
	obs.pollOnce()
	if len(sub.ch) != 0 {
		t.Fatalf("an unchanged directory published %d events; want 0", len(sub.ch))
	}
	next := func() string {
		select {
		case ev := <-sub.ch:
			return strings.TrimSpace(string(ev))
		default:
			return ""
		}
	}
	fx.messages(id, fixtureMessage{Sender: "writer", SenderName: "Writer", Content: "a", At: now}, fixtureMessage{Sender: "writer", SenderName: "Writer", Content: "b", At: now})
	obs.pollOnce()
	got := []string{next(), next()}
	want := []string{"event: message.created\ndata: {\"group_id\":\"" + id + "\",\"message_id\":4}", "event: member.changed\ndata: {\"group_id\":\"" + id + "\"}"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q; want %q", got, want)
	}
	fx.wakeup(id, 4, "reader", now, time.Time{})
	fx.exec(id+".sqlite3", func(tx *sql.Tx) error {
		_, err := tx.Exec("UPDATE group_state SET metadata_revision = metadata_revision + 1")
		return err
	})
	fx.calls(fixtureCall{At: now, Tool: "get_users", Duration: 1})
	obs.pollOnce()
	got = []string{next(), next(), next(), next()}
	want = []string{"event: wakeup.changed\ndata: {\"group_id\":\"" + id + "\"}", "event: group.changed\ndata: {\"group_id\":\"" + id + "\"}", "event: tool_call.completed\ndata: {\"tool_call_id\":4}", ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q; want %q", got, want)
	}
	added := fx.group("Newcomer", "", now)
	obs.pollOnce()
	if got, want := next(), "event: group.changed\ndata: {\"group_id\":\""+added+"\"}"; got != want {
		t.Errorf("got %q for a new group; want %q", got, want)
	}
}

func TestEventHub(t *testing.T) {
	hub := newEventHub()
	slow := hub.subscribe()
	fast := hub.subscribe()
	for i := 0; i <= subscriberBuffer; i++ {
		hub.publish("message.created", map[string]int{"message_id": i})
		<-fast.ch
	}
	if n := hub.subscriberCount(); n != 1 {
		t.Errorf("got %d subscribers after overflow; want 1 (the slow one dropped)", n)
	}
	drained := 0
	for range slow.ch {
		drained++
	}
	if drained != subscriberBuffer {
		t.Errorf("slow subscriber got %d queued events then close; want %d", drained, subscriberBuffer)
	}
	hub.close()
	if _, ok := <-fast.ch; ok {
		t.Error("close left a subscriber open")
	}
	if _, ok := <-hub.subscribe().ch; ok {
		t.Error("subscribing after close returned an open stream")
	}
}

// serveObserver serves obs on a free loopback port until the test ends and
// returns its address; a serve error fails the test.
func serveObserver(t testing.TB, obs *observer) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- obs.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestEventsStream(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := seedBasic(fx, now)
	addr := serveObserver(t, newTestObserver(t, fx.dir, 50*time.Millisecond))
	resp, err := http.Get("http://" + addr + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("got Content-Type %q; want text/event-stream", ct)
	}
	r := bufio.NewReader(resp.Body)
	readEvent := func() (string, string) {
		var name, data string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("read stream: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && name != "":
				return name, data
			}
		}
	}
	name, data := readEvent()
	if want := `{"groups":{"` + id + `":{"latest_message_id":2,"member_fingerprint":"2","wakeup_fingerprint":"1"}},"latest_audit_id":3}`; name != "snapshot" || data != want {
		t.Errorf("got %s %s; want snapshot %s", name, data, want)
	}
	fx.messages(id, fixtureMessage{Sender: "reader", SenderName: "Reader", Content: "hello", At: now})
	name, data = readEvent()
	if want := `{"group_id":"` + id + `","message_id":3}`; name != "message.created" || data != want {
		t.Errorf("got %s %s; want message.created %s", name, data, want)
	}
}

func TestOfflineAssets(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(staticFiles, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := staticFiles.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range external.FindAllString(string(data), -1) {
			if !strings.HasSuffix(m, "//www.w3.org") {
				t.Errorf("%s references an external host: %s", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fx := newObserveFixture(t)
	seedBasic(fx, time.Now())
	obs := newTestObserver(t, fx.dir, time.Second)
	_, body, _ := get(t, obs, "/")
	for _, src := range regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(body, -1) {
		if !strings.HasPrefix(src[1], "/static/") {
			t.Errorf("page loads %q; want only embedded /static/ assets", src[1])
		}
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " style=") {
		t.Error("page has inline script or style, which the CSP blocks")
	}
}

// TestObserveReadsStoreWrittenGroups browses groups written by the server's
// own store, so the dashboard and the writer agree on the schema.
func TestObserveReadsStoreWrittenGroups(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "groups")
	s := newTestStore(t, dir)
	meta, err := s.createGroup("writer", "Store written", "by the MCP server")
	if err != nil {
		t.Fatal(err)
	}
	id := meta.groupID
	for _, m := range []struct{ ctx, name string }{{"writer", "Writer"}, {"reader", "Reader"}} {
		if err := s.joinGroup(id, m.ctx, m.name); err != nil {
			t.Fatal(err)
		}
	}
	obs := newTestObserver(t, dir, time.Second)
	obs.pollOnce()
	sub := obs.hub.subscribe()
	defer obs.hub.unsubscribe(sub)
	sent, err := s.sendMessage(id, outgoing{contextID: "writer", name: "Writer", text: "hello @reader <b>there</b>", priority: "urgent"})
	if err != nil {
		t.Fatal(err)
	}
	obs.pollOnce()
	select {
	case ev := <-sub.ch:
		if want := fmt.Sprintf(`event: message.created`+"\n"+`data: {"group_id":%q,"message_id":%d}`, id, sent.messageID); !strings.HasPrefix(string(ev), want) {
			t.Errorf("got %q; want %q", ev, want)
		}
	default:
		t.Error("a message written by the store published no event")
	}
	checks := []struct{ path, want string }{
		{"/fragments/overview", "Store written"},
		{"/fragments/overview", "Messages</strong><span>1"},
		{"/fragments/chats?group_id=" + id, "hello @reader &lt;b&gt;there&lt;/b&gt;"},
		{"/fragments/chats?group_id=" + id, "1 unread"},
		{"/fragments/chats?group_id=" + id, "by the MCP server"},
	}
	for _, c := range checks {
		if _, body, _ := get(t, obs, c.path); !strings.Contains(body, c.want) {
			t.Errorf("%s lacks %q", c.path, c.want)
		}
	}
}

func TestRunObserveFallsBackFromBusyDefaultPort(t *testing.T) {
	held, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", defaultObserverPort))
	if err == nil {
		defer held.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	restoreSignals := observeSignals
	observeSignals = func(parent context.Context) (context.Context, context.CancelFunc) { return ctx, cancel }
	defer func() { observeSignals = restoreSignals }()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- runObserve([]string{"--silent", "--groups-dir", t.TempDir()}, &stdout, &stderr) }()
	deadline := time.Now().Add(5 * time.Second)
	for stdout.String() == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("got exit %d; want 0", code)
	}
	url := strings.TrimSpace(stdout.String())
	if !strings.HasPrefix(url, "http://127.0.0.1:") || strings.HasSuffix(url, fmt.Sprintf(":%d/", defaultObserverPort)) {
		t.Fatalf("got URL %q; want a fallback loopback port", url)
	}
	if want := fmt.Sprintf("Port %d is unavailable; using %s\n", defaultObserverPort, url); stderr.String() != want {
		t.Errorf("got stderr %q; want %q", stderr.String(), want)
	}
}

// copyFile copies a fixture database into a test's groups directory, so
// read-only opens never leave sidecar files in testdata.
// TestObserveReadsOriginalsDatabases browses databases the Python original
// wrote: the interop group and an audit log with rollups. Latency
// percentiles read from the rollups must equal those computed from raw rows.
func TestObserveReadsOriginalsDatabases(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "groups")
	const id = "grp_cadcd261ac1a428b90ccb8b7c8633132"
	copyFile(t, filepath.Join("testdata", "interop", id+".sqlite3"), groupPath(dir, id))
	copyFile(t, filepath.Join("testdata", "audit", "original.sqlite3"), filepath.Join(dir, catalogFileName))
	obs := newTestObserver(t, dir, time.Second)

	db, err := sql.Open("sqlite", readOnlyDSN(filepath.Join(dir, catalogFileName)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var durations []int64
	rows, err := db.Query("SELECT duration_ms FROM tool_calls ORDER BY duration_ms")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d int64
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		durations = append(durations, d)
	}
	rows.Close()
	rank := func(p float64) int64 { return durations[int(math.Ceil(float64(len(durations))*p))-1] }
	var errs int64
	if err := db.QueryRow("SELECT COUNT(*) FROM tool_calls WHERE outcome = 'error'").Scan(&errs); err != nil {
		t.Fatal(err)
	}

	checks := []struct{ path, want string }{
		{"/fragments/overview", "Interop ✓ Café"},
		{"/fragments/overview", "Messages</strong><span>10"},
		{"/fragments/overview", fmt.Sprintf("Tool calls</strong><span>%d", len(durations))},
		{"/fragments/overview", fmt.Sprintf("%d ms p95", rank(0.95))},
		{"/fragments/overview", "<td>10</td>"},
		{"/fragments/chats?group_id=" + id, "Grüße aus München — ünïcödé"},
		{"/fragments/chats?group_id=" + id, "routing: mentioned"},
		{"/fragments/chats?group_id=" + id, "7 unread"},
		{"/fragments/analytics", fmt.Sprintf("Total calls</strong><span>%d", len(durations))},
		{"/fragments/analytics", fmt.Sprintf("%d / %d ms", rank(0.5), rank(0.95))},
		{"/fragments/analytics", fmt.Sprintf("Error rate</strong><span>%s", percentText(errs, int64(len(durations))))},
		{"/fragments/storage", fmt.Sprintf("Audit rows</dt><dd>%d", len(durations))},
	}
	for _, c := range checks {
		if _, body, _ := get(t, obs, c.path); !strings.Contains(body, c.want) {
			t.Errorf("%s lacks %q", c.path, c.want)
		}
	}
}
