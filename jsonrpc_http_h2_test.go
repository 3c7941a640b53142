package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// pacedReader yields data a chunk at a time, pause before each: a body
// from a slow but steady uplink.
type pacedReader struct {
	data  []byte
	chunk int
	pause time.Duration
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	time.Sleep(p.pause)
	n := copy(b[:min(len(b), p.chunk)], p.data)
	p.data = p.data[n:]
	return n, nil
}

// newHTTP2Session serves a transport with writeTimeout over TLS, where the
// test's client speaks HTTP/2, and opens a session on it.
func newHTTP2Session(t *testing.T, writeTimeout time.Duration) (*httpTransport, *httpTestClient) {
	st := newTestStore(t, t.TempDir())
	tr := newHTTPTransport(st, newServerConfig(version, 20*time.Millisecond), nil, withDefaultLimits(httpLimits{writeTimeout: writeTimeout}))
	srv := httptest.NewUnstartedServer(newHTTPGuard(true, nil, nil, tr))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		tr.close()
		srv.Close()
	})
	c := &httpTestClient{tb: t, url: srv.URL + httpEndpoint, hc: srv.Client()}
	c.initialize()
	return tr, c
}

// TestHTTP2LargeBodyFromSlowSender is TestHTTPLargeBodyFromSlowSender over
// HTTP/2, which clients such as Go's and reqwest's negotiate over TLS: there a
// write deadline resets the stream when it passes, written to or not, so the
// body's allowance must cover the response's first write as well as the read.
func TestHTTP2LargeBodyFromSlowSender(t *testing.T) {
	_, c := newHTTP2Session(t, 1500*time.Millisecond)
	g := c.createGroup(map[string]any{"context_id": "ctx-a", "name": "uplink"})
	c.ok("join_group", map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice"}, nil)
	send := c.request("tools/call", map[string]any{"name": "send_message", "arguments": map[string]any{
		"caller_name": "t", "group_id": g, "context_id": "ctx-a", "name": "alice", "message": strings.Repeat("x", 4<<20)}})
	// 4 MiB in 16 pieces, 150 ms apart: 2.4 s, beyond the write timeout.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, c.url, &pacedReader{data: send, chunk: 256 << 10, pause: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(send))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.session)
	resp, err := c.hc.Do(req)
	var answer []byte
	if err == nil {
		defer resp.Body.Close()
		answer, err = io.ReadAll(resp.Body)
	}
	if err != nil || resp.ProtoMajor != 2 || !strings.Contains(string(answer), "message_id") {
		t.Errorf("a large body sent steadily over HTTP/2: got %.200q, %v; want its answer over HTTP/2", answer, err)
	}
}

// TestHTTP2SlowAnswerArrives: over HTTP/2 a request answered after longer
// than the write timeout (queued here behind its session's request in hand)
// must still be answered, as over HTTP/1.1: no write was due meanwhile.
func TestHTTP2SlowAnswerArrives(t *testing.T) {
	tr, c := newHTTP2Session(t, 300*time.Millisecond)
	sess := tr.sessionByID(c.session)
	sess.handleMu.Lock()
	time.AfterFunc(time.Second, sess.handleMu.Unlock)
	resp, err := c.tryDo(t.Context(), http.MethodPost, c.request("tools/call", map[string]any{"name": "list_groups", "arguments": map[string]any{"caller_name": "t"}}), nil)
	var answer []byte
	if err == nil {
		defer resp.Body.Close()
		answer, err = io.ReadAll(resp.Body)
	}
	if err != nil || resp.ProtoMajor != 2 || !strings.Contains(string(answer), "groups") {
		t.Errorf("an answer ready after the write timeout over HTTP/2: got %.200q, %v; want it", answer, err)
	}
}
