package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// httpTestServer is a transport on a fresh groups directory behind the
// guard, served by httptest.
type httpTestServer struct {
	t   *httpTransport
	srv *httptest.Server
	dir string
	url string
	// serving counts the requests the transport has not returned from yet.
	serving *atomic.Int32
}

// withDefaultLimits fills l's zero fields from defaultHTTPLimits, so that a
// test names only the limit it shrinks.
func withDefaultLimits(l httpLimits) httpLimits {
	d := defaultHTTPLimits
	return httpLimits{
		maxBody: positiveOr(l.maxBody, d.maxBody), maxSessionsPerClient: positiveOr(l.maxSessionsPerClient, d.maxSessionsPerClient),
		sessionIdle: positiveOr(l.sessionIdle, d.sessionIdle), sessionReclaim: positiveOr(l.sessionReclaim, d.sessionReclaim),
		writeTimeout: positiveOr(l.writeTimeout, d.writeTimeout),
		queue:        positiveOr(l.queue, d.queue), keepAlive: positiveOr(l.keepAlive, d.keepAlive),
	}
}

// positiveOr returns v when it is set (positive), else def.
func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// newHTTPTestServer serves a loopback transport; token "" means none. A zero
// field of limits is defaultHTTPLimits'.
func newHTTPTestServer(tb testing.TB, token string, limits httpLimits) *httpTestServer {
	tb.Helper()
	tokens, err := newTokenTable(token, "")
	if err != nil {
		tb.Fatal(err)
	}
	return newHTTPTokensServer(tb, tokens, limits)
}

// newHTTPTokensServer serves a loopback transport that accepts tokens (nil:
// no token required).
func newHTTPTokensServer(tb testing.TB, tokens *tokenTable, limits httpLimits) *httpTestServer {
	tb.Helper()
	limits = withDefaultLimits(limits)
	dir := tb.TempDir()
	st, err := newStore(dir, time.Now)
	if err != nil {
		tb.Fatal(err)
	}
	t := newHTTPTransport(st, newServerConfig(version, 20*time.Millisecond), nil, limits)
	t.tokens = tokens
	serving := new(atomic.Int32)
	srv := httptest.NewServer(newHTTPGuard(true, tokens, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serving.Add(1)
		defer serving.Add(-1)
		t.ServeHTTP(w, r)
	})))
	tb.Cleanup(func() {
		srv.CloseClientConnections()
		t.close()
		srv.Close()
		st.close()
	})
	return &httpTestServer{t: t, srv: srv, dir: dir, url: srv.URL + httpEndpoint, serving: serving}
}

// newHTTPMember starts an HTTP test server without a token and a session
// on it whose context ctx-a, named alice, created and joined a group called
// groupName; it returns them and the group's id.
func newHTTPMember(tb testing.TB, groupName string) (*httpTestServer, *httpTestClient, string) {
	tb.Helper()
	s := newHTTPTestServer(tb, "", httpLimits{})
	a := s.client(tb, "")
	a.initialize()
	g := a.createGroup(map[string]any{"context_id": "ctx-a", "name": groupName})
	a.ok("join_group", map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice"}, nil)
	return s, a, g
}

// newHTTPMemberWithMail is newHTTPMember with one message to alice from
// another member, ctx-b: mail that a wait_for_messages would take.
func newHTTPMemberWithMail(tb testing.TB, groupName string) (*httpTestServer, *httpTestClient, string) {
	tb.Helper()
	s, a, g := newHTTPMember(tb, groupName)
	b := s.client(tb, "")
	b.initialize()
	if !b.trySend(g, "ctx-b", "@alice read me") {
		tb.Fatal("send failed")
	}
	return s, a, g
}

// httpTestClient is a minimal Streamable HTTP client: JSON or SSE answers,
// a session id once initialized.
type httpTestClient struct {
	tb      testing.TB
	url     string
	token   string
	session string
	version string       // MCP-Protocol-Version header, when set
	hc      *http.Client // nil: http.DefaultClient
	nextID  atomic.Int64
}

func (s *httpTestServer) client(tb testing.TB, token string) *httpTestClient {
	return &httpTestClient{tb: tb, url: s.url, token: token}
}

// do sends one HTTP request with the client's headers.
// listen opens a 2026-07-28 subscriptions/listen stream on uris, until ctx
// ends, and returns its response, checked to be 200 and an SSE stream.
func (c *httpTestClient) listen(ctx context.Context, uris ...string) *http.Response {
	c.tb.Helper()
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}}
	body := c.request("subscriptions/listen", map[string]any{
		"notifications": map[string]any{"resourceSubscriptions": append([]string{}, uris...)}, "_meta": meta})
	resp := c.do(ctx, http.MethodPost, body, map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		c.tb.Fatalf("subscriptions/listen: got status %d, %s; want 200 and an SSE stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp
}

func (c *httpTestClient) do(ctx context.Context, method string, body []byte, header map[string]string) *http.Response {
	c.tb.Helper()
	resp, err := c.tryDo(ctx, method, body, header)
	if err != nil {
		c.tb.Fatalf("%s %s: %v", method, c.url, err)
	}
	return resp
}

// tryDo is do for goroutines other than the test's: it returns the error.
func (c *httpTestClient) tryDo(ctx context.Context, method string, body []byte, header map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	if c.version != "" {
		req.Header.Set("MCP-Protocol-Version", c.version)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if host, ok := header["Host"]; ok {
		req.Host = host
	}
	if c.hc != nil {
		return c.hc.Do(req)
	}
	return http.DefaultClient.Do(req)
}

// request builds a JSON-RPC request body with a fresh id.
func (c *httpTestClient) request(method string, params any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.nextID.Add(1), "method": method, "params": params})
	return b
}

// call posts a request and returns its answer, read from JSON or SSE.
func (c *httpTestClient) call(method string, params any) *rpcMessage {
	c.tb.Helper()
	resp := c.do(context.Background(), http.MethodPost, c.request(method, params), nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.tb.Fatalf("%s: got status %d (%s); want 200", method, resp.StatusCode, b)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for msg := range sseMessages(resp.Body) {
			if msg.Method == "" {
				return msg
			}
		}
		c.tb.Fatalf("%s: SSE stream ended without an answer", method)
	}
	var msg rpcMessage
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		c.tb.Fatalf("%s: decode answer: %v", method, err)
	}
	return &msg
}

// sseMessages yields the JSON-RPC messages of an SSE body until it ends.
func sseMessages(body io.Reader) func(yield func(*rpcMessage) bool) {
	return func(yield func(*rpcMessage) bool) {
		sc := bufio.NewScanner(body)
		sc.Buffer(nil, 32<<20)
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			if d, ok := strings.CutPrefix(line, "data:"); ok {
				data.WriteString(strings.TrimPrefix(d, " "))
				continue
			}
			if line != "" || data.Len() == 0 {
				continue
			}
			var msg rpcMessage
			err := json.Unmarshal([]byte(data.String()), &msg)
			data.Reset()
			if err == nil && !yield(&msg) {
				return
			}
		}
	}
}

// initialize opens a 2025-11-25 session.
func (c *httpTestClient) initialize() {
	c.tb.Helper()
	resp := c.do(context.Background(), http.MethodPost, c.request("initialize", map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "http-test", "version": "1"}}), nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		c.tb.Fatalf("initialize: got status %d, session %q (%s); want 200 and a session", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), b)
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	c.version = "2025-11-25"
	resp = c.do(context.Background(), http.MethodPost, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		c.tb.Fatalf("notifications/initialized: got status %d; want 202", resp.StatusCode)
	}
}

// tool calls a tool and returns its reply.
func (c *httpTestClient) tool(name string, args map[string]any) toolReply {
	c.tb.Helper()
	req := toolRequest(name, args)
	reply, err := parseToolReply(c.call(req.Method, req.Params))
	if err != nil {
		c.tb.Fatalf("%s: %v", name, err)
	}
	return reply
}

// createGroup runs create_group with args, as ok does, and returns the
// new group's id.
func (c *httpTestClient) createGroup(args map[string]any) string {
	var g struct {
		GroupID string `json:"group_id"`
	}
	c.ok("create_group", args, &g)
	return g.GroupID
}

// ok calls a tool that must succeed and decodes its text into v.
func (c *httpTestClient) ok(name string, args map[string]any, v any) {
	c.tb.Helper()
	reply := c.tool(name, args)
	if reply.isError {
		c.tb.Fatalf("%s: got error %s; want success", name, reply.text)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(reply.text), v); err != nil {
			c.tb.Fatalf("%s: decode %.200s: %v", name, reply.text, err)
		}
	}
}

// openStream opens the session's GET stream and returns its messages; the
// stream ends when ctx does.
func (c *httpTestClient) openStream(ctx context.Context) <-chan *rpcMessage {
	c.tb.Helper()
	resp := c.do(ctx, http.MethodGet, nil, map[string]string{"Accept": "text/event-stream"})
	if resp.StatusCode != http.StatusOK {
		c.tb.Fatalf("GET stream: got status %d; want 200", resp.StatusCode)
	}
	ch := make(chan *rpcMessage, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		for msg := range sseMessages(resp.Body) {
			ch <- msg
		}
	}()
	return ch
}

// tryCall posts a request and decodes a JSON answer; ok is false when the
// server could not be reached or did not answer 200 with JSON.
func (c *httpTestClient) tryCall(method string, params any) (msg rpcMessage, ok bool) {
	resp, err := c.tryDo(context.Background(), http.MethodPost, c.request(method, params), nil)
	if err != nil {
		return msg, false
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && c.session == "" {
		c.session = resp.Header.Get("Mcp-Session-Id")
	}
	return msg, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&msg) == nil
}

// tryInitialize opens a session from a goroutine other than the test's.
func (c *httpTestClient) tryInitialize() bool {
	if _, ok := c.tryCall("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "http-test", "version": "1"}}); !ok || c.session == "" {
		return false
	}
	resp, err := c.tryDo(context.Background(), http.MethodPost, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), nil)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusAccepted
}

// trySend joins groupID as a context of its own on first use and sends
// text; it reports whether the server acknowledged the send as stored.
func (c *httpTestClient) trySend(groupID, contextID, text string) bool {
	args := map[string]any{"caller_name": "t", "group_id": groupID, "context_id": contextID, "name": contextID}
	if c.nextID.Load() < 3 {
		if msg, ok := c.tryCall("tools/call", map[string]any{"name": "join_group", "arguments": args}); !ok || msg.Error != nil {
			return false
		}
	}
	args["message"] = text
	msg, ok := c.tryCall("tools/call", map[string]any{"name": "send_message", "arguments": args})
	if !ok {
		return false
	}
	reply, err := parseToolReply(&msg)
	return err == nil && !reply.isError
}

// sessionByID returns the live session id names, whoever opened it.
func (t *httpTransport) sessionByID(id string) *httpSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sessions[id]
}

// held reports how many units are taken in total.
func (q *httpQuota) held() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sum
}
