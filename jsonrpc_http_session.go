package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// httpSession is one HTTP session, a 2025-era Mcp-Session-Id one or one
// 2026-07-28 request, owning a server whose output goes to a router.
type httpSession struct {
	id     string // "" for a stateless request
	client string // remote IP and token (quotaClient), for the per-client bounds
	// owner is the SHA-256 of the token that opened the session (zero when
	// the server requires none): only that token's requests reach it.
	owner  [sha256.Size]byte
	srv    *server
	router *httpRouter

	// handleMu keeps this session's messages in arrival order, as stdio's
	// reader does: server is not safe for concurrent handle calls.
	handleMu sync.Mutex

	lastUsed atomic.Int64       // unix nanoseconds of the last request's end
	busy     atomic.Int32       // requests and streams in progress
	stop     context.CancelFunc // ends router.ctx, and so every response
	endOnce  sync.Once
}

// handle passes one message of r to the server and returns its immediate answer.
func (s *httpSession) handle(r *http.Request, body []byte) any {
	// A send's busy window starts when its request arrives, not when the
	// messages queued before it here are done.
	ctx, cancel := context.WithDeadlineCause(r.Context(), time.Now().Add(busyRetryWindow), errGroupBusy)
	defer cancel()
	s.handleMu.Lock()
	defer s.handleMu.Unlock()
	// A request whose client hung up while it waited here is not run: no
	// answer would reach it, and a wait_for_messages would take its mail.
	if r.Context().Err() != nil && readHTTPMessage(body).isRequest() {
		return nil
	}
	s.srv.request, s.srv.remote = ctx, r.RemoteAddr
	defer func() { s.srv.request = context.Background() }()
	return s.srv.handleLine(body)
}

// use brackets a request or stream (defer s.use()()) so that idle expiry spares it.
func (s *httpSession) use() (done func()) {
	s.busy.Add(1)
	return func() {
		s.lastUsed.Store(time.Now().UnixNano())
		s.busy.Add(-1)
	}
}

// idleSince reports whether s has no request or stream in progress and
// was last used before cutoff (unix nanoseconds): one that may be ended.
func (s *httpSession) idleSince(cutoff int64) bool {
	return s.busy.Load() == 0 && s.lastUsed.Load() < cutoff
}

// end stops the session's poller and ends its streams; it is idempotent.
func (s *httpSession) end() {
	s.endOnce.Do(func() {
		s.stop()
		s.srv.inflight.close()
		s.srv.subs.close()
	})
}

// httpRouter is an HTTP session's messageWriter: a request's messages go to
// the POST that asked, any other to the session's GET stream.
type httpRouter struct {
	ctx     context.Context // the session's; the GET stream ends with it
	queue   int             // httpLimits.queue: each exchange's bound
	mu      sync.Mutex
	waiting map[string]*httpExchange // by the request id's raw JSON
	stream  *httpExchange            // the GET stream, or nil
	backlog []httpEvent              // notifications before the GET stream opened
}

// httpBacklogMax bounds the notifications kept for a GET stream not open
// yet. Older ones are dropped: each is a change signal, so the newest matter.
const httpBacklogMax = 64

// httpEvent is one encoded message; answer marks a request's, ending its stream.
type httpEvent struct {
	line   []byte
	answer bool
}

// httpExchange is one open response (a POST awaiting its answer, or a GET
// stream). ctx ends when offer drops it for a full ch, or with its parent.
type httpExchange struct {
	id   string
	ch   chan httpEvent
	ctx  context.Context
	drop context.CancelFunc
}

// newExchange makes an exchange that holds up to r.queue messages and ends
// with parent.
func (r *httpRouter) newExchange(parent context.Context, id string) *httpExchange {
	ctx, drop := context.WithCancel(parent)
	return &httpExchange{id: id, ch: make(chan httpEvent, r.queue), ctx: ctx, drop: drop}
}

// offer queues ev without blocking; a full queue drops the exchange.
func (e *httpExchange) offer(ev httpEvent) {
	select {
	case e.ch <- ev:
	default:
		e.drop()
	}
}

// expect registers a request about to be handled, by its raw id, so that its
// messages reach the returned exchange. An id already waiting keeps its own,
// and an onStream request then gets nil: its answer would reach no stream.
func (r *httpRouter) expect(id json.RawMessage, onStream bool) *httpExchange {
	// Not the session's context: its end (SIGTERM) still answers in-flight
	// requests here.
	e := r.newExchange(context.Background(), string(id))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting[e.id] == nil {
		r.waiting[e.id] = e
	} else if onStream {
		return nil
	}
	return e
}

// forget unregisters an exchange once its response is over.
func (r *httpRouter) forget(e *httpExchange) {
	e.drop()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting[e.id] == e {
		delete(r.waiting, e.id)
	}
	if r.stream == e {
		r.stream = nil
	}
}

// openStream returns a new GET stream, handed the backlog, or nil when one
// is already open, so that notifications are never split between two.
func (r *httpRouter) openStream() *httpExchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stream != nil || r.ctx.Err() != nil {
		return nil
	}
	r.stream = r.newExchange(r.ctx, "")
	for _, ev := range r.backlog {
		r.stream.offer(ev)
	}
	r.backlog = nil
	return r.stream
}

// write delivers a session message to the GET stream, or keeps it for one.
func (r *httpRouter) write(msg any) error { return r.writeFor(nil, msg, false) }

// writeFor delivers a message of request id (nil: write's) to the POST that
// asked, or drops it when none waits. It never blocks: each queue drops a
// client that falls behind.
func (r *httpRouter) writeFor(id json.RawMessage, msg any, answer bool) error {
	ev := httpEvent{line: []byte(pyJSON(msg)), answer: answer}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e := r.waiting[string(id)]; {
	case id != nil && e != nil && msg == nil: // cancelled: end its stream, unanswered
		e.drop()
	case id != nil && e != nil:
		e.offer(ev)
	case id == nil && r.stream != nil:
		r.stream.offer(ev)
	case id == nil:
		if len(r.backlog) == httpBacklogMax {
			r.backlog = r.backlog[1:]
		}
		r.backlog = append(r.backlog, ev)
	}
	return nil
}

// exchange passes one message to a session and writes its answer: 202 for a
// notification, a JSON body for an answer ready at once, else an SSE stream.
func (t *httpTransport) exchange(w http.ResponseWriter, r *http.Request, s *httpSession, body []byte, msg httpMessage) {
	defer s.use()()
	// A request that answers on a stream takes its place there before it
	// runs: a wait_for_messages refused after it started may have taken
	// mail that its answer, never sent, would have carried.
	if msg.answersOnStream() {
		if !t.streamQuota.acquire(w, s.client) {
			return
		}
		defer t.streamQuota.release(s.client)
	}
	var ex *httpExchange
	if msg.isRequest() {
		if ex = s.router.expect(msg.ID, msg.answersOnStream()); ex == nil {
			writeHTTPJSON(w, http.StatusOK, pyJSON(errorResponse(msg.ID, errDuplicateID)))
			return
		}
		defer s.router.forget(ex)
	}
	http.NewResponseController(w).SetWriteDeadline(time.Time{}) // none while handled: HTTP/2 resets a stream at one; writes set theirs
	if reply := s.handle(r, body); reply != nil {
		// The answer's deadline starts now, not at the request's start: a
		// send stored after a slow body must still be answered.
		text := pyJSON(reply)
		http.NewResponseController(w).SetWriteDeadline(t.limits.deadline(len(text)))
		// An answer ready at once: only in-flight requests use the router.
		// 2026-07-28's protocol errors have HTTP statuses of their own, as has
		// an error to responses or notifications, alone (no ex) or in a batch
		// (202 or an error, never 200).
		status := http.StatusOK
		o, _ := reply.(object)
		if e, _ := o.get("error").(object); ex == nil && !batchHasRequest(body) {
			status = http.StatusBadRequest
		} else if s.id == "" && e != nil {
			switch e.get("code") {
			case -32601:
				status = http.StatusNotFound
			case -32020, -32021, -32022:
				status = http.StatusBadRequest
			}
		}
		writeHTTPJSON(w, status, text)
		return
	}
	if !msg.answersOnStream() { // a notification, or a request left unanswered
		http.NewResponseController(w).SetWriteDeadline(t.limits.deadline(0))
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// The request runs on in the server's in-flight table.
	if !t.stream(w, r, ex) {
		// A closed stream cancels the request, as 2026-07-28 defines; the
		// answer could not reach the client anyway (no resumption). At once,
		// not after the session's request in hand: a wait must take no mail.
		s.srv.inflight.cancel(msg.ID)
	}
}

// stream writes ex's messages as an SSE stream until the answer (a GET
// stream until it is closed) and reports whether the answer was delivered.
// Every write has a deadline, so a client that stops reading is cut off, and
// when ex drops a write blocked on a full socket fails at once.
func (t *httpTransport) stream(w http.ResponseWriter, r *http.Request, ex *httpExchange) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// write sets its deadline before it checks ex, and the cut-off moves it
	// to the past once ex is done, so no write outlives a cut-off.
	write := func(text string) error {
		rc.SetWriteDeadline(t.limits.deadline(len(text)))
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
			// A stream cut while idle still ends whole; a cut write's error is sticky.
			rc.SetWriteDeadline(t.limits.deadline(0))
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
		case <-tick.C: // keeps proxies from closing a quiet stream, finds a gone client
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
	if id == "" { // 2026-07-28 has no GET stream
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
