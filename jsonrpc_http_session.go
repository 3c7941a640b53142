package main

import (
	"bytes"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
)

// httpSession is one MCP session of the HTTP transport: a 2025-era client's
// Mcp-Session-Id session, or the single request of a stateless 2026-07-28
// client. It owns a server (the same session logic stdio runs) whose
// output goes to a router instead of stdout.
type httpSession struct {
	id     string // "" for a stateless request
	client string // remote IP, for the per-client bounds
	// remote is the address of the request being handled, for the audit
	// log: each POST may arrive on another connection. An in-flight call
	// recorded later reads the newest, which is as close as it gets.
	remote atomic.Pointer[string]
	srv    *server
	router *httpRouter

	// handleMu keeps this session's messages in arrival order, as the
	// stdio transport's single reader does: server is not safe for
	// concurrent handle calls. Long requests do not hold it: they run in
	// the server's in-flight table and answer through the router.
	handleMu sync.Mutex

	lastUsed atomic.Int64 // unix nanoseconds of the last request's end
	busy     atomic.Int32 // requests and streams in progress
	ended    chan struct{}
	endOnce  sync.Once
}

// handle passes one message from remote to the session's server and
// returns its immediate answer, or nil.
func (s *httpSession) handle(body []byte, remote string) any {
	s.handleMu.Lock()
	defer s.handleMu.Unlock()
	s.remote.Store(&remote)
	return s.srv.handleLine(body)
}

// enter and leave bracket a request or stream, so that idle expiry never
// ends a session that is in use.
func (s *httpSession) enter() { s.busy.Add(1) }

func (s *httpSession) leave() {
	s.lastUsed.Store(time.Now().UnixNano())
	s.busy.Add(-1)
}

// idleSince reports whether the session has been unused since before t.
func (s *httpSession) idleSince(t time.Time) bool {
	return s.busy.Load() == 0 && s.lastUsed.Load() < t.UnixNano()
}

// end stops the session's poller and ends its streams. It is safe to call
// more than once.
func (s *httpSession) end() {
	s.endOnce.Do(func() {
		close(s.ended)
		s.router.close()
		s.srv.inflight.close()
		s.srv.subs.close()
	})
}

// httpRouter is the messageWriter of an HTTP session's server: it delivers each message to the HTTP response it
// belongs to: an answer to the POST that asked, a progress or listen
// notification to its request's stream, anything else (a subscription's
// resources/updated) to the session's GET stream.
type httpRouter struct {
	mu      sync.Mutex
	waiting map[string]*httpExchange // by request id key
	tokens  map[string]*httpExchange // by progressToken key
	stream  *httpExchange            // the GET stream, or nil
	backlog [][]byte                 // notifications before the GET stream opened
	closed  bool
	queue   int // httpLimits.queue: each exchange's bound
}

// httpBacklogMax bounds the notifications kept for a GET stream that is not
// open yet. Older ones are dropped: each is a change signal that a client
// re-reads state after, so the newest matter most.
const httpBacklogMax = 64

// httpExchange is one open response: a POST waiting for its answer, or a
// GET stream. Messages queue in ch; a client too slow to drain it is cut
// off (overflow closes gone) rather than letting the queue grow.
type httpExchange struct {
	idKey    string
	tokenKey string
	ch       chan []byte
	gone     chan struct{}
	goneOnce sync.Once
}

// newHTTPRouter makes a router whose exchanges each queue up to queue
// messages (httpLimits.queue) before their client is cut off.
func newHTTPRouter(queue int) *httpRouter {
	return &httpRouter{waiting: map[string]*httpExchange{}, tokens: map[string]*httpExchange{}, queue: queue}
}

// newHTTPExchange makes an exchange that holds up to queue messages.
func newHTTPExchange(queue int) *httpExchange {
	return &httpExchange{ch: make(chan []byte, queue), gone: make(chan struct{})}
}

// drop ends the exchange's response.
func (e *httpExchange) drop() { e.goneOnce.Do(func() { close(e.gone) }) }

// offer queues msg without blocking; a full queue drops the exchange.
func (e *httpExchange) offer(msg []byte) {
	select {
	case e.ch <- msg:
	default:
		e.drop()
	}
}

// idKey turns a JSON-RPC id into a map key that is the same for the id as
// the client wrote it and as the server re-encoded it.
func idKey(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return "s" + s
		}
	}
	return "n" + string(raw)
}

// expect registers a request about to be handled, so that its answer and
// its notifications reach the returned exchange.
func (r *httpRouter) expect(id, progressToken json.RawMessage) *httpExchange {
	e := newHTTPExchange(r.queue)
	e.idKey = idKey(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiting[e.idKey] = e
	if progressToken != nil {
		e.tokenKey = idKey(progressToken)
		r.tokens[e.tokenKey] = e
	}
	if r.closed {
		e.drop()
	}
	return e
}

// forget unregisters an exchange once its response is over.
func (r *httpRouter) forget(e *httpExchange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting[e.idKey] == e {
		delete(r.waiting, e.idKey)
	}
	if e.tokenKey != "" && r.tokens[e.tokenKey] == e {
		delete(r.tokens, e.tokenKey)
	}
	if r.stream == e {
		r.stream = nil
	}
}

// openStream makes e the GET stream and hands it the backlog. It reports
// false when a GET stream is already open: one is enough, and refusing a
// second keeps notifications from being split between them.
func (r *httpRouter) openStream(e *httpExchange) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stream != nil || r.closed {
		return false
	}
	r.stream = e
	for _, msg := range r.backlog {
		e.offer(msg)
	}
	r.backlog = nil
	return true
}

// close ends every open response of the session.
func (r *httpRouter) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, e := range r.waiting {
		e.drop()
	}
	if r.stream != nil {
		r.stream.drop()
	}
}

// write receives one message of the session's server (an answer, a
// progress or listen notification, a poller notification) and routes it.
// It never blocks: every queue it feeds drops a client that falls behind.
func (r *httpRouter) write(msg any) error {
	line := []byte(pyJSON(msg))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routeLocked(line)
	return nil
}

// routedMessage is what routing reads of a message.
type routedMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProgressToken json.RawMessage            `json:"progressToken"`
		Meta          map[string]json.RawMessage `json:"_meta"`
	} `json:"params"`
}

// routeLocked delivers one message; r.mu is held.
func (r *httpRouter) routeLocked(line []byte) {
	var m routedMessage
	if json.Unmarshal(line, &m) != nil {
		logf("http: unroutable server message: %.80s", line)
		return
	}
	if m.Method == "" {
		if e := r.waiting[idKey(m.ID)]; e != nil {
			e.offer(line)
		}
		return // an answer nobody waits for: its client went away
	}
	if m.Params.ProgressToken != nil {
		if e := r.tokens[idKey(m.Params.ProgressToken)]; e != nil {
			e.offer(line)
			return
		}
	}
	if sub, ok := m.Params.Meta[metaSubscriptionID]; ok {
		if e := r.waiting[idKey(sub)]; e != nil {
			e.offer(line)
		}
		return
	}
	if r.stream != nil {
		r.stream.offer(line)
		return
	}
	if len(r.backlog) == httpBacklogMax {
		r.backlog = r.backlog[1:]
	}
	r.backlog = append(r.backlog, line)
}

// isAnswer reports whether a routed line is a JSON-RPC response (the end of
// a request's stream) rather than a notification.
func isAnswer(line []byte) bool {
	var m struct {
		Method *string `json:"method"`
	}
	return json.Unmarshal(line, &m) == nil && m.Method == nil
}
