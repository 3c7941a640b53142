package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// statusOf posts body with extra headers and returns the status and body.
func statusOf(c *httpTestClient, method string, body string, header map[string]string) (int, string) {
	c.tb.Helper()
	resp := c.do(context.Background(), method, []byte(body), header)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPSessionRunsTools(t *testing.T) {
	s, a, gid := newHTTPMember(t, "over http")
	a.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": "hello"}, nil)
	var msgs struct {
		Messages []struct {
			Text string `json:"message"`
		} `json:"messages"`
	}
	a.ok("get_all_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}, &msgs)
	if len(msgs.Messages) != 1 || msgs.Messages[0].Text != "hello" {
		t.Fatalf("get_all_messages: got %+v; want the one message sent", msgs.Messages)
	}
	// A session id is required after initialize, and must be known.
	b := s.client(t, "")
	if code, _ := statusOf(b, http.MethodPost, string(b.request("tools/list", nil)), nil); code != http.StatusBadRequest {
		t.Errorf("tools/list without a session: got status %d; want 400", code)
	}
	b.session = "no-such-session"
	if code, _ := statusOf(b, http.MethodPost, string(b.request("tools/list", nil)), nil); code != http.StatusNotFound {
		t.Errorf("tools/list with an unknown session: got status %d; want 404", code)
	}
	// DELETE ends the session; the id is then unknown.
	if code, _ := statusOf(a, http.MethodDelete, "", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE: got status %d; want 204", code)
	}
	if code, _ := statusOf(a, http.MethodPost, string(a.request("tools/list", nil)), nil); code != http.StatusNotFound {
		t.Errorf("tools/list after DELETE: got status %d; want 404", code)
	}
	if held := s.t.sessionQuota.held(); held != 0 {
		t.Errorf("sessions held after DELETE: got %d; want 0", held)
	}
}

// TestHTTPRefusesDeclaredOversizedBody shows that a POST declaring a body
// over the limit is answered 413 before the server reads a byte of it: the
// client here never sends the body, so a server that waited for it would
// answer only at its 30 s read deadline.
func TestHTTPRefusesDeclaredOversizedBody(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{maxBody: 1024})
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: 1048576\r\n\r\n", httpEndpoint, s.srv.Listener.Addr())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("got %v; want a 413 answer without the body sent", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("got status %d; want %d", resp.StatusCode, http.StatusRequestEntityTooLarge)
	}
}

// TestHTTPHostCheckWithoutToken shows the DNS-rebinding defence of a
// loopback bind that requires no token: a foreign Host is refused before
// anything runs, and loopback ones pass.
func TestHTTPHostCheckWithoutToken(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{})
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	for _, tt := range []struct {
		host string
		want int
	}{
		{"evil.example:80", http.StatusForbidden},
		{"crosstalk.example:443", http.StatusForbidden},
		{"localhost:80", http.StatusBadRequest}, // past the check, stopped for want of a session
		{"127.0.0.2:80", http.StatusBadRequest},
	} {
		t.Run(tt.host, func(t *testing.T) {
			if got, body := statusOf(s.client(t, ""), http.MethodPost, ping, map[string]string{"Host": tt.host}); got != tt.want {
				t.Errorf("got status %d (%s); want %d", got, body, tt.want)
			}
		})
	}
}

func TestHTTPRefusals(t *testing.T) {
	const token = "s3cret-token"
	s := newHTTPTestServer(t, token, httpLimits{maxBody: 1024})
	good := s.client(t, token)
	create := string(good.request("initialize", map[string]any{"protocolVersion": "2025-11-25"}))
	tests := []struct {
		name   string
		token  string
		method string
		body   string
		header map[string]string
		want   int
	}{
		{"missing token", "", http.MethodPost, create, nil, http.StatusUnauthorized},
		{"wrong token", "s3cret-tokem", http.MethodPost, create, nil, http.StatusUnauthorized},
		{"wrong scheme", "", http.MethodPost, create, map[string]string{"Authorization": "Basic " + token}, http.StatusUnauthorized},
		{"foreign origin", token, http.MethodPost, create, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"null origin", token, http.MethodPost, create, map[string]string{"Origin": "null"}, http.StatusForbidden},
		// With a token required, the token is the defence, so that a reverse
		// proxy passing its public Host works; stopped for want of a session.
		{"proxied host", token, http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Host": "crosstalk.example:443"}, http.StatusBadRequest},
		// Past the Host check (127/8 is loopback), stopped for want of a session.
		{"other loopback host", token, http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Host": "127.0.0.2:80"}, http.StatusBadRequest},
		{"oversized body", token, http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 2000) + `"}}`, nil, http.StatusRequestEntityTooLarge},
		{"not JSON", token, http.MethodPost, `{"jsonrpc":`, nil, http.StatusBadRequest},
		{"wrong content type", token, http.MethodPost, create, map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"accepts neither", token, http.MethodPost, create, map[string]string{"Accept": "text/html"}, http.StatusNotAcceptable},
		{"PUT", token, http.MethodPut, create, nil, http.StatusMethodNotAllowed},
		{"GET without a session", token, http.MethodGet, "", map[string]string{"Accept": "text/event-stream"}, http.StatusMethodNotAllowed},
		{"loopback origin", token, http.MethodPost, create, map[string]string{"Origin": "http://localhost:3000"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := s.client(t, tt.token)
			got, body := statusOf(c, tt.method, tt.body, tt.header)
			if got != tt.want {
				t.Errorf("got status %d (%s); want %d", got, body, tt.want)
			}
		})
	}
	// Refused requests touched nothing: only the successful initialize
	// made a session, and no group or database file exists.
	if held := s.t.sessionQuota.held(); held != 1 {
		t.Errorf("sessions: got %d; want 1 (the loopback-origin initialize)", held)
	}
	files, _ := filepath.Glob(filepath.Join(s.dir, "*"))
	if len(files) != 0 {
		t.Errorf("groups directory: got %v; want it untouched", files)
	}
}

func TestHTTPSessionBounds(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{maxSessionsPerClient: 2, sessionIdle: 200 * time.Millisecond})
	a, b := s.client(t, ""), s.client(t, "")
	a.initialize()
	b.initialize()
	c := s.client(t, "")
	code, _ := statusOf(c, http.MethodPost, string(c.request("initialize", map[string]any{"protocolVersion": "2025-11-25"})), nil)
	if code != http.StatusTooManyRequests {
		t.Fatalf("third session: got status %d; want 429", code)
	}
	// Idle sessions expire: their ids answer 404, and new sessions work.
	deadline := time.Now().Add(10 * time.Second)
	for s.t.sessionQuota.held() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := statusOf(a, http.MethodPost, string(a.request("tools/list", nil)), nil); code != http.StatusNotFound {
		t.Fatalf("expired session: got status %d; want 404", code)
	}
	a.session = ""
	a.initialize()
	if msg := a.call("tools/list", nil); msg.Error != nil || !strings.Contains(string(msg.Result), "send_message") {
		t.Errorf("tools/list in a new session: got %+v; want the tool list", msg)
	}
}

func TestHTTPStreamDeliversNotifications(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{keepAlive: 50 * time.Millisecond})
	a, b := s.client(t, ""), s.client(t, "")
	a.initialize()
	b.initialize()
	g := a.createGroup(map[string]any{"context_id": "ctx-a", "name": "wakeups"})
	var j struct {
		URI string `json:"wakeup_resource_uri"`
	}
	a.ok("join_group", map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice"}, &j)
	b.ok("join_group", map[string]any{"group_id": g, "context_id": "ctx-b", "name": "bob"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	stream := a.openStream(ctx)
	if msg := a.call("resources/subscribe", map[string]any{"uri": j.URI}); msg.Error != nil {
		t.Fatalf("subscribe %s: %+v", j.URI, msg.Error)
	}
	// A second GET stream on the session is refused.
	if code, _ := statusOf(a, http.MethodGet, "", map[string]string{"Accept": "text/event-stream"}); code != http.StatusConflict {
		t.Errorf("second GET stream: got status %d; want 409", code)
	}
	b.ok("send_message", map[string]any{"group_id": g, "context_id": "ctx-b", "name": "bob", "message": "@alice wake up"}, nil)
	timeout := time.After(30 * time.Second)
	for got := false; !got; {
		select {
		case msg, open := <-stream:
			if !open {
				t.Fatal("GET stream ended before the wakeup notification")
			}
			var n notification
			json.Unmarshal(msg.Params, &n)
			got = msg.Method == "notifications/resources/updated" && n.URI == j.URI
		case <-timeout:
			t.Fatal("got no wakeup notification on the GET stream within 30 s")
		}
	}
	// A client that disconnects mid-stream gives its stream back.
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for s.t.streamQuota.held() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if held := s.t.streamQuota.held(); held != 0 {
		t.Fatalf("streams after disconnect: got %d; want 0", held)
	}
	again := a.openStream(context.Background())
	_ = again
	if msg := a.call("ping", nil); msg.Error != nil {
		t.Errorf("ping after reconnecting the stream: %+v", msg.Error)
	}
}

func TestHTTPStatelessHeaderChecks(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{})
	c := s.client(t, "")
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}}
	body := string(c.request("tools/call", map[string]any{"name": "list_groups", "arguments": map[string]any{"caller_name": "x"}, "_meta": meta}))
	tests := []struct {
		name   string
		header map[string]string
	}{
		{"no version header", map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "list_groups"}},
		{"method mismatch", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list", "Mcp-Name": "list_groups"}},
		{"name missing", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}},
		{"name mismatch", map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "=?base64?ZGVsZXRlX2dyb3Vw?="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, got := statusOf(c, http.MethodPost, body, tt.header)
			if code != http.StatusBadRequest || !strings.Contains(got, "-32020") {
				t.Errorf("got %d %s; want 400 with HeaderMismatch -32020", code, got)
			}
		})
	}
}

func TestServeOptions(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("from-file\n"), 0o600)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "CROSSTALK_HTTP_TOKEN" {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name      string
		args      []string
		envToken  string
		wantAddr  string
		wantToken string
		wantErr   string
	}{
		{"stdio", nil, "", "", "", ""},
		{"bare port binds loopback", []string{"--http", "8808"}, "", "127.0.0.1:8808", "", ""},
		{"all interfaces need a token", []string{"--http", ":8808"}, "", "", "", "without a token"},
		{"public address needs a token", []string{"--http=192.0.2.1:8808"}, "", "", "", "without a token"},
		{"token from the environment", []string{"--http", "0.0.0.0:8808"}, "env-token", "0.0.0.0:8808", "env-token", ""},
		{"token file wins", []string{"--http", "0.0.0.0:8808", "--token-file", tokenFile}, "env-token", "0.0.0.0:8808", "from-file", ""},
		{"half TLS", []string{"--http", "8808", "--tls-cert", "c.pem"}, "", "", "", "together"},
		{"unknown option", []string{"--nope", "x"}, "", "", "", "unrecognized"},
		{"token file without --http", []string{"--token-file", tokenFile}, "", "", "", "need --http"},
		{"TLS without --http", []string{"--tls-cert", "c.pem", "--tls-key", "k.pem"}, "", "", "", "need --http"},
		{"origin without --http", []string{"--allow-origin", "https://a.example"}, "", "", "", "need --http"},
		{"tokens file without --http", []string{"--tokens-file", tokenFile}, "", "", "", "need --http"},
		{"stdio ignores the environment's token", nil, "env-token", "", "env-token", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := parseServeOptions(tt.args, env(tt.envToken))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || opts.httpAddr != tt.wantAddr || opts.token != tt.wantToken {
				t.Fatalf("got %+v, %v; want addr %q token %q", opts, err, tt.wantAddr, tt.wantToken)
			}
		})
	}
}

func TestNetworkFSWarning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	if got := existingAncestor(dir); got != filepath.Dir(filepath.Dir(dir)) {
		t.Errorf("existingAncestor: got %s; want the temp dir", got)
	}
	if w := networkFSWarning(dir, func(string) string { return "" }); w != "" {
		t.Errorf("local temp dir: got warning %q; want none", w)
	}
	w := networkFSWarningOn(dir, "FUSE", false)
	if !strings.Contains(w, "FUSE") || !strings.Contains(w, "serve --http") || !strings.Contains(w, "CROSSTALK_ALLOW_NETWORK_FS=1") {
		t.Errorf("FUSE dir: got warning %q; want one naming FUSE, serve --http and the switch", w)
	}
	if w := networkFSWarningOn(dir, "FUSE", true); w != "" {
		t.Errorf("with CROSSTALK_ALLOW_NETWORK_FS=1: got warning %q; want none", w)
	}
	// The dashboard shows the same warning on its overview.
	o := newObserver(dir, 0, time.Now, time.Local)
	o.fsWarning = w
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/fragments/overview", nil)
	req.Host = "127.0.0.1"
	o.ServeHTTP(rec, req)
	if body := rec.Body.String(); !strings.Contains(body, "is on FUSE, a network filesystem") {
		t.Errorf("dashboard overview: got %.300s; want the network filesystem warning", body)
	}
}

// TestHTTPAuditRecordsRemoteAddress checks that with auditing on, every tool
// call over HTTP, failed ones too, records the client's address, and the
// NAME of a per-agent token but never the token itself.
func TestHTTPAuditRecordsRemoteAddress(t *testing.T) {
	dir := t.TempDir()
	st, err := newStore(dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	a := openAuditLog(dir, auditConfig{enabled: true, days: 30, setting: "30"}, io.Discard, time.Now)
	a.readNamesFrom(st)
	tokens, err := newTokenTable("", writeTokensFile(t, filepath.Join(t.TempDir(), "tokens"), []string{"agent-a", "secret-a", "ctx-a"}))
	if err != nil {
		t.Fatal(err)
	}
	tr := newHTTPTransport(st, newServerConfig(version, time.Hour), a, defaultHTTPLimits)
	tr.tokens = tokens
	srv := httptest.NewServer(newHTTPGuard(true, tokens, nil, tr))
	defer func() {
		srv.Close()
		tr.close()
		a.close()
		st.close()
	}()
	c := &httpTestClient{tb: t, url: srv.URL + httpEndpoint, token: "secret-a"}
	c.initialize()
	var created struct {
		GroupID string `json:"group_id"`
	}
	c.ok("create_group", map[string]any{"context_id": "ctx-a", "name": "audited"}, &created)
	if reply := c.tool("get_group_metadata", map[string]any{"group_id": "grp_00000000000000000000000000000000"}); !reply.isError {
		t.Fatalf("get_group_metadata of a missing group: got %s; want an error", reply.text)
	}
	// A wait is recorded with its own connection's address, not that of a
	// call made on another connection of the session while it waited.
	c.ok("join_group", map[string]any{"group_id": created.GroupID, "context_id": "ctx-a", "name": "A"}, nil)
	waiter := &httpTestClient{tb: t, url: c.url, token: c.token, session: c.session, hc: &http.Client{Transport: &http.Transport{}}}
	waited := make(chan toolReply, 1)
	go func() {
		waited <- waiter.tool("wait_for_messages", map[string]any{"group_id": created.GroupID, "context_id": "ctx-a", "name": "A", "timeout_seconds": 2})
	}()
	time.Sleep(300 * time.Millisecond)
	other := &httpTestClient{tb: t, url: c.url, token: c.token, session: c.session, hc: &http.Client{Transport: &http.Transport{}}}
	other.ok("list_groups", map[string]any{}, nil)
	<-waited
	auditFlush(t, a)
	if n := observabilityInt(t, dir, `SELECT COUNT(DISTINCT json_extract(details_json, '$.remote_addr')) FROM tool_calls
		WHERE tool_name IN ('wait_for_messages', 'list_groups')`); n != 2 {
		t.Errorf("remote addresses of the wait and of the call made meanwhile: got %d; want 2, each its own", n)
	}
	for _, tt := range []struct {
		query string
		want  int
	}{
		{`SELECT COUNT(*) FROM tool_calls WHERE json_extract(details_json, '$.remote_addr') LIKE '127.0.0.1:%'`, 5},
		{`SELECT COUNT(*) FROM tool_calls WHERE json_extract(details_json, '$.token_name') = 'agent-a'`, 5},
		{`SELECT COUNT(*) FROM tool_calls WHERE details_json LIKE '%secret-a%'`, 0},
	} {
		if got := observabilityInt(t, dir, tt.query); got != tt.want {
			t.Errorf("%s: got %d; want %d (a success and a failure, never the token)", tt.query, got, tt.want)
		}
	}
}

// TestHTTPWaitForMessagesWakesOnFileEvents shows that HTTP sessions share
// the process's change watcher: with the safety poll an hour away, a
// wait_for_messages over HTTP still returns the message another session
// sends, instead of an empty result at its timeout.
func TestHTTPWaitForMessagesWakesOnFileEvents(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{})
	s.t.cfg.interval = time.Hour
	s.t.changes = newChangeWatcher(s.dir)
	t.Cleanup(s.t.changes.close)
	if !s.t.changes.native.Load() {
		t.Skip("no native file events on this platform")
	}
	a := s.client(t, "")
	a.initialize()
	g := a.createGroup(map[string]any{"context_id": "ctx-a", "name": "wait over http"})
	alice := map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice"}
	a.ok("join_group", alice, nil)
	b := s.client(t, "")
	b.initialize()
	sent := make(chan bool, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		sent <- b.trySend(g, "ctx-b", "@alice are you there?")
	}()
	var got struct {
		Messages []struct {
			Text string `json:"message"`
		} `json:"messages"`
	}
	start := time.Now()
	a.ok("wait_for_messages", map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice",
		"timeout_seconds": 20}, &got)
	if !<-sent {
		t.Fatal("the other session's send was not acknowledged")
	}
	if len(got.Messages) != 1 || got.Messages[0].Text != "@alice are you there?" {
		t.Fatalf("wait_for_messages after %v: got %+v; want the one message sent", time.Since(start), got.Messages)
	}
}

// TestHTTPRoutesAsTheServerParses shows that the transport tells requests
// from notifications by the server's exact keys: a key differing only in case
// neither hides a waiting request (answered 202, its stream never counted)
// nor invents one (a stream held open for an answer that never comes).
func TestHTTPRoutesAsTheServerParses(t *testing.T) {
	_, a, gid := newHTTPMember(t, "exact keys")
	wait := fmt.Sprintf(`"method":"tools/call","params":{"name":"wait_for_messages","arguments":{"caller_name":"t","group_id":%q,"context_id":"ctx-a","name":"alice","timeout_seconds":0.2}}`, gid)
	tests := []struct {
		name, body string
		want       int
	}{
		{"request with a METHOD key", `{"jsonrpc":"2.0","id":1,` + wait + `,"METHOD":""}`, http.StatusOK},
		{"request with an ID null key", `{"jsonrpc":"2.0","id":2,` + wait + `,"ID":null}`, http.StatusOK},
		{"notification with an ID key", `{"jsonrpc":"2.0","method":"notifications/initialized","ID":3}`, http.StatusAccepted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			resp := a.do(ctx, http.MethodPost, []byte(tt.body), nil)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want || err != nil {
				t.Errorf("got status %d (%s, %v); want %d", resp.StatusCode, b, err, tt.want)
			}
			if answered := strings.Contains(string(b), `"result"`); answered != (tt.want == http.StatusOK) {
				t.Errorf("got body %q; want an answer only to a request", b)
			}
		})
	}
}

// TestHTTPInitializeNotificationIsAnError: an initialize without an id, and
// without a session, is refused with a JSON-RPC error, not a body of null.
func TestHTTPInitializeNotificationIsAnError(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{})
	got, body := statusOf(s.client(t, ""), http.MethodPost, `{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}`, nil)
	var msg rpcMessage
	if err := json.Unmarshal([]byte(body), &msg); got != http.StatusBadRequest || err != nil || msg.Error == nil {
		t.Errorf("initialize without an id: got status %d, body %s; want 400 and a JSON-RPC error", got, body)
	}
	if held := s.t.sessionQuota.held(); held != 0 {
		t.Errorf("sessions: got %d; want none", held)
	}
}

// TestHTTPProtocolVersionOnEveryMethod sends an unsupported
// MCP-Protocol-Version on a live session's GET and DELETE: each is 400, as
// a POST's is (transports "Protocol Version Header": MUST), and the session
// lives on.
func TestHTTPProtocolVersionOnEveryMethod(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{})
	c := s.client(t, "")
	c.initialize()
	for _, method := range []string{http.MethodGet, http.MethodDelete, http.MethodPost} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		header := map[string]string{"MCP-Protocol-Version": "1900-01-01", "Accept": "text/event-stream, application/json"}
		resp := c.do(ctx, method, c.request("tools/list", nil), header) // a GET stream's body is never read
		if resp.Body.Close(); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s with MCP-Protocol-Version 1900-01-01: got %d; want 400", method, resp.StatusCode)
		}
		cancel()
	}
	c.ok("list_groups", nil, nil)
}

// TestHTTPRefusedNonRequestIsAnHTTPError posts messages that are not
// requests to a live session: one the server accepts gets 202, and one it
// cannot accept (a response to nothing, a malformed notification) an HTTP
// error status, never 200 (transports "Sending Messages to the Server": a
// response or notification gets 202 or an HTTP error, both MUSTs).
func TestHTTPRefusedNonRequestIsAnHTTPError(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{})
	c := s.client(t, "")
	c.initialize()
	tests := []struct {
		name, body string
		want       int
	}{
		{"notification", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}`, http.StatusAccepted},
		{"response to no request", `{"jsonrpc":"2.0","id":7,"result":{}}`, http.StatusBadRequest},
		{"notification of JSON-RPC 1.0", `{"jsonrpc":"1.0","method":"notifications/cancelled"}`, http.StatusBadRequest},
		{"not a message", `{}`, http.StatusBadRequest},
		{"request of JSON-RPC 1.0, answered", `{"jsonrpc":"1.0","id":8,"method":"ping"}`, http.StatusOK},
		{"batch, which 2025-11-25 has not", `[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}]`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, body := statusOf(c, http.MethodPost, tt.body, nil); got != tt.want {
				t.Errorf("got status %d (%s); want %d", got, body, tt.want)
			}
		})
	}
}

// TestHTTPBatchOfNonRequests posts 2025-03-26 batches: one of responses to
// nothing is refused with an HTTP error, as a lone one is, not answered 200
// with an array of errors; one of notifications gets 202; one with a request
// gets its answers.
func TestHTTPBatchOfNonRequests(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{})
	c := s.client(t, "")
	resp := c.do(context.Background(), http.MethodPost, c.request("initialize", map[string]any{
		"protocolVersion": "2025-03-26", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "http-test", "version": "1"}}), nil)
	resp.Body.Close()
	c.session, c.version = resp.Header.Get("Mcp-Session-Id"), "2025-03-26"
	const response, notification = `{"jsonrpc":"2.0","id":7,"result":{}}`, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}`
	tests := []struct {
		name, body string
		want       int
	}{
		{"responses to no request", "[" + response + "," + response + "]", http.StatusBadRequest},
		{"a response and a notification", "[" + response + "," + notification + "]", http.StatusBadRequest},
		{"notifications", "[" + notification + "," + notification + "]", http.StatusAccepted},
		{"a request and a response", `[{"jsonrpc":"2.0","id":1,"method":"ping"},` + response + "]", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, body := statusOf(c, http.MethodPost, tt.body, nil); got != tt.want {
				t.Errorf("got status %d (%s); want %d", got, body, tt.want)
			}
		})
	}
}
