package main

import (
	"context"
	"net/http"
	"net/http/httptest"
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
	s, a, gid := newHTTPMember(t, "queued")
	b := s.client(t, "")
	b.initialize()
	if !b.trySend(gid, "ctx-b", "@alice read me") {
		t.Fatal("send failed")
	}
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
