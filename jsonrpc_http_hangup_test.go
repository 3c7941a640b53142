package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// lateWriter is a response whose first flush (a stream's headers) is slow
// to fail, as a write to a connection whose client is gone can be: it
// returns once taken reports true, or after a generous bound.
type lateWriter struct {
	*httptest.ResponseRecorder
	taken func() bool
}

func (w lateWriter) Flush() {
	for end := time.Now().Add(2 * time.Second); !w.taken() && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	w.ResponseRecorder.Flush()
}

// TestHTTPQueuedWaitOfGoneClientTakesNoMail: a wait_for_messages queued
// behind another request of its session, whose client hangs up meanwhile,
// must not run once its turn comes: no stream would carry the mail it took
// before the stream found the client gone.
func TestHTTPQueuedWaitOfGoneClientTakesNoMail(t *testing.T) {
	s, a, gid := newHTTPMemberWithMail(t, "queued")
	unread := func() int64 {
		n, _, _ := s.t.store.unreadCount(gid, "ctx-a")
		return n
	}
	sess := s.t.sessionByID(a.session)
	req := toolRequest("wait_for_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "timeout_seconds": 5})
	body := a.request(req.Method, req.Params)
	ctx, hangUp := context.WithCancel(t.Context())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, httpEndpoint, nil)
	sess.handleMu.Lock() // another request of the session in hand
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := lateWriter{httptest.NewRecorder(), func() bool { return unread() == 0 }}
		s.t.exchange(w, r, sess, body, readHTTPMessage(body))
	}()
	hangUp()
	sess.handleMu.Unlock()
	<-done
	sess.srv.inflight.wg.Wait()
	if n := unread(); n != 1 {
		t.Errorf("unread after the queued wait of a gone client: got %d; want 1", n)
	}
}

// TestHTTPDuplicateIDOfWaitIsRefused posts a wait_for_messages whose id a
// request of the same session still in hand uses: the wait must be refused
// at once, not run with its answer addressed to the other request's
// response, leaving its own stream open and the mail it took unread by no one.
func TestHTTPDuplicateIDOfWaitIsRefused(t *testing.T) {
	s, a, gid := newHTTPMemberWithMail(t, "duplicate")
	sess := s.t.sessionByID(a.session)
	sess.handleMu.Lock() // the first request with id 77 waits its turn
	unlock := sync.OnceFunc(sess.handleMu.Unlock)
	defer unlock()
	go func() {
		if resp, err := a.tryDo(t.Context(), http.MethodPost, []byte(`{"jsonrpc":"2.0","id":77,"method":"ping"}`), nil); err == nil {
			resp.Body.Close()
		}
	}()
	waitUntil(t, "the first request in the server", func() bool { return s.serving.Load() == 1 })

	req := toolRequest("wait_for_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "timeout_seconds": 1})
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 77, "method": req.Method, "params": req.Params})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	answered := make(chan *rpcMessage, 1)
	go func() {
		var msg *rpcMessage
		if resp, err := a.tryDo(ctx, http.MethodPost, body, nil); err == nil {
			defer resp.Body.Close()
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				for m := range sseMessages(resp.Body) {
					if m.Method == "" {
						msg = m
					}
				}
			} else if json.NewDecoder(resp.Body).Decode(&msg) != nil {
				msg = nil
			}
		}
		answered <- msg
	}()
	waitUntil(t, "the wait in the server", func() bool { return s.serving.Load() == 2 || len(answered) > 0 })
	unlock()
	msg := <-answered
	if msg == nil || msg.Error == nil || msg.Error.Code != errDuplicateID.code {
		t.Errorf("wait_for_messages with an id in use: got %+v; want error %d", msg, errDuplicateID.code)
	}
	if n, _, err := s.t.store.unreadCount(gid, "ctx-a"); err != nil || n != 1 {
		t.Errorf("unread after the refused wait: got %d, %v; want 1", n, err)
	}
}
