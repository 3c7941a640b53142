package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// newTestObserver returns an observer over dir that renders times in UTC.
func newTestObserver(t testing.TB, dir string, poll time.Duration) *observer {
	t.Helper()
	return newObserverAt(t, dir, poll, time.Now)
}

// newObserverAt is newTestObserver on the clock now.
func newObserverAt(t testing.TB, dir string, poll time.Duration, now func() time.Time) *observer {
	t.Helper()
	obs := newObserver(dir, poll, now, time.UTC)
	t.Cleanup(obs.dbs.closeAll)
	return obs
}

// loopbackRequest is a request for target (a path) as a browser on this
// machine sends it: origin-form, with a loopback Host header.
func loopbackRequest(method, target string) *http.Request {
	req := httptest.NewRequest(method, target, nil)
	req.Host = "127.0.0.1:8787"
	return req
}

// get performs a request against the observer's handler.
func get(t testing.TB, h http.Handler, target string) (int, string, http.Header) {
	t.Helper()
	req := loopbackRequest(http.MethodGet, target)
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
		{"demo", []string{"--demo"}, observeOptions{pollInterval: 500 * time.Millisecond, demo: true}},
		{"demo kept", []string{"--keep", "--demo", "--silent"}, observeOptions{pollInterval: 500 * time.Millisecond, demo: true, keep: true, silent: true}},
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
		{[]string{"--port"}, "flag needs an argument: --port"},
		{[]string{"--bogus"}, "unrecognized option: --bogus"},
		{[]string{"--keep"}, "--keep: only with --demo"},
		{[]string{"--demo", "--groups-dir", "x"}, "--demo: not allowed with --groups-dir"},
		{[]string{"--demo=yes"}, `invalid boolean value "yes" for --demo`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runObserve(tt.args, &stdout, &stderr, groupsDirFromEnv)
			if code != 2 {
				t.Errorf("got exit %d; want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) || !strings.HasPrefix(stderr.String(), "crosstalk-mcp observe: ") {
				t.Errorf("got stderr %q; want crosstalk-mcp observe: and %q", stderr.String(), tt.want)
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
			got, _, err := observeCommand{groupsDir: groupsDirFromEnv}.observeGroupsDir(context.Background(), tt.opts)
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	t.Run("default", func(t *testing.T) {
		t.Setenv("CROSSTALK_GROUPS_DIR", "")
		home := t.TempDir()
		t.Setenv("HOME", home)
		got, _, err := observeCommand{groupsDir: groupsDirFromEnv}.observeGroupsDir(context.Background(), observeOptions{})
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

// TestRunObserveServesOpensAndShutsDownWithOpenStreams runs the whole
// command. It is long because it follows one run from start to shutdown:
// splitting it would mean sharing the running observer between tests.
func TestRunObserveServesOpensAndShutsDownWithOpenStreams(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing-groups")
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()

	opened := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	cmd := observeCommand{&stdout, &stderr, groupsDirFromEnv,
		func(_ context.Context, url string) error { opened <- url; return fmt.Errorf("no browser here") },
		func(parent context.Context) (context.Context, context.CancelFunc) { return ctx, cancel }}
	done := make(chan int, 1)
	go func() {
		done <- cmd.run(observeArgs(t, []string{"--port", fmt.Sprint(port), "--poll-interval", "0.05", "--groups-dir", dir}...))
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

func TestRunObserveFallsBackFromBusyDefaultPort(t *testing.T) {
	held, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", defaultObserverPort))
	if err == nil {
		defer held.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	cmd := observeCommand{&stdout, &stderr, groupsDirFromEnv, nil,
		func(parent context.Context) (context.Context, context.CancelFunc) { return ctx, cancel }}
	done := make(chan int, 1)
	dir := t.TempDir()
	go func() { done <- cmd.run(observeArgs(t, []string{"--silent", "--groups-dir", dir}...)) }()
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
	if want := fmt.Sprintf("Port %d is unavailable; using %s\nShowing %s. Ctrl-C to stop.\n", defaultObserverPort, url, dir); stderr.String() != want {
		t.Errorf("got stderr %q; want %q", stderr.String(), want)
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

// TestRoutes requests every route once. It is long because of its table,
// one row per URL.
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
		{"/fragments/overview-group-row?group_id=" + id, 200, "text/html", []string{`data-overview-group-id="` + id + `"`, `<td class="num">2</td>`, "Needs attention"}},
		{"/fragments/overview-group-row?group_id=invalid", 400, "text/html", nil},
		{"/fragments/overview-group-row?group_id=grp_" + strings.Repeat("0", 32), 200, "text/html", nil},
		{"/fragments/chats", 200, "text/html", []string{`data-group-id="` + id + `"`, ">Project launch</button>", "Members", "Wakeups", `title="Reader" data-tip-id="reader">Reader</b>`, "#1 from Writer: first", "1 waiting", "0 unread", "2 unread"}},
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
		{"/static/observer-tips.js", 200, "javascript", []string{"role', 'tooltip'"}},
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
	req := loopbackRequest(http.MethodPost, "/fragments/overview")
	rec := httptest.NewRecorder()
	obs.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST to a fragment got %d; want 405", rec.Code)
	}
	if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
		t.Errorf("POST to a fragment got Allow %q; want %q", got, "GET, HEAD")
	}
}

// TestHostAndCSRFRejection checks the middleware's refusals. It is long
// because of its two tables, Host headers and maintenance POSTs.
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
		{"null origin with the right token", http.MethodPost, "/api/storage/reclaim", map[string]string{"X-CSRF-Token": obs.csrfToken, "Origin": "null"}, 403, "cross-origin"},
		{"null origin deleting", http.MethodPost, "/api/storage/delete-history", map[string]string{"X-CSRF-Token": obs.csrfToken, "Origin": "null", "X-Crosstalk-Confirm": "DELETE AUDIT HISTORY"}, 403, "cross-origin"},
		{"loopback origin of another scheme", http.MethodPost, "/api/storage/reclaim", map[string]string{"X-CSRF-Token": obs.csrfToken, "Origin": "file://127.0.0.1"}, 403, "cross-origin"},
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

// TestHostHeaderNotRequestLine sends requests whose request line names
// 127.0.0.1 while the Host header names another site. net/http takes r.Host
// from an absolute-form request line and drops the Host header, so the
// observer must refuse that form rather than trust the line.
func TestHostHeaderNotRequestLine(t *testing.T) {
	fx := newObserveFixture(t)
	seedBasic(fx, time.Now())
	obs := newTestObserver(t, fx.dir, time.Second)
	t.Run("httptest", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8787/api/health", nil)
		req.Host = "evil.example"
		rec := httptest.NewRecorder()
		obs.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden {
			t.Errorf("URL host 127.0.0.1 with Host evil.example got %d; want 403", rec.Code)
		}
	})
	addr := serveObserver(t, obs)
	tests := []struct {
		name, requestLine, host string
		want                    int
	}{
		{"origin form, loopback host", "GET /api/health HTTP/1.1", "127.0.0.1", 200},
		{"origin form, foreign host", "GET /api/health HTTP/1.1", "evil.example", 403},
		{"absolute form, foreign host", "GET http://127.0.0.1/api/health HTTP/1.1", "evil.example", 403},
		{"absolute form, loopback host", "GET http://127.0.0.1/api/health HTTP/1.1", "127.0.0.1", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A generous bound: a hung server fails the test instead of
			// stalling the suite.
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(conn, "%s\r\nHost: %s\r\nConnection: close\r\n\r\n", tt.requestLine, tt.host)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%q with Host %q got %d; want %d", tt.requestLine, tt.host, resp.StatusCode, tt.want)
			}
		})
	}
}

// observeArgs parses a test's observe command line, which must be valid.
func observeArgs(t testing.TB, args ...string) observeOptions {
	t.Helper()
	opts, err := parseObserveOptions(args)
	if err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return opts
}

// TestBrowserOpenerEndsWithDashboard: xdg-open often leaves the browser it
// starts running with its stdout; stopping the dashboard must not wait for
// that browser to exit.
func TestBrowserOpenerEndsWithDashboard(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "darwin" {
		t.Skip("fakes xdg-open")
	}
	bin := t.TempDir()
	script := "#!/bin/sh\nsleep 30 &\nexit 0\n" // a browser that outlives its opener
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- openWithPlatform(ctx, "http://127.0.0.1:1/") }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the opener was still running %v after the dashboard stopped", time.Since(start))
	}
}
