package main

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// httpStream writes one SSE response. Every write carries a deadline, so a
// client that stops reading is cut off instead of holding the stream (and
// its share of the bounds) for ever; and when its exchange drops it (its
// queue overflowed, or the session ended) a write blocked on a full socket
// fails at once rather than at its deadline.
type httpStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration

	// mu orders deadline updates: once cut, no write may push the
	// deadline that cutOff set to the past back into the future.
	mu   sync.Mutex
	cut  bool
	done chan struct{} // closed by finish; ends the watcher goroutine
}

// errStreamCut is the error of a write to a stream that was cut off.
var errStreamCut = errors.New("http stream cut off")

// startHTTPStream sends the SSE headers; the stream is cut off when gone
// closes. The caller must call finish when the response is over.
func startHTTPStream(w http.ResponseWriter, timeout time.Duration, gone <-chan struct{}) (*httpStream, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	st := &httpStream{w: w, rc: http.NewResponseController(w), timeout: timeout, done: make(chan struct{})}
	go func() {
		select {
		case <-gone:
			st.cutOff()
		case <-st.done:
		}
	}()
	st.rc.SetWriteDeadline(time.Now().Add(timeout))
	w.WriteHeader(http.StatusOK)
	return st, st.rc.Flush()
}

// finish stops watching for the cut-off; the handler is returning.
func (st *httpStream) finish() { close(st.done) }

// cutOff fails the current write, if any, and every later one.
func (st *httpStream) cutOff() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.cut = true
	st.rc.SetWriteDeadline(time.Now())
}

// sendEvent writes one message as an SSE event.
func (st *httpStream) sendEvent(msg []byte) error {
	return st.writeFrame(fmt.Sprintf("event: message\ndata: %s\n\n", msg))
}

// keepAlive writes an SSE comment, which clients ignore and which tells
// intermediaries and the server the connection is still alive.
func (st *httpStream) keepAlive() error { return st.writeFrame(":\n\n") }

// writeFrame writes and flushes text within the write timeout, or returns
// errStreamCut once the stream has been cut off.
func (st *httpStream) writeFrame(text string) error {
	st.mu.Lock()
	if st.cut {
		st.mu.Unlock()
		return errStreamCut
	}
	st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	st.mu.Unlock()
	if _, err := fmt.Fprint(st.w, text); err != nil {
		return err
	}
	return st.rc.Flush()
}

// exchange passes one message to a session and writes its answer: 202 for
// a notification, a JSON body for an answer ready at once, or an SSE
// stream when the request runs on (a long call, a subscriptions/listen).
func (t *httpTransport) exchange(w http.ResponseWriter, r *http.Request, s *httpSession, body []byte, msg httpMessage) {
	s.enter()
	defer s.leave()
	if !msg.isRequest() {
		if reply := s.handle(r.Context(), body, r.RemoteAddr); reply != nil {
			writeHTTPJSON(w, http.StatusOK, reply) // a batch's answers, or an error
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	ex := s.router.expect(msg.ID)
	defer s.router.forget(ex)
	if reply := s.handle(r.Context(), body, r.RemoteAddr); reply != nil {
		// Answered at once, so nothing was written for it: only an
		// in-flight request writes through the router.
		writeHTTPJSON(w, replyStatus(reply, s.id == ""), reply)
		return
	}
	// The request runs on in the server's in-flight table.
	if !t.streamQuota.acquire(s.client) {
		s.handle(r.Context(), cancelledNotification(msg.ID), r.RemoteAddr)
		w.Header().Set("Retry-After", "10")
		httpRefuse(w, http.StatusTooManyRequests, "Too many open streams.")
		return
	}
	defer t.streamQuota.release(s.client)
	if !t.stream(w, r, s, ex) {
		// The client went away or was cut off: end the request, as
		// 2026-07-28 defines a closed stream to mean, and as the answer
		// could not reach the client anyway (streams are not resumable).
		s.handle(r.Context(), cancelledNotification(msg.ID), r.RemoteAddr)
	}
}

// replyStatus maps an answer to its HTTP status: 2026-07-28 gives protocol
// errors their own statuses; everything else is 200.
func replyStatus(reply any, stateless bool) int {
	o, _ := reply.(object)
	e, _ := o.get("error").(object)
	if e == nil || !stateless {
		return http.StatusOK
	}
	switch e.get("code") {
	case -32601:
		return http.StatusNotFound
	case -32020, -32021, -32022:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// cancelledNotification is the notifications/cancelled the transport hands
// the server when a request's stream ends before its answer.
func cancelledNotification(id []byte) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s,"reason":"HTTP stream closed"}}`, id)
}

// stream writes ex's messages as an SSE stream until the answer, if ex
// expects one (a GET stream runs until it is closed), and reports whether
// the answer was delivered.
func (t *httpTransport) stream(w http.ResponseWriter, r *http.Request, s *httpSession, ex *httpExchange) bool {
	st, err := startHTTPStream(w, t.limits.writeTimeout, ex.gone)
	defer st.finish()
	if err != nil {
		return false
	}
	tick := time.NewTicker(t.limits.keepAlive)
	defer tick.Stop()
	for {
		select {
		case ev := <-ex.ch:
			if st.sendEvent(ev.line) != nil {
				return false
			}
			if ev.answer {
				return true
			}
		case <-tick.C:
			if st.keepAlive() != nil {
				return false
			}
		case <-ex.gone:
			return false
		case <-r.Context().Done():
			return false
		case <-s.ended:
			return false
		}
	}
}

// get opens a 2025-era session's stream of server notifications.
func (t *httpTransport) get(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		// 2026-07-28 has no GET stream; a 2025-era client has a session.
		w.Header().Set("Allow", "POST, DELETE")
		httpRefuse(w, http.StatusMethodNotAllowed, "Method not allowed: GET needs an Mcp-Session-Id session.")
		return
	}
	if !accepts(r, "text/event-stream") {
		httpRefuse(w, http.StatusNotAcceptable, "Not Acceptable: the client must accept text/event-stream.")
		return
	}
	s := t.liveSession(w, r, id)
	if s == nil {
		return
	}
	if !t.streamQuota.acquire(s.client) {
		w.Header().Set("Retry-After", "10")
		httpRefuse(w, http.StatusTooManyRequests, "Too many open streams.")
		return
	}
	defer t.streamQuota.release(s.client)
	ex := newHTTPExchange(t.limits.queue)
	if !s.router.openStream(ex) {
		httpRefuse(w, http.StatusConflict, "Conflict: this session already has a GET stream open.")
		return
	}
	defer s.router.forget(ex)
	s.enter()
	defer s.leave()
	t.stream(w, r, s, ex)
}

// delete ends a 2025-era session at the client's request.
func (t *httpTransport) delete(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		httpRefuse(w, http.StatusBadRequest, "Bad Request: Mcp-Session-Id header is required.")
		return
	}
	s := t.session(r, id)
	if s == nil {
		httpRefuse(w, http.StatusNotFound, "Session not found.")
		return
	}
	t.endSession(s)
	w.WriteHeader(http.StatusNoContent)
}
