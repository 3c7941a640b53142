package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The HTTP transport's tunables, in one place, bound what remote clients may
// hold of it, so that one client (or many) cannot exhaust memory, file
// descriptors or the store's connection cache. They are generous for a team of
// agents and small for an attacker. The body limit admits the largest message
// the stdio transport is ever sent in practice (16 MiB) with room for JSON
// escaping. A write may take 30 s because a client on a slow link still drains
// a large answer's next socket buffer within that; one that does not has
// stopped reading. 256 queued messages absorb any burst of wakeups a busy
// group makes while bounding what a client that reads nothing can pin (a few
// hundred small notifications), and keeping more would only delay the same
// cut-off: the stream is not resumable, so its client re-reads state.
const (
	httpMaxSessions         = 1024 // 2025-era sessions in total
	httpMaxStreams          = 512  // open SSE streams in total
	httpMaxStreamsPerClient = 64   // open SSE streams from one remote IP
)

// httpLimits holds the tunables that tests shrink to reach a limit in
// milliseconds; production passes defaultHTTPLimits.
type httpLimits struct {
	maxBody              int64         // bytes in one POST body
	maxSessionsPerClient int           // sessions from one remote IP
	sessionIdle          time.Duration // a session unused this long is ended
	writeTimeout         time.Duration // one write to a client; slower is cut off
	queue                int           // messages waiting for one response; more cut it off
	keepAlive            time.Duration // SSE comment interval on quiet streams
}

// defaultHTTPLimits are the limits every server runs with.
var defaultHTTPLimits = httpLimits{
	maxBody:              20 << 20,
	maxSessionsPerClient: 128,
	sessionIdle:          30 * time.Minute,
	writeTimeout:         30 * time.Second,
	queue:                256,
	keepAlive:            15 * time.Second,
}

// httpGuard is the HTTP transport's outer layer: every request passes its
// Origin and bearer-token checks (and, on a loopback bind, loopbackOnly's
// Host check) before any MCP code or storage sees it, so a refused request
// touches nothing.
type httpGuard struct {
	tokens  *tokenTable     // nil when none is required (loopback only)
	origins map[string]bool // browser origins allowed besides loopback ones
	next    http.Handler
}

// newHTTPGuard wraps next in the transport's access checks. On a loopback
// bind the dashboard's Host check (loopbackOnly) runs first.
func newHTTPGuard(loopback bool, tokens *tokenTable, origins []string, next http.Handler) http.Handler {
	g := &httpGuard{tokens: tokens, origins: map[string]bool{}, next: next}
	for _, o := range origins {
		g.origins[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	if !loopback {
		return g
	}
	// The dashboard's Host check (loopbackOnly), widened to all of
	// 127.0.0.0/8, which isLoopbackAddr lets serve bind: a bind to
	// 127.0.0.2 must answer Host 127.0.0.2. A rebinding page's Host is its
	// own domain name, never a loopback literal, so this admits no more.
	hostCheck := loopbackOnly(g)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackIP(hostOf(r.Host)) && r.URL.Host == "" {
			g.ServeHTTP(w, r)
		} else {
			hostCheck.ServeHTTP(w, r)
		}
	})
}

// ServeHTTP refuses requests with a foreign Origin or a missing or wrong
// bearer token, and passes the rest on with headers that keep responses out
// of caches and content sniffing.
func (g *httpGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if origin := r.Header.Get("Origin"); origin != "" && !g.allowedOrigin(origin) {
		httpRefuse(w, http.StatusForbidden, "Forbidden: cross-origin request from "+origin+".")
		return
	}
	if g.tokens != nil {
		tok := g.tokens.authenticate(r.Header.Get("Authorization"))
		if tok == nil {
			h.Set("WWW-Authenticate", `Bearer realm="crosstalk-mcp"`)
			httpRefuse(w, http.StatusUnauthorized, "Unauthorized: a valid bearer token is required.")
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), bearerKey{}, tok))
	}
	g.next.ServeHTTP(w, r)
}

type bearerKey struct{} // the request context key of its *agentToken

// bearer returns the token a request authenticated with, or the zero
// token, which speaks for everyone, when the server requires none.
func bearer(r *http.Request) agentToken {
	if tok, ok := r.Context().Value(bearerKey{}).(*agentToken); ok {
		return *tok
	}
	return agentToken{}
}

// allowedOrigin accepts an Origin naming loopback or listed with
// --allow-origin. Browsers send "null" from sandboxed and file pages, which
// are refused like any other foreign origin.
func (g *httpGuard) allowedOrigin(origin string) bool {
	return g.origins[strings.ToLower(strings.TrimSuffix(origin, "/"))] || loopbackOrigin(origin)
}

// httpRefuse answers a refused request with a JSON-RPC error that has no
// id, which the transport specs allow as the body of any HTTP error.
func httpRefuse(w http.ResponseWriter, status int, msg string) {
	code := -32600
	if status == http.StatusNotFound {
		code = -32001
	}
	writeHTTPJSON(w, status, errorResponse(nil, &rpcError{code, msg}))
}

// writeHTTPJSON writes one JSON body; the transport's message text is the
// stdio transport's, byte for byte.
func writeHTTPJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, pyJSON(v))
}

// isLoopbackAddr reports whether a listen address binds loopback only. An
// empty host binds every interface and so is not loopback.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && (strings.EqualFold(host, "localhost") || loopbackIP(host))
}

// loopbackIP reports whether host is a loopback IP literal, bracketed or not.
func loopbackIP(host string) bool {
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}

// normalizeHTTPAddr turns the --http argument into a listen address: a bare
// port binds 127.0.0.1, the secure default.
func normalizeHTTPAddr(arg string) (string, error) {
	if arg == "" {
		return "", errors.New("--http needs an address such as 127.0.0.1:8808")
	}
	if !strings.Contains(arg, ":") {
		arg = "127.0.0.1:" + arg
	}
	if _, _, err := net.SplitHostPort(arg); err != nil {
		return "", fmt.Errorf("--http address %q: %w", arg, err)
	}
	return arg, nil
}

// hostOf is the host of a host:port, or all of it when it has no port.
// Per-client bounds count under hostOf(RemoteAddr), the remote IP, since
// one machine may open many connections from many ports.
func hostOf(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return hostport
}

// httpQuota counts what each client holds against a per-client and a total
// bound. Its lock is held only to update the counts.
type httpQuota struct {
	mu                    sync.Mutex
	total, perClient, sum int
	byClient              map[string]int
	retryAfter, refusal   string // the 429 answer past a bound
}

func newHTTPQuota(total, perClient int, retryAfter, refusal string) *httpQuota {
	return &httpQuota{total: total, perClient: perClient, byClient: map[string]int{}, retryAfter: retryAfter, refusal: refusal}
}

// acquire takes one unit for client, or refuses the request with 429 and
// reports false when either bound is reached.
func (q *httpQuota) acquire(w http.ResponseWriter, client string) bool {
	q.mu.Lock()
	ok := q.sum < q.total && q.byClient[client] < q.perClient
	if ok {
		q.sum++
		q.byClient[client]++
	}
	q.mu.Unlock()
	if !ok {
		w.Header().Set("Retry-After", q.retryAfter)
		httpRefuse(w, http.StatusTooManyRequests, q.refusal)
	}
	return ok
}

// release returns one unit taken by acquire.
func (q *httpQuota) release(client string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sum--
	if q.byClient[client]--; q.byClient[client] <= 0 {
		delete(q.byClient, client)
	}
}
