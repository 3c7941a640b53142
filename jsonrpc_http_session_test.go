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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHTTPSlowClientCutOff floods the GET stream of a client that stops
// reading: it is cut off (by its full queue, or by a write that outlives
// its deadline) and its stream is counted out, while another session's
// stream and requests keep working.
func TestHTTPSlowClientCutOff(t *testing.T) {
	tests := []struct {
		name   string
		limits httpLimits
		burst  bool // overflow the queue once the writer is blocked
	}{
		// Writes never time out: only the full queue can cut it off,
		// and must do so while its writer is blocked on the socket.
		{"queue overflows", httpLimits{queue: 8, writeTimeout: time.Hour, keepAlive: time.Hour}, true},
		// The queue never fills: only the write deadline can.
		{"write times out", httpLimits{queue: 1 << 16, writeTimeout: 300 * time.Millisecond, keepAlive: time.Hour}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newHTTPTestServer(t, "", tt.limits)
			slow, other := s.client(t, ""), s.client(t, "")
			slow.initialize()
			other.initialize()
			resp := slow.do(t.Context(), http.MethodGet, nil, map[string]string{"Accept": "text/event-stream"})
			t.Cleanup(func() { resp.Body.Close() }) // never read before then
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("slow GET stream: got status %d; want 200", resp.StatusCode)
			}
			stream := other.openStream(t.Context())
			waitUntil(t, "two open streams", func() bool { return s.t.streamQuota.held() == 2 })
			// Large notifications, fed the way the session's server feeds
			// them, one at a time until one stays queued: the socket
			// buffers are full and the writer is blocked.
			big := object{{"jsonrpc", "2.0"}, {"method", "notifications/message"},
				{"params", object{{"level", "info"}, {"data", strings.Repeat("x", 16<<10)}}}}
			router := s.t.sessionByID(slow.session).router
			router.mu.Lock()
			ex := router.stream
			router.mu.Unlock()
			blocked := false
			for i := 0; i < 4000 && !blocked && s.t.streamQuota.held() == 2; i++ {
				router.write(big)
				drained := time.Now().Add(200 * time.Millisecond)
				for len(ex.ch) > 0 && time.Now().Before(drained) {
					time.Sleep(time.Millisecond)
				}
				blocked = len(ex.ch) > 0
			}
			if tt.burst {
				if !blocked {
					t.Fatal("the slow stream's writer never blocked; the test cannot tell a blocked write from a free one")
				}
				for range tt.limits.queue + 1 {
					router.write(big)
				}
			}
			waitUntil(t, "cut-off of the flooded stream (one stream left open)", func() bool { return s.t.streamQuota.held() == 1 })
			// The other session is untouched: its requests are answered
			// and its stream still delivers.
			if msg := other.call("ping", nil); msg.Error != nil {
				t.Errorf("ping on the other session: got %+v; want a result", msg.Error)
			}
			s.t.sessionByID(other.session).router.write(object{{"jsonrpc", "2.0"}, {"method", "notifications/message"},
				{"params", object{{"level", "info"}, {"data", "still here"}}}})
			select {
			case msg := <-stream:
				if msg == nil || !strings.Contains(string(msg.Params), "still here") {
					t.Errorf("other session's stream: got %+v; want the notification", msg)
				}
			case <-time.After(10 * time.Second):
				t.Error("other session's stream: got nothing within 10 s")
			}
			// The cut-off client's session survives; it may open a new
			// stream (its old one no longer counts as open).
			again := slow.do(t.Context(), http.MethodGet, nil, map[string]string{"Accept": "text/event-stream"})
			again.Body.Close()
			if again.StatusCode != http.StatusOK {
				t.Errorf("new GET stream after the cut-off: got status %d; want 200", again.StatusCode)
			}
		})
	}
}

// TestHTTPStatelessListenEndsWithStream opens a 2026-07-28
// subscriptions/listen stream: it outlives the write timeout (a deadline
// set while reading the body must not end it), delivers a change, and
// closing it cancels the listen: its request ends and its stream is
// counted out.
func TestHTTPStatelessListenEndsWithStream(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{writeTimeout: 300 * time.Millisecond, keepAlive: 50 * time.Millisecond})
	a := s.client(t, "")
	a.initialize()
	g := a.createGroup(map[string]any{"context_id": "ctx-a", "name": "listened"})
	a.ok("join_group", map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice"}, nil)
	uri := groupURI(g)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := s.client(t, "").listen(ctx, uri)
	msgs := make(chan *rpcMessage, 16)
	go func() {
		defer close(msgs)
		defer resp.Body.Close()
		for msg := range sseMessages(resp.Body) {
			msgs <- msg
		}
	}()
	next := func(what string) *rpcMessage {
		t.Helper()
		select {
		case msg, ok := <-msgs:
			if !ok {
				t.Fatalf("listen stream ended before %s", what)
			}
			return msg
		case <-time.After(10 * time.Second):
			t.Fatalf("listen stream: no %s within 10 s", what)
		}
		return nil
	}
	if msg := next("the acknowledgement"); msg.Method != "notifications/subscriptions/acknowledged" {
		t.Fatalf("first listen message: got %s; want the acknowledgement", msg.Method)
	}
	time.Sleep(1 * time.Second) // over three write timeouts
	if got := s.serving.Load(); got != 1 {
		t.Fatalf("requests in progress while listening: got %d; want 1", got)
	}
	a.ok("send_message", map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice", "message": "changed"}, nil)
	msg := next("the change")
	for msg.Method != "notifications/resources/updated" {
		msg = next("the change")
	}
	var n notification
	if json.Unmarshal(msg.Params, &n); n.URI != uri {
		t.Errorf("listen change: got URI %q; want %q", n.URI, uri)
	}

	cancel()
	waitUntil(t, "the listen request ended and its stream counted out", func() bool {
		return s.serving.Load() == 0 && s.t.streamQuota.held() == 0
	})
}

// TestHTTPCloseEndsStreams closes the transport under a 2025-era GET stream
// and a 2026-07-28 listen, as serve does before Shutdown: both handlers
// return, so Shutdown need not wait out its timeout.
func TestHTTPCloseEndsStreams(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{keepAlive: 50 * time.Millisecond})
	a := s.client(t, "")
	a.initialize()
	a.openStream(t.Context())
	resp := s.client(t, "").listen(t.Context())
	defer resp.Body.Close()
	waitUntil(t, "two open streams", func() bool { return s.t.streamQuota.held() == 2 })
	s.t.close()
	start := time.Now()
	for s.serving.Load() > 0 && time.Since(start) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.serving.Load(); got != 0 {
		t.Errorf("requests in progress 5 s after close: got %d; want 0", got)
	}
}

// TestHTTPRefusedWaitTakesNoMail calls wait_for_messages with its client's
// streams all open: the 429 comes before the call runs, so the mail it
// would have taken stays unread.
func TestHTTPRefusedWaitTakesNoMail(t *testing.T) {
	s, a, gid := newHTTPMemberWithMail(t, "quota")
	client := s.t.sessionByID(a.session).client
	for range httpMaxStreamsPerClient {
		if !s.t.streamQuota.acquire(httptest.NewRecorder(), client) {
			t.Fatal("the test's streams exceed the quota")
		}
	}
	req := toolRequest("wait_for_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "timeout_seconds": 5})
	resp := a.do(t.Context(), http.MethodPost, a.request(req.Method, req.Params), nil)
	resp.Body.Close()
	for range httpMaxStreamsPerClient {
		s.t.streamQuota.release(client)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("wait_for_messages at the quota: got status %d; want 429", resp.StatusCode)
	}
	var got messagesReply
	a.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}, &got)
	if len(got.Messages) != 1 {
		t.Errorf("unread after the refused wait: got %v; want the message", got.Messages)
	}
}

// TestHTTPCancelledWaitEndsItsStream: a client that cancels a waiting
// wait_for_messages (notifications/cancelled on another POST) must see the
// wait's SSE stream end, its slot returned, rather than a stream kept open
// with keep-alives until the client hangs up.
func TestHTTPCancelledWaitEndsItsStream(t *testing.T) {
	s, a, gid := newHTTPMember(t, "cancel")
	req := toolRequest("wait_for_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "timeout_seconds": 30})
	body := a.request(req.Method, req.Params)
	id := a.nextID.Load()
	resp := a.do(t.Context(), http.MethodPost, body, nil)
	defer resp.Body.Close()
	waitUntil(t, "the wait's stream", func() bool { return s.t.streamQuota.held() == 1 })
	cancel := a.do(t.Context(), http.MethodPost, []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+strconv.FormatInt(id, 10)+`}}`), nil)
	cancel.Body.Close()
	if cancel.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: got status %d; want 202", cancel.StatusCode)
	}
	ended := make(chan struct{})
	go func() { io.Copy(io.Discard, resp.Body); close(ended) }()
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
		t.Fatalf("the cancelled wait's stream is still open 3 s after the cancel (streams held: %d)", s.t.streamQuota.held())
	}
}

// TestHTTPUnansweredRequestEndsItsResponse: a request the server gives no
// answer, as the original does to notifications/initialized with an id, ends
// its response at once rather than holding an SSE stream open, uncounted by
// the stream bounds, until the client hangs up.
func TestHTTPUnansweredRequestEndsItsResponse(t *testing.T) {
	s := newHTTPTestServer(t, "", httpLimits{})
	a := s.client(t, "")
	a.initialize()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	resp, err := a.tryDo(ctx, http.MethodPost, []byte(`{"jsonrpc":"2.0","id":24,"method":"notifications/initialized"}`), nil)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("notifications/initialized with an id: status %d, %s; response still open after 3 s: %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
}

// TestHTTPVanishedWaitTakesNoMail: a client that hangs up on a waiting
// wait_for_messages while another request of its session is still being
// handled (here a send busy on a locked group) must not lose the mail that
// arrives meanwhile: the hang-up cancels the wait at once, not once the
// session's request in hand is done.
func TestHTTPVanishedWaitTakesNoMail(t *testing.T) {
	s, a, gid := newHTTPMember(t, "vanish")
	var other struct {
		GroupID string `json:"group_id"`
	}
	a.ok("create_group", map[string]any{"context_id": "ctx-a", "name": "locked"}, &other)
	a.ok("join_group", map[string]any{"group_id": other.GroupID, "context_id": "ctx-a", "name": "alice"}, nil)
	b := s.client(t, "")
	b.initialize()
	if !b.trySend(gid, "ctx-b", "hello first") {
		t.Fatal("send failed")
	}
	a.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}, nil)
	sess := s.t.sessionByID(a.session)

	ctx, hangUp := context.WithCancel(t.Context())
	req := toolRequest("wait_for_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "timeout_seconds": 30})
	resp := a.do(ctx, http.MethodPost, a.request(req.Method, req.Params), nil)
	waitUntil(t, "the wait's stream", func() bool { return s.t.streamQuota.held() == 1 })

	release := holdWriteLock(t, s.t.store.groupPath(other.GroupID))
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		a.tryCall("tools/call", map[string]any{"name": "send_message", "arguments": map[string]any{
			"caller_name": "t", "group_id": other.GroupID, "context_id": "ctx-a", "name": "alice", "message": "busy"}})
	}()
	waitUntil(t, "the busy send in hand", func() bool {
		if sess.handleMu.TryLock() {
			sess.handleMu.Unlock()
			return false
		}
		return true
	})
	hangUp()
	resp.Body.Close()
	inflightEmpty := func() bool {
		sess.srv.inflight.mu.Lock()
		defer sess.srv.inflight.mu.Unlock()
		return len(sess.srv.inflight.reqs) == 0
	}
	for end := time.Now().Add(time.Second); !inflightEmpty() && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if !b.trySend(gid, "ctx-b", "@alice after the hang-up") {
		t.Fatal("send failed")
	}
	time.Sleep(300 * time.Millisecond) // the wait, were it still running, takes the mail
	release()
	<-busy
	var got messagesReply
	a.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}, &got)
	if len(got.Messages) != 1 {
		t.Errorf("unread after the vanished wait: got %v; want the message sent after the hang-up", got.Messages)
	}
}

// TestHTTPWaitInEndedSessionTakesNoMail: a wait_for_messages handled in a
// session already ended (a 2025-era POST that found its session just before
// a DELETE, a revocation or serve's close ended it, or a 2026-07-28 request
// arriving after that close) has no stream to answer on, so it must leave
// the member's mail unread.
func TestHTTPWaitInEndedSessionTakesNoMail(t *testing.T) {
	for _, modern := range []bool{false, true} {
		t.Run(map[bool]string{false: "2025-era session", true: "2026-07-28 request"}[modern], func(t *testing.T) {
			s, a, gid := newHTTPMemberWithMail(t, "ended")
			req := toolRequest("wait_for_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "timeout_seconds": 1})
			r := httptest.NewRequest(http.MethodPost, httpEndpoint, nil)
			sess := s.t.sessionByID(a.session)
			s.t.endWhere(func(other *httpSession) bool { return other == sess })
			body := a.request(req.Method, req.Params)
			if modern {
				s.t.close()
				sess = s.t.newSession("", r)
				defer sess.end()
				body = a.request(req.Method, modernParams(req.Params.(map[string]any)))
			}
			sess.handle(r, body) // an error nobody reads: the session has ended
			sess.srv.inflight.wg.Wait()
			if n, _, err := s.t.store.unreadCount(gid, "ctx-a"); err != nil || n != 1 {
				t.Errorf("unread after a wait in an ended session: got %d, %v; want 1", n, err)
			}
		})
	}
}

// TestHTTPSlowBodyIsAnswered sends a body that takes most of writeTimeout
// to arrive, to a group another process holds for a moment: the send is
// stored, so its answer must reach the client, whose retry would store it
// twice. The answer's write deadline starts when the answer is ready.
func TestHTTPSlowBodyIsAnswered(t *testing.T) {
	s, a, g := newHTTPMember(t, "slow")
	s.t.limits.writeTimeout = time.Second
	args := map[string]any{"caller_name": "t", "group_id": g, "context_id": "ctx-a", "name": "alice", "message": "slow"}
	body := a.request("tools/call", map[string]any{"name": "send_message", "arguments": args})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	release := holdWriteLock(t, s.t.store.groupPath(g))
	time.AfterFunc(1300*time.Millisecond, release) // within the send's 3 s busy window
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json\r\n"+
		"Mcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s", a.session, len(body), body[:10])
	time.Sleep(700 * time.Millisecond)
	conn.Write(body[10:])
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var answer []byte
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		answer, err = io.ReadAll(resp.Body)
	}
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), "message_id") {
		t.Errorf("the slow body's send: got %q, %v; want 200 and the stored message's id", answer, err)
	}
	var all struct{ Messages []any }
	if a.ok("get_all_messages", map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice"}, &all); len(all.Messages) != 1 {
		t.Errorf("messages stored: got %d; want 1", len(all.Messages))
	}
}

// TestHTTPCloseAnswersWaits closes the transport, as SIGTERM does, while a
// wait_for_messages and a 2026-07-28 listen are open: as on stdio, the wait
// is answered (its empty result) and the listen gets its completion
// result, on their streams, rather than streams cut off unanswered.
func TestHTTPCloseAnswersWaits(t *testing.T) {
	s, a, gid := newHTTPMember(t, "closing")
	req := toolRequest("wait_for_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "timeout_seconds": 30})
	wait := a.do(t.Context(), http.MethodPost, a.request(req.Method, req.Params), nil)
	defer wait.Body.Close()
	listen := s.client(t, "").listen(t.Context())
	defer listen.Body.Close()
	waitUntil(t, "two open streams", func() bool { return s.t.streamQuota.held() == 2 })
	go s.t.close()
	for name, resp := range map[string]*http.Response{"wait_for_messages": wait, "subscriptions/listen": listen} {
		var answer *rpcMessage
		for msg := range sseMessages(resp.Body) {
			if msg.Method == "" {
				answer = msg
			}
		}
		if answer == nil || answer.Error != nil || !strings.Contains(string(answer.Result), map[bool]string{true: `messages`, false: `complete`}[name == "wait_for_messages"]) {
			t.Errorf("%s at close: got %+v; want its answer", name, answer)
		}
	}
}

// slowReader reads at most 512 KiB per 50 ms, about 10 MB/s.
type slowReader struct {
	r    io.Reader
	read int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.read >= 512<<10 {
		time.Sleep(50 * time.Millisecond)
		s.read = 0
	}
	n, err := s.r.Read(p[:min(len(p), 16<<10)])
	s.read += n
	return n, err
}

// TestHTTPLargeAnswerReachesSlowReader reads a large get_unread_messages
// answer, and a large wait_for_messages answer on its stream, more slowly
// than the write timeout allows for the whole answer but steadily: each
// answer arrives whole, as the mail it carries is marked read; a client
// that keeps reading is not one that "does not read".
func TestHTTPLargeAnswerReachesSlowReader(t *testing.T) {
	for _, tool := range []string{"get_unread_messages", "wait_for_messages"} {
		t.Run(tool, func(t *testing.T) {
			s, a, g := newHTTPMember(t, "large")
			s.t.limits.writeTimeout = 300 * time.Millisecond
			b := s.client(t, "")
			b.initialize()
			b.ok("join_group", map[string]any{"group_id": g, "context_id": "ctx-b", "name": "bob"}, nil)
			text := strings.Repeat("x", 6<<20) // about 0.6 s at slowReader's pace, twice the write timeout
			b.ok("send_message", map[string]any{"group_id": g, "context_id": "ctx-b", "name": "bob", "message": text}, nil)
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.(*net.TCPConn).SetReadBuffer(16 << 10)
			args := map[string]any{"group_id": g, "context_id": "ctx-a", "name": "alice"}
			if tool == "wait_for_messages" {
				args["timeout_seconds"] = 5
			}
			req := toolRequest(tool, args)
			body := a.request(req.Method, req.Params)
			fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
				"Mcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s", a.session, len(body), body)
			conn.SetReadDeadline(time.Now().Add(60 * time.Second))
			var answer []byte
			resp, err := http.ReadResponse(bufio.NewReader(&slowReader{r: conn}), nil)
			if err == nil {
				answer, err = io.ReadAll(resp.Body)
			}
			if err != nil || !strings.Contains(string(answer), text) {
				t.Errorf("%s answer read steadily: got %d bytes, %v; want the whole message", tool, len(answer), err)
			}
		})
	}
}

// TestHTTPLargeBodyFromSlowSender sends a large body more slowly than the
// write timeout allows for the whole of it but steadily, as an agent on a
// slow uplink does: a send is stored and answered, and a POST to a session
// that is gone (the server restarted meanwhile) gets its 404, which tells
// the client to initialize again; neither is a connection cut unanswered.
func TestHTTPLargeBodyFromSlowSender(t *testing.T) {
	s, a, g := newHTTPMember(t, "uplink")
	// Generous beside the refusal's own time under -race on a loaded
	// machine, which 300 ms was not; still shorter than the body's 2.4 s.
	s.t.limits.writeTimeout = 1500 * time.Millisecond
	send := a.request("tools/call", map[string]any{"name": "send_message", "arguments": map[string]any{
		"caller_name": "t", "group_id": g, "context_id": "ctx-a", "name": "alice", "message": strings.Repeat("x", 4<<20)}})
	tests := []struct {
		name, session string
		want          int
		answer        string
	}{
		{"send to a live session", a.session, http.StatusOK, "message_id"},
		{"send to a gone session", "gone", http.StatusNotFound, "Session not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json\r\n"+
				"Mcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n", tt.session, len(send))
			for chunk := range slices.Chunk(send, 256<<10) { // 4 MiB in 16 pieces, 150 ms apart: 2.4 s
				time.Sleep(150 * time.Millisecond)
				conn.Write(chunk)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			var answer []byte
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err == nil {
				answer, err = io.ReadAll(resp.Body)
			}
			if err != nil || resp.StatusCode != tt.want || !strings.Contains(string(answer), tt.answer) {
				t.Errorf("a large body sent steadily: got %.200q, %v; want %d and %q", answer, err, tt.want, tt.answer)
			}
		})
	}
}

// TestHTTPEndedStreamEndsCleanly ends a GET stream by DELETE and a waiting
// call's stream by notifications/cancelled, each while idle: the client
// reads a complete response to its end, not a connection cut mid-response
// (an error to it, as a lost server would be).
func TestHTTPEndedStreamEndsCleanly(t *testing.T) {
	tests := []struct {
		name string
		open func(c *httpTestClient, gid string) (*http.Response, string)
	}{
		{"GET stream, session deleted", func(c *httpTestClient, _ string) (*http.Response, string) {
			return c.do(t.Context(), http.MethodGet, nil, map[string]string{"Accept": "text/event-stream"}), ""
		}},
		{"waiting call, cancelled", func(c *httpTestClient, gid string) (*http.Response, string) {
			req := toolRequest("wait_for_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "timeout_seconds": 30})
			resp := c.do(t.Context(), http.MethodPost, c.request(req.Method, req.Params), nil)
			return resp, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, c.nextID.Load())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, a, gid := newHTTPMember(t, "ending")
			resp, cancel := tt.open(a, gid)
			defer resp.Body.Close()
			waitUntil(t, "the open stream", func() bool { return s.t.streamQuota.held() == 1 })
			if cancel != "" {
				statusOf(a, http.MethodPost, cancel, nil)
			} else {
				statusOf(a, http.MethodDelete, "", nil)
			}
			if _, err := io.ReadAll(resp.Body); err != nil {
				t.Errorf("reading the ended stream: got %v; want its end", err)
			}
		})
	}
}
