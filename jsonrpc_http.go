package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// httpTransport is the MCP Streamable HTTP transport on /mcp: 2025-era clients
// get Mcp-Session-Id sessions, each with its own server and GET stream; each
// 2026-07-28 request runs in a session of its own. Sessions share one store.
type httpTransport struct {
	store   *store
	cfg     serverConfig
	audit   *auditLog // nil when auditing is off
	limits  httpLimits
	changes *changeWatcher // when set, shared so that sessions wake on file events, not the poll
	// tokens, when set, are the bearer tokens the guard accepts (reloaded
	// by followTokens); a session belongs to the token that opened it.
	tokens *tokenTable

	sessionQuota, streamQuota *httpQuota

	mu       sync.Mutex
	sessions map[string]*httpSession
	// requests are the 2026-07-28 requests in progress, each a session of
	// its own, so that endWhere reaches a revoked token's open listen.
	requests map[*httpSession]bool

	done    context.Context // ends the janitor, the tokens watcher and every session
	stop    context.CancelFunc
	janitor sync.WaitGroup
}

// httpEndpoint is the MCP endpoint's path, the one most clients default to.
const httpEndpoint = "/mcp"

// newHTTPTransport starts the idle-session janitor; close stops it. It
// checks four times per idle period, so a session outlives its limit by a
// quarter at most; its client then gets 404 and starts a new one.
func newHTTPTransport(st *store, cfg serverConfig, audit *auditLog, limits httpLimits) *httpTransport {
	t := &httpTransport{
		store: st, cfg: cfg, audit: audit, limits: limits,
		sessionQuota: &httpQuota{total: httpMaxSessions, perClient: limits.maxSessionsPerClient, byClient: map[string]int{},
			retryAfter: "60", refusal: "Too many sessions: end one (DELETE) or wait for idle ones to expire."},
		streamQuota: &httpQuota{total: httpMaxStreams, perClient: httpMaxStreamsPerClient, byClient: map[string]int{},
			retryAfter: "10", refusal: "Too many open streams."},
		sessions: map[string]*httpSession{},
		requests: map[*httpSession]bool{},
	}
	t.done, t.stop = context.WithCancel(context.Background())
	t.every(limits.sessionIdle/4, nil, func(bool) {
		cutoff := time.Now().Add(-t.limits.sessionIdle).UnixNano()
		t.endWhere(func(s *httpSession) bool { return s.idleSince(cutoff) })
	})
	return t
}

// close ends every session and stops the janitor and the tokens watcher.
func (t *httpTransport) close() {
	t.stop()
	t.janitor.Wait()
	t.endWhere(func(*httpSession) bool { return true })
}

// every runs f(false) each period and f(true) on each hup signal until close.
func (t *httpTransport) every(period time.Duration, hup <-chan os.Signal, f func(signalled bool)) {
	t.janitor.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-t.done.Done():
				return
			case <-hup:
				f(true)
			case <-tick.C:
				f(false)
			}
		}
	})
}

// followTokens reloads t.tokens on SIGHUP (hup) and every tokensPoll until
// close, and ends the sessions whose token is no longer listed, or listed
// under another NAME, which their sends and audited calls would misstate.
func (t *httpTransport) followTokens(hup <-chan os.Signal) {
	t.every(tokensPoll, hup, func(force bool) {
		if changed, err := t.tokens.reload(force); err != nil {
			logf("%v; keeping the tokens loaded before", err)
		} else if changed {
			t.endWhere(func(s *httpSession) bool {
				now := t.tokens.find(s.owner)
				return now == nil || now.name != s.srv.cfg.tokenName
			})
		}
	})
}

// endWhere forgets the 2025-era sessions that match and ends them, and the
// 2026-07-28 requests that match, after the lock is released, since ending
// one waits for its in-flight work.
func (t *httpTransport) endWhere(match func(*httpSession) bool) {
	t.mu.Lock()
	var gone []*httpSession
	for id, s := range t.sessions {
		if match(s) {
			delete(t.sessions, id)
			t.sessionQuota.release(s.client)
			gone = append(gone, s)
		}
	}
	for s := range t.requests {
		if match(s) {
			gone = append(gone, s)
		}
	}
	t.mu.Unlock()
	for _, s := range gone {
		s.end()
	}
}

// admitSession takes a session unit for client, or answers 429; at a bound it first ends client's
// least recently used session idle for limits.sessionReclaim, as most clients never DELETE theirs.
func (t *httpTransport) admitSession(w http.ResponseWriter, client string) bool {
	if t.sessionQuota.acquire(nil, client) {
		return true
	}
	cutoff, lru := time.Now().Add(-t.limits.sessionReclaim).UnixNano(), (*httpSession)(nil)
	t.mu.Lock()
	for _, s := range t.sessions {
		if s.client == client && s.idleSince(cutoff) && (lru == nil || s.lastUsed.Load() < lru.lastUsed.Load()) {
			lru = s
		}
	}
	t.mu.Unlock()
	t.endWhere(func(s *httpSession) bool { return s == lru && s.idleSince(cutoff) })
	return t.sessionQuota.acquire(w, client)
}

// newSession makes a session writing to a router, owned by r's token and
// speaking only for the context ids that token may. Its context ends with
// the transport's, which also ends a 2026-07-28 request arriving after close
// ran endWhere: a listen left running would hold Shutdown for its timeout.
func (t *httpTransport) newSession(id string, r *http.Request) *httpSession {
	ctx, stop := context.WithCancel(t.done)
	router := &httpRouter{ctx: ctx, queue: t.limits.queue, waiting: map[string]*httpExchange{}}
	cfg, tok := t.cfg, bearer(r)
	if tok.patterns != nil {
		cfg.speaksFor, cfg.tokenName = t.tokens.speaksFor(tok), tok.name
	}
	srv := newServerWriting(ctx, t.store, router, cfg)
	srv.changes = t.changes
	srv.subs.followWatch(t.changes)
	s := &httpSession{id: id, client: quotaClient(r), owner: tok.sum, srv: srv, router: router, stop: stop}
	if t.audit != nil {
		srv.audit = t.audit.observe
	}
	s.lastUsed.Store(time.Now().UnixNano())
	return s
}

// quotaClient is whom r's sessions and streams count against: its address
// and its token, so that agents sharing an address (one machine, one proxy)
// never end or crowd out one another's sessions.
func quotaClient(r *http.Request) string {
	return fmt.Sprintf("%s %x", hostOf(r.RemoteAddr), bearer(r).sum)
}

// session returns the live session id names if r's token opened it, or
// refuses the request (400 without an id, else 404 as for an unknown id).
func (t *httpTransport) session(w http.ResponseWriter, r *http.Request, id, notFound string) *httpSession {
	if id == "" {
		httpRefuse(w, http.StatusBadRequest, "Bad Request: Mcp-Session-Id header is required.")
		return nil
	}
	t.mu.Lock()
	s := t.sessions[id]
	t.mu.Unlock()
	if s == nil || s.owner != bearer(r).sum {
		httpRefuse(w, http.StatusNotFound, notFound)
		return nil
	}
	return s
}

// sessionGone tells a client whose POST or GET named an unknown session to initialize again.
const sessionGone = "Session not found: it expired or was ended; initialize a new one."

// ServeHTTP answers the MCP endpoint.
func (t *httpTransport) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != httpEndpoint {
		http.NotFound(w, r)
		return
	}
	// The server has no WriteTimeout (SSE streams must outlive one), so each
	// response gets a deadline of its own, which streams extend per write.
	http.NewResponseController(w).SetWriteDeadline(t.limits.deadline(0))
	id, v := r.Header.Get("Mcp-Session-Id"), r.Header.Get("Mcp-Protocol-Version")
	switch stateless := r.Method == http.MethodPost && v > supportedProtocolVersions[0]; { // post checks its version against its body
	case v != "" && !stateless && !slices.Contains(allProtocolVersions, v):
		httpRefuse(w, http.StatusBadRequest, "Bad Request: unsupported MCP-Protocol-Version "+v+".")
	case r.Method == http.MethodPost:
		t.post(w, r, id, stateless)
	case r.Method == http.MethodGet:
		t.get(w, r, id)
	case r.Method == http.MethodDelete:
		t.delete(w, r, id)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		httpRefuse(w, http.StatusMethodNotAllowed, "Method not allowed.")
	}
}

// httpMessage is what the transport reads of a POSTed message to route it,
// and batchRefusal of each item of a batch.
type httpMessage struct {
	ID                json.RawMessage
	Method, Name, URI string
	Meta              requestMeta // Meta.protocolVersion is 2026-07-28's per-request version, or ""
}

// readHTTPMessage reads body as the server will (splitObject's exact keys,
// not encoding/json's case-folded ones), so that the two agree on whether it
// is a request: one the transport took for a notification would run unbounded,
// its stream never counted, its answer dropped.
func readHTTPMessage(body []byte) httpMessage {
	m, _ := splitObject(body)
	p, _ := splitObject(m["params"])
	msg := httpMessage{ID: m["id"], Meta: readRequestMeta(m["params"])}
	msg.Method, _ = decodeJSONString(m["method"])
	msg.Name, _ = decodeJSONString(p["name"])
	msg.URI, _ = decodeJSONString(p["uri"])
	return msg
}

// isRequest reports whether the message expects an answer.
func (m httpMessage) isRequest() bool {
	return m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null"
}

// batchHasRequest reports whether body is a 2025-03-26 batch holding a
// request; a lone message is none.
func batchHasRequest(body []byte) bool {
	var batch []json.RawMessage
	json.Unmarshal(body, &batch) // not an array: batch stays empty
	return slices.ContainsFunc(batch, func(item json.RawMessage) bool { return readHTTPMessage(item).isRequest() })
}

// answersOnStream reports whether the message is one of the requests the
// server runs on in its in-flight table, answering on a stream: a waiting
// tool's call (startWaitingCall) and a listen.
func (m httpMessage) answersOnStream() bool {
	waiting := toolsByName[m.Name]
	return m.isRequest() && (m.Method == "subscriptions/listen" || m.Method == "tools/call" && waiting != nil && waiting.wait != nil)
}

// post handles one POSTed JSON-RPC message (or a 2025-03-26 batch); stateless: its version header is past 2025's.
func (t *httpTransport) post(w http.ResponseWriter, r *http.Request, id string, stateless bool) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		httpRefuse(w, http.StatusUnsupportedMediaType, "Unsupported Media Type: Content-Type must be application/json.")
		return
	}
	if !accepts(r, "application/json") && !accepts(r, "text/event-stream") {
		httpRefuse(w, http.StatusNotAcceptable, "Not Acceptable: the client must accept application/json and text/event-stream.")
		return
	}
	// A declared length over the limit is refused before a byte is read, an
	// undeclared one where it passes the limit; a body that trickles in for
	// longer than writeTimeout plus 1 s per 64 KiB declared is cut off, and
	// the refusal of a body that came has a write deadline from then.
	var body []byte
	var err error
	if rc := http.NewResponseController(w); r.ContentLength <= t.limits.maxBody {
		allowance := t.limits.deadline(int(max(r.ContentLength, 0)))
		rc.SetReadDeadline(allowance)
		rc.SetWriteDeadline(allowance) // HTTP/2 resets a stream at its write deadline, written to or not
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, t.limits.maxBody))
		rc.SetWriteDeadline(t.limits.deadline(0))
	}
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge || r.ContentLength > t.limits.maxBody {
		httpRefuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body exceeds %d bytes.", t.limits.maxBody))
		return
	}
	if err != nil {
		httpRefuse(w, http.StatusBadRequest, "Bad Request: could not read the body.")
		return
	}
	body = bytes.TrimSpace(body)
	if !json.Valid(body) {
		writeHTTPJSON(w, http.StatusBadRequest, pyJSON(errorResponse(nil, errParse)))
		return
	}
	msg := readHTTPMessage(body)
	switch {
	case msg.Meta.protocolVersion != "" || stateless:
		t.postStateless(w, r, body, msg)
	case id == "" && msg.Method == "initialize" && msg.isRequest():
		t.postInitialize(w, r, body)
	default:
		if s := t.session(w, r, id, sessionGone); s != nil {
			t.exchange(w, r, s, body, msg)
		}
	}
}

// accepts reports whether r's Accept header (missing admits all) admits mediaType.
func accepts(r *http.Request, mediaType string) bool {
	header := r.Header.Values("Accept")
	return len(header) == 0 || slices.ContainsFunc(strings.Split(strings.Join(header, ","), ","), func(part string) bool {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		return mt == mediaType || mt == "*/*" || mt == strings.Split(mediaType, "/")[0]+"/*"
	})
}

// postInitialize starts a 2025-era session, kept only if initialize succeeds.
func (t *httpTransport) postInitialize(w http.ResponseWriter, r *http.Request, body []byte) {
	if !t.admitSession(w, quotaClient(r)) {
		return
	}
	s := t.newSession(randomHex(16), r)
	reply := s.handle(r, body)
	if o, ok := reply.(object); !ok || o.get("error") != nil {
		t.sessionQuota.release(s.client)
		s.end()
		writeHTTPJSON(w, http.StatusBadRequest, pyJSON(reply))
		return
	}
	t.mu.Lock()
	t.sessions[s.id] = s
	t.mu.Unlock()
	if t.tokenRevoked(s) {
		t.endWhere(func(other *httpSession) bool { return other == s })
		refuseUnauthorized(w)
		return
	}
	w.Header().Set("Mcp-Session-Id", s.id)
	writeHTTPJSON(w, http.StatusOK, pyJSON(reply))
}

// postStateless answers a 2026-07-28 request, whose mirrored headers must agree, in a session of its own.
func (t *httpTransport) postStateless(w http.ResponseWriter, r *http.Request, body []byte, msg httpMessage) {
	if err := checkMirroredHeaders(r, msg); err != nil {
		writeHTTPJSON(w, http.StatusBadRequest, pyJSON(errorResponse(msg.ID, &rpcError{-32020, "Header mismatch: " + err.Error()})))
		return
	}
	s := t.newSession("", r)
	t.mu.Lock()
	t.requests[s] = true
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.requests, s)
		t.mu.Unlock()
		s.end() // before the handler returns: end waits for in-flight work
	}()
	if t.tokenRevoked(s) {
		refuseUnauthorized(w)
		return
	}
	t.exchange(w, r, s, body, msg)
}

// tokenRevoked reports whether s's token, required, is no longer listed. A
// new session or request asks once it is listed: the token may have been
// revoked while its body came, and followTokens ended what was listed then.
func (t *httpTransport) tokenRevoked(s *httpSession) bool {
	return t.tokens != nil && t.tokens.find(s.owner) == nil
}

// checkMirroredHeaders compares the headers 2026-07-28 mirrors with the body.
func checkMirroredHeaders(r *http.Request, msg httpMessage) error {
	mismatch := func(header, got, want string) error {
		return fmt.Errorf("%s header value %q does not match body value %q", header, got, want)
	}
	if v := r.Header.Get("Mcp-Protocol-Version"); v != msg.Meta.protocolVersion {
		return mismatch("MCP-Protocol-Version", v, msg.Meta.protocolVersion)
	}
	if !msg.isRequest() {
		return nil
	}
	if method := r.Header.Get("Mcp-Method"); method != msg.Method {
		return mismatch("Mcp-Method", method, msg.Method)
	}
	want, named := map[string]string{"tools/call": msg.Name, "prompts/get": msg.Name, "resources/read": msg.URI}[msg.Method]
	// Mcp-Name may carry its value in the =?base64?…?= sentinel encoding.
	name := r.Header.Get("Mcp-Name")
	got, ok := name, true
	if rest, found := strings.CutPrefix(name, "=?base64?"); found && strings.HasSuffix(rest, "?=") {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(rest, "?="))
		got, ok = string(b), err == nil
	}
	if named && (!ok || got != want) {
		return mismatch("Mcp-Name", name, want)
	}
	return nil
}
