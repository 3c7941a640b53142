package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The HTTP transport's tunables bound what remote clients may hold of memory,
// descriptors and the store's connection cache: generous for a team of agents,
// small for an attacker. The body limit is the largest message sent in practice
// (16 MiB) plus escaping; a slow link still drains a socket buffer within 30 s,
// and 64 KiB of a large body or answer (whose mail is marked read) each second
// more; 256 queued messages absorb a busy group's wakeups, and more would only
// delay the cut-off of a client that reads nothing. Agents on one machine share
// its address: each of the sessions one address may hold keeps a GET stream and
// a waiting call open, so it may hold twice as many streams.
const (
	httpMaxSessions         = 1024 // 2025-era sessions in total
	httpMaxStreams          = 512  // open SSE streams in total
	httpMaxStreamsPerClient = 256  // open SSE streams of one client (quotaClient)
)

// httpLimits are the tunables tests shrink; production uses defaultHTTPLimits.
type httpLimits struct {
	maxBody              int64         // bytes in one POST body
	maxSessionsPerClient int           // sessions of one client (quotaClient)
	sessionIdle          time.Duration // a session unused this long is ended
	sessionReclaim       time.Duration // at a bound, a new session ends one of its client's idle this long
	writeTimeout         time.Duration // one write to a client, or its body, plus 1 s per 64 KiB; slower is cut off
	queue                int           // messages waiting for one response; more cut it off
	keepAlive            time.Duration // SSE comment interval on quiet streams
}

// defaultHTTPLimits are the limits every server runs with.
var defaultHTTPLimits = httpLimits{
	maxBody:              20 << 20,
	maxSessionsPerClient: 128,
	sessionIdle:          30 * time.Minute,
	sessionReclaim:       time.Minute,
	writeTimeout:         30 * time.Second,
	queue:                256,
	keepAlive:            15 * time.Second,
}

// deadline is when a write (or the read of a body) of n bytes must be done:
// writeTimeout, plus a second per 64 KiB, so that a slow but steady link
// still moves a large answer or message.
func (l httpLimits) deadline(n int) time.Time {
	return time.Now().Add(l.writeTimeout + time.Duration(n>>16)*time.Second)
}

// httpGuard is the HTTP transport's outer layer: every request passes its
// Origin, bearer-token and (on a loopback bind without a token) Host checks
// before any MCP code or storage sees it, so a refused request touches nothing.
type httpGuard struct {
	tokens  *tokenTable     // nil when none is required (loopback only)
	origins map[string]bool // browser origins allowed besides loopback ones
	next    http.Handler
}

// newHTTPGuard wraps next in the access checks; on a loopback bind without
// a token the Host check runs first, widened to 127.0.0.0/8 (a rebinding
// page's Host is a domain name, never a loopback literal). A token is the
// defence where one is required: a rebinding page does not have it, and a
// reverse proxy on the same machine passes its own public Host.
func newHTTPGuard(loopback bool, tokens *tokenTable, origins []string, next http.Handler) http.Handler {
	g := &httpGuard{tokens: tokens, origins: setOf(mapSlice(origins, originKey)), next: next}
	if !loopback || tokens != nil {
		return g
	}
	hostCheck := loopbackOnly(g)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackIP(hostOf(r.Host)) && r.URL.Host == "" {
			g.ServeHTTP(w, r)
		} else {
			hostCheck.ServeHTTP(w, r)
		}
	})
}

// ServeHTTP refuses an Origin neither loopback nor listed with --allow-origin
// ("null", of sandboxed and file pages, is foreign) and a missing or wrong
// bearer token, and passes the rest on with headers that keep responses out
// of caches and sniffing. An accepted origin gets CORS headers, and its
// preflight is answered here: browsers send it without the token.
func (g *httpGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if origin := r.Header.Get("Origin"); origin != "" && !g.origins[originKey(origin)] && !loopbackOrigin(origin) {
		httpRefuse(w, http.StatusForbidden, "Forbidden: cross-origin request from "+origin+".")
		return
	} else if origin != "" {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, WWW-Authenticate")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name")
			h.Set("Access-Control-Max-Age", "7200") // Chromium's cap: a page preflights a request shape once in two hours
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if g.tokens != nil {
		tok := g.tokens.authenticate(r.Header.Get("Authorization"))
		if tok == nil {
			refuseUnauthorized(w)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), bearerKey{}, tok))
	}
	g.next.ServeHTTP(w, r)
}

// originKey is how --allow-origin values and Origin headers compare:
// without case or a trailing slash.
func originKey(origin string) string { return strings.ToLower(strings.TrimSuffix(origin, "/")) }

type bearerKey struct{} // the request context key of its *agentToken

// bearer returns r's token, or the zero token (everyone) when none is required.
func bearer(r *http.Request) agentToken {
	if tok, ok := r.Context().Value(bearerKey{}).(*agentToken); ok {
		return *tok
	}
	return agentToken{}
}

// httpRefuse answers with an id-less JSON-RPC error, which the specs allow for any HTTP error.
func httpRefuse(w http.ResponseWriter, status int, msg string) {
	code := -32600
	if status == http.StatusNotFound {
		code = -32001
	}
	writeHTTPJSON(w, status, pyJSON(errorResponse(nil, &rpcError{code, msg})))
}

// refuseUnauthorized answers 401 with the challenge a bearer client expects.
func refuseUnauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="crosstalk-mcp"`)
	httpRefuse(w, http.StatusUnauthorized, "Unauthorized: a valid bearer token is required.")
}

// writeHTTPJSON writes one JSON body, text as pyJSON writes stdio's lines.
func writeHTTPJSON(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, text)
}

// isLoopbackAddr reports whether a listen address binds loopback only.
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
	addr := arg
	if !strings.Contains(arg, ":") {
		addr = "127.0.0.1:" + arg
	}
	_, port, err := net.SplitHostPort(addr)
	if _, perr := strconv.ParseUint(cmp.Or(port, "0"), 10, 16); err == nil && perr != nil {
		err = errors.New("want host:port, or a port number up to 65535")
	}
	if err != nil {
		return "", fmt.Errorf("--http address %q: %w", arg, err)
	}
	return addr, nil
}

// httpQuota counts what each client holds against a per-client and a total bound.
type httpQuota struct {
	mu                    sync.Mutex // held only to update the counts
	total, perClient, sum int
	byClient              map[string]int
	retryAfter, refusal   string // the 429 answer past a bound
}

// acquire takes one unit for client, or reports false at either bound (answering 429 on w unless it is nil).
func (q *httpQuota) acquire(w http.ResponseWriter, client string) bool {
	q.mu.Lock()
	ok := q.sum < q.total && q.byClient[client] < q.perClient
	if ok {
		q.sum++
		q.byClient[client]++
	}
	q.mu.Unlock()
	if !ok && w != nil {
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

// tokensPoll is how often the server reads the tokens file for a change: a
// read costs microseconds, and revoking needs no SIGHUP.
const tokensPoll = 2 * time.Second

// agentToken is one bearer token the HTTP server accepts. The tokens file
// (serve --tokens-file) holds only digests, so a leaked copy admits nobody.
type agentToken struct {
	name     string // the tokens file's NAME; "" for the shared token
	sum      [sha256.Size]byte
	patterns contextPatterns // nil for the shared token: every context
}

// tokenTable is the shared token (--token-file or CROSSTALK_HTTP_TOKEN) and
// the tokens file's, swapped in whole, so a request sees one generation.
type tokenTable struct {
	shared *agentToken                   // nil without a shared token
	path   string                        // the tokens file, or ""
	set    atomic.Pointer[[]*agentToken] // the loaded generation, the shared token first
	loaded []byte                        // the tokens file's content last read; reload's alone
	failed bool                          // the last read failed, and was reported; reload's alone
}

// newTokenTable loads the tokens a server accepts, or is nil when none is required.
func newTokenTable(shared, path string) (*tokenTable, error) {
	if shared == "" && path == "" {
		return nil, nil
	}
	if _, err := os.Stat(path); path != "" && err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	tt := &tokenTable{path: path}
	if shared != "" {
		tt.shared = &agentToken{sum: sha256.Sum256([]byte(shared))}
	}
	if _, err := tt.reload(true); err != nil {
		return nil, err
	}
	return tt, nil
}

// reload reads the tokens file, swaps in a new set when forced or changed, and
// reports whether it did; a missing file lists nobody, a malformed or unreadable one changes nothing.
func (tt *tokenTable) reload(force bool) (bool, error) {
	var set []*agentToken
	if tt.shared != nil {
		set = append(set, tt.shared)
	}
	if tt.path != "" {
		data, err := os.ReadFile(tt.path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			if tt.failed && !force {
				return false, nil // reported once, as a malformed file is
			}
			tt.failed = true
			return false, fmt.Errorf("read tokens file: %w", err)
		}
		tt.failed = false
		if !force && bytes.Equal(data, tt.loaded) {
			return false, nil
		}
		tt.loaded = data // a malformed file is reported once, not at every poll
		tokens, err := parseTokens(data)
		if err != nil {
			return false, fmt.Errorf("tokens file %s: %w", tt.path, err)
		}
		set = append(set, tokens...)
	}
	tt.set.Store(&set)
	return true, nil
}

// tokenName is what a NAME may be, at most 64 bytes long: short, and safe to
// print in a refusal. The length is checked apart, since a bounded repeat
// compiles to one copy of the class per byte, at every process start.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]*$`)

// parseTokens reads a tokens file, one NAME sha256:HEX PATTERN... a line; an
// error names the line, never a token. A NAME or a token listed twice is
// refused: refusals name the token, and a connection must have one identity.
func parseTokens(data []byte) ([]*agentToken, error) {
	var tokens []*agentToken
	seen := map[string]bool{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		fields := strings.Fields(string(line))
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		tok, err := parseTokenLine(fields)
		if err == nil && (seen[tok.name] || seen[string(tok.sum[:])]) {
			err = fmt.Errorf("%s repeats an earlier line's NAME or token", tok.name)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		seen[tok.name], seen[string(tok.sum[:])] = true, true
		tokens = append(tokens, tok)
	}
	return tokens, nil
}

// parseTokenLine reads the fields of one line.
func parseTokenLine(fields []string) (*agentToken, error) {
	if len(fields) < 3 {
		return nil, errors.New("want NAME, sha256:HEX and at least one context_id pattern")
	}
	tok := &agentToken{name: fields[0], patterns: fields[2:]}
	digest, ok := strings.CutPrefix(fields[1], "sha256:")
	sum, err := hex.DecodeString(digest) // decoded whole: a long digest must not overrun tok.sum
	switch {
	case len(tok.name) > 64 || !tokenName.MatchString(tok.name):
		return nil, errors.New("NAME must be letters, digits and . _ @ - (at most 64)")
	case !ok || err != nil || len(sum) != sha256.Size:
		return nil, fmt.Errorf("%s: the second field must be sha256: and 64 hex digits", tok.name)
	}
	copy(tok.sum[:], sum)
	if i := slices.IndexFunc(tok.patterns, func(p string) bool { return strings.Contains(strings.TrimSuffix(p, "*"), "*") }); i >= 0 {
		return nil, fmt.Errorf("%s: pattern %q may have '*' only at its end", tok.name, tok.patterns[i])
	}
	return tok, nil
}

// tokenLine is the tokens file line of agent name with token, as parseTokenLine reads it.
func tokenLine(name, token string, patterns []string) string {
	sum := sha256.Sum256([]byte(token))
	return strings.Join(append([]string{name, "sha256:" + hex.EncodeToString(sum[:])}, patterns...), " ") + "\n"
}

// authenticate returns the token an Authorization header carries, or nil.
// It compares digests in constant time and does not stop at a match, so
// timing tells neither which token nor how much of one matched.
func (tt *tokenTable) authenticate(header string) *agentToken {
	scheme, token, ok := strings.Cut(header, " ")
	// An empty token must admit nobody, even a line holding the digest of
	// nothing (a token made elsewhere from an unset variable).
	if token = strings.TrimSpace(token); !ok || token == "" || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	sum := sha256.Sum256([]byte(token))
	var found *agentToken
	for _, tok := range *tt.set.Load() {
		if subtle.ConstantTimeCompare(sum[:], tok.sum[:]) == 1 {
			found = tok
		}
	}
	return found
}

// find returns the current set's token whose digest is sum, or nil. It looks
// from the end, so that a shared token the file lists too is the file's, as
// authenticate (whose last match wins) makes it.
func (tt *tokenTable) find(sum [sha256.Size]byte) *agentToken {
	for _, tok := range slices.Backward(*tt.set.Load()) {
		if tok.sum == sum {
			return tok
		}
	}
	return nil
}

// speaksFor is serverConfig.speaksFor for tok's sessions, reading the current
// set at each call so that a reload applies to live sessions. Only context_id
// is identity: wake_context_ids name whom to wake, not who speaks.
func (tt *tokenTable) speaksFor(tok agentToken) func(string) *domainError {
	return func(id string) *domainError {
		if now := tt.find(tok.sum); now == nil || !now.patterns.allow(id) {
			return authorizationErrorf("Token %s may not act as context_id %s: the tokens file lists the context ids each token may speak for.", tok.name, id)
		}
		return nil
	}
}

// contextPatterns are the context ids one identity may speak as: each is an
// exact id, or a prefix ending in '*' ("ci-*"; "*" alone admits every id).
type contextPatterns []string

// allow reports whether id matches one of the patterns.
func (p contextPatterns) allow(id string) bool {
	return slices.ContainsFunc(p, func(pattern string) bool {
		prefix, wild := strings.CutSuffix(pattern, "*")
		return (wild && strings.HasPrefix(id, prefix)) || pattern == id
	})
}

// pinnedSpeaker is speaksFor for a stdio server started with
// CROSSTALK_CONTEXT_ID=pinned: its client speaks as that context only.
func pinnedSpeaker(pinned string) func(string) *domainError {
	return func(id string) *domainError {
		if id == pinned {
			return nil
		}
		return authorizationErrorf("This server is pinned to CROSSTALK_CONTEXT_ID %s and may not act as context_id %s.", pinned, id)
	}
}
