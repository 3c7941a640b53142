package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// The tokens file (serve --tokens-file) lists one agent a line: NAME, the
// SHA-256 of its bearer token as sha256:HEX, and the context_id patterns it
// may speak for; '#' starts a comment line (docs/protocol.md, "Per-agent
// tokens"). It holds digests, never tokens: a copied or leaked file (a
// backup, a screen share) lets nobody connect, and the server compares
// digests anyway. Revoking a token is deleting its line.

// tokensPoll is how often the server stats the tokens file for a change. A
// stat costs microseconds, and two seconds is shorter than anyone takes to
// notice a revoked agent still connected, so SIGHUP is never needed.
const tokensPoll = 2 * time.Second

// agentToken is one bearer token the HTTP server accepts.
type agentToken struct {
	name     string // the tokens file's NAME; "" for the shared token
	sum      [sha256.Size]byte
	patterns contextPatterns // nil for the shared token: every context
}

// tokenTable is what the HTTP server authenticates against: the shared
// token (--token-file or CROSSTALK_HTTP_TOKEN) and the tokens file's, which
// reload swaps in whole, so a request sees one generation or the next.
type tokenTable struct {
	shared *agentToken                   // nil without a shared token
	path   string                        // the tokens file, or ""
	set    atomic.Pointer[[]*agentToken] // the loaded generation, the shared token first
	stamp  [2]int64                      // the loaded file's size and time (zero if missing); reload's alone
}

// newTokenTable loads the tokens a server accepts, or returns nil when
// neither a shared token nor a tokens file is given: no token is required.
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

// reload reads the tokens file again when force is set or its size or time
// changed, and reports whether it swapped in a new set. A missing file
// lists no agent (deleting it revokes them all); a malformed one is
// refused whole and the previous set stays.
func (tt *tokenTable) reload(force bool) (bool, error) {
	var set []*agentToken
	if tt.shared != nil {
		set = append(set, tt.shared)
	}
	if tt.path != "" {
		// A rewrite of the same size within the filesystem's time
		// granularity goes unseen; SIGHUP reloads it.
		var stamp [2]int64
		if info, err := os.Stat(tt.path); err == nil {
			stamp = [2]int64{info.Size(), info.ModTime().UnixNano()}
		}
		if !force && stamp == tt.stamp {
			return false, nil
		}
		data, err := os.ReadFile(tt.path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("read tokens file: %w", err)
		}
		tokens, err := parseTokens(data)
		if err != nil {
			return false, fmt.Errorf("tokens file %s: %w", tt.path, err)
		}
		set = append(set, tokens...)
		tt.stamp = stamp
	}
	tt.set.Store(&set)
	return true, nil
}

// tokenName is what a NAME may be: short, and safe to print in a refusal.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

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
	case !tokenName.MatchString(tok.name):
		return nil, errors.New("NAME must be letters, digits and . _ @ - (at most 64)")
	case !ok || err != nil || len(sum) != sha256.Size:
		return nil, fmt.Errorf("%s: the second field must be sha256: and 64 hex digits", tok.name)
	}
	copy(tok.sum[:], sum)
	for _, p := range tok.patterns {
		if strings.Contains(strings.TrimSuffix(p, "*"), "*") {
			return nil, fmt.Errorf("%s: pattern %q may have '*' only at its end", tok.name, p)
		}
	}
	return tok, nil
}

// tokenLine is the tokens file line for an agent named name whose token is
// token, as parseTokenLine reads it.
func tokenLine(name, token string, patterns []string) string {
	sum := sha256.Sum256([]byte(token))
	return strings.Join(append([]string{name, "sha256:" + hex.EncodeToString(sum[:])}, patterns...), " ") + "\n"
}

// authenticate returns the token an Authorization header carries, or nil.
// It compares the header's digest with every token's in constant time and
// without stopping at a match, so timing tells neither which token nor how
// much of one matched.
func (tt *tokenTable) authenticate(header string) *agentToken {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	var found *agentToken
	for _, tok := range *tt.set.Load() {
		if subtle.ConstantTimeCompare(sum[:], tok.sum[:]) == 1 {
			found = tok
		}
	}
	return found
}

// find returns the current set's token whose digest is sum, or nil.
func (tt *tokenTable) find(sum [sha256.Size]byte) *agentToken {
	for _, tok := range *tt.set.Load() {
		if tok.sum == sum {
			return tok
		}
	}
	return nil
}

// speaksFor is serverConfig.speaksFor for the sessions of tok. It reads the
// current set at each call, so a reload that changes tok's patterns applies
// to its live sessions too.
func (tt *tokenTable) speaksFor(tok agentToken) func(string) *domainError {
	return func(id string) *domainError {
		if now := tt.find(tok.sum); now == nil || !now.patterns.allow(id) {
			return authorizationErrorf("Token %s may not act as context_id %s: the tokens file lists the context ids each token may speak for.", tok.name, id)
		}
		return nil
	}
}

// Only a tools/call's context_id argument is identity, checked by
// serverConfig.speaksFor in prepareCall: wake_context_ids name whom to wake,
// not who speaks, and a context_id that is not a string is left to the
// tool's own validation.

// contextPatterns are the context ids one identity may speak as: each is an
// exact id, or a prefix ending in '*' ("ci-*"; "*" alone admits every id).
type contextPatterns []string

// allow reports whether id matches one of the patterns.
func (p contextPatterns) allow(id string) bool {
	for _, pattern := range p {
		if prefix, wild := strings.CutSuffix(pattern, "*"); (wild && strings.HasPrefix(id, prefix)) || pattern == id {
			return true
		}
	}
	return false
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
