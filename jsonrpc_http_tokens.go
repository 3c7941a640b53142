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

// The tokens file (serve --tokens-file) gives each agent a bearer token of
// its own and the context ids it may speak as, one agent per line:
//
//	# NAME  sha256:HEX-OF-TOKEN  CONTEXT_ID_PATTERN...
//	alice   sha256:3b1f…         alice alice-*
//
// Fields are separated by blanks; a line whose first non-blank character is
// '#' is a comment. A pattern is an exact context_id or a prefix ending in
// '*'. The file holds only each token's SHA-256, never the token: a copied
// or leaked file (a backup, a screen share) lets nobody connect, and the
// server compares digests anyway. "crosstalk-mcp tokens add" writes lines;
// a person edits them by hand (revoking is deleting the line), and a token
// made elsewhere is listed as `printf %s "$TOKEN" | sha256sum`.

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

// tokenSet is one loaded generation of tokens, the shared one included.
type tokenSet struct {
	list  []*agentToken
	bySum map[[sha256.Size]byte]*agentToken
}

// tokenTable is what the HTTP server authenticates against: the shared
// token (--token-file or CROSSTALK_HTTP_TOKEN) and the tokens file's, which
// reload swaps in whole, so a request sees one generation or the next.
type tokenTable struct {
	shared *agentToken // nil without a shared token
	path   string      // the tokens file, or ""
	set    atomic.Pointer[tokenSet]
	// stamp is the loaded file's size and time; only reload touches it.
	stamp fs.FileInfo
}

// newTokenTable loads the tokens a server accepts, or returns nil when
// neither a shared token nor a tokens file is given: no token is required.
func newTokenTable(shared, path string) (*tokenTable, error) {
	if shared == "" && path == "" {
		return nil, nil
	}
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("tokens file: %w", err)
		}
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
	set := &tokenSet{bySum: map[[sha256.Size]byte]*agentToken{}}
	if tt.shared != nil {
		set.list, set.bySum[tt.shared.sum] = []*agentToken{tt.shared}, tt.shared
	}
	if tt.path != "" {
		info, _ := os.Stat(tt.path)
		if !force && sameStamp(info, tt.stamp) {
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
		for _, tok := range tokens {
			if set.bySum[tok.sum] != nil {
				return false, fmt.Errorf("tokens file %s: %s has the same token as another", tt.path, tok.name)
			}
			set.list, set.bySum[tok.sum] = append(set.list, tok), tok
		}
		tt.stamp = info
	}
	tt.set.Store(set)
	return true, nil
}

// sameStamp reports whether two stats of the tokens file (nil: missing)
// show the same size and time. A rewrite of the same size within the
// filesystem's time granularity goes unseen; SIGHUP reloads it.
func sameStamp(a, b fs.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// tokenName is what a NAME may be: short, and safe to print in a refusal.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// parseTokens reads a tokens file; an error names the line, never a token.
func parseTokens(data []byte) ([]*agentToken, error) {
	var tokens []*agentToken
	names := map[string]bool{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		fields := strings.Fields(string(line))
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		tok, err := parseTokenLine(fields)
		if err == nil && names[tok.name] {
			err = fmt.Errorf("%s is listed twice", tok.name)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		names[tok.name] = true
		tokens = append(tokens, tok)
	}
	return tokens, nil
}

// parseTokenLine reads the fields of one line: NAME sha256:HEX PATTERN...
func parseTokenLine(fields []string) (*agentToken, error) {
	if len(fields) < 3 {
		return nil, errors.New("want NAME sha256:HEX CONTEXT_ID_PATTERN...")
	}
	tok := &agentToken{name: fields[0], patterns: fields[2:]}
	if !tokenName.MatchString(tok.name) {
		return nil, fmt.Errorf("NAME must be letters, digits and . _ @ - (at most 64), not %q", tok.name)
	}
	digest, ok := strings.CutPrefix(fields[1], "sha256:")
	if n, err := hex.Decode(tok.sum[:], []byte(digest)); !ok || err != nil || n != sha256.Size || len(digest) != 2*sha256.Size {
		return nil, fmt.Errorf("%s: the second field must be sha256: and 64 hex digits", tok.name)
	}
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
	for _, tok := range tt.set.Load().list {
		if subtle.ConstantTimeCompare(sum[:], tok.sum[:]) == 1 {
			found = tok
		}
	}
	return found
}

// listed reports whether the current set still holds the token whose
// digest is sum.
func (tt *tokenTable) listed(sum [sha256.Size]byte) bool {
	return tt.set.Load().bySum[sum] != nil
}

// speaksFor is serverConfig.speaksFor for the sessions of tok. It reads the
// current set at each call, so a reload that changes tok's patterns applies
// to its live sessions too.
func (tt *tokenTable) speaksFor(tok *agentToken) func(string) *domainError {
	return func(id string) *domainError {
		if now := tt.set.Load().bySum[tok.sum]; now == nil || !now.patterns.allow(id) {
			return authorizationErrorf("Token %s may not act as context_id %s: the tokens file lists the context ids each token may speak for.", tok.name, id)
		}
		return nil
	}
}
