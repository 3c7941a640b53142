package main

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// exchange passes one message to a session and writes its answer: 202 for
// a notification, a JSON body for an answer ready at once, or an SSE
// stream when the request runs on (a long call, a subscriptions/listen).
func (t *httpTransport) exchange(w http.ResponseWriter, r *http.Request, s *httpSession, body []byte, msg httpMessage) {
	defer s.use()()
	var ex *httpExchange
	if msg.isRequest() {
		ex = s.router.expect(msg.ID)
		defer s.router.forget(ex)
	}
	if reply := s.handle(r, body); reply != nil {
		// An answer ready at once, so nothing was written for it (only an
		// in-flight request writes through the router), a batch's answers,
		// or an error.
		writeHTTPJSON(w, replyStatus(reply, s.id == "" && ex != nil), reply)
		return
	}
	if ex == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// The request runs on in the server's in-flight table.
	delivered := false
	if t.streamQuota.acquire(w, s.client) {
		delivered = t.stream(w, r, ex)
		t.streamQuota.release(s.client)
	}
	if !delivered {
		// Refused, or the client went away or was cut off: end the request, as
		// 2026-07-28 defines a closed stream to mean, and as the answer could
		// not reach the client anyway (streams are not resumable).
		s.handle(r, fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s,"reason":"HTTP stream closed"}}`, msg.ID))
	}
}

// replyStatus maps an answer to its HTTP status: 2026-07-28 gives protocol
// errors their own statuses; everything else is 200.
func replyStatus(reply any, stateless bool) int {
	o, _ := reply.(object)
	if e, _ := o.get("error").(object); stateless && e != nil {
		switch e.get("code") {
		case -32601:
			return http.StatusNotFound
		case -32020, -32021, -32022:
			return http.StatusBadRequest
		}
	}
	return http.StatusOK
}

// stream writes ex's messages as an SSE stream until the answer, if ex
// expects one (a GET stream runs until it is closed), and reports whether
// the answer was delivered. Every write carries a deadline, so a client
// that stops reading is cut off instead of holding the stream (and its
// share of the bounds) for ever; and when ex drops (its queue overflowed,
// or the session ended) a write blocked on a full socket fails at once
// rather than at its deadline.
func (t *httpTransport) stream(w http.ResponseWriter, r *http.Request, ex *httpExchange) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// write sets its deadline before it checks ex, and the cut-off runs
	// only once ex is done: either the check sees ex done, or the cut-off
	// comes after the deadline and moves it to the past. So no write
	// outlives a cut-off.
	write := func(text string) error {
		rc.SetWriteDeadline(time.Now().Add(t.limits.writeTimeout))
		if err := ex.ctx.Err(); err != nil {
			return err
		}
		if _, err := fmt.Fprint(w, text); err != nil {
			return err
		}
		return rc.Flush()
	}
	cut := make(chan struct{})
	stopCut := context.AfterFunc(ex.ctx, func() {
		defer close(cut)
		rc.SetWriteDeadline(time.Now())
	})
	defer func() { // joins a started cut-off: w is not to be used after return
		if !stopCut() {
			<-cut
		}
	}()
	if write("") != nil { // flushes the headers
		return false
	}
	tick := time.NewTicker(t.limits.keepAlive)
	defer tick.Stop()
	for {
		select {
		case ev := <-ex.ch:
			if write(fmt.Sprintf("event: message\ndata: %s\n\n", ev.line)) != nil {
				return false
			}
			if ev.answer {
				return true
			}
		case <-tick.C:
			// An SSE comment, which clients ignore, tells intermediaries
			// and the server the connection is still alive.
			if write(":\n\n") != nil {
				return false
			}
		case <-ex.ctx.Done():
			return false
		case <-r.Context().Done():
			return false
		}
	}
}

// get opens a 2025-era session's stream of server notifications.
func (t *httpTransport) get(w http.ResponseWriter, r *http.Request, id string) {
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
	s := t.session(w, r, id, sessionGone)
	if s == nil || !t.streamQuota.acquire(w, s.client) {
		return
	}
	defer t.streamQuota.release(s.client)
	ex := s.router.openStream()
	if ex == nil {
		httpRefuse(w, http.StatusConflict, "Conflict: this session already has a GET stream open.")
		return
	}
	defer s.router.forget(ex)
	defer s.use()()
	t.stream(w, r, ex)
}

// delete ends a 2025-era session at the client's request.
func (t *httpTransport) delete(w http.ResponseWriter, r *http.Request, id string) {
	if s := t.session(w, r, id, "Session not found."); s != nil {
		t.endWhere(func(other *httpSession) bool { return other == s })
		w.WriteHeader(http.StatusNoContent)
	}
}
