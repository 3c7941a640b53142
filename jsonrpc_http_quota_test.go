package main

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestHTTPSessionQuotaEndsIdlest shows that a client address at its session
// quota (a CI loop of short runs that never DELETE, or agents behind one
// proxy) still gets a session: the new one ends the address's least recently
// used session that is idle (no request, no GET stream, unused for
// sessionReclaim), and only when none is idle is the answer 429.
func TestHTTPSessionQuotaEndsIdlest(t *testing.T) {
	tests := []struct {
		name             string
		reclaim          time.Duration
		streamA, streamB bool
		want             int
		wantGone         string // the session ended for the new one, or ""
	}{
		{"the least recently used idle session ends", time.Nanosecond, false, false, http.StatusOK, "b"},
		{"a session with a GET stream is spared", time.Nanosecond, false, true, http.StatusOK, "a"},
		{"sessions used within the floor are spared", time.Hour, false, false, http.StatusTooManyRequests, ""},
		{"streaming sessions are spared", time.Nanosecond, true, true, http.StatusTooManyRequests, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newHTTPTestServer(t, "", httpLimits{maxSessionsPerClient: 2, sessionReclaim: tt.reclaim})
			a, b := s.client(t, ""), s.client(t, "")
			a.initialize()
			b.initialize()
			a.call("tools/list", nil) // b is now the least recently used
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			streams := int32(0)
			for c, open := range map[*httpTestClient]bool{a: tt.streamA, b: tt.streamB} {
				if open {
					c.openStream(ctx)
					streams++
				}
			}
			// A client has its answer before the handler has returned.
			waitUntil(t, "the calls' end", func() bool { return s.serving.Load() == streams })
			c := s.client(t, "")
			if got, body := statusOf(c, http.MethodPost, string(c.request("initialize", map[string]any{"protocolVersion": "2025-11-25"})), nil); got != tt.want {
				t.Fatalf("third session: got status %d (%s); want %d", got, body, tt.want)
			}
			for name, old := range map[string]*httpTestClient{"a": a, "b": b} {
				want := http.StatusOK
				if name == tt.wantGone {
					want = http.StatusNotFound
				}
				if got, body := statusOf(old, http.MethodPost, string(old.request("tools/list", nil)), nil); got != want {
					t.Errorf("tools/list in session %s: got status %d (%s); want %d", name, got, body, want)
				}
			}
			if held := s.t.sessionQuota.held(); held != 2 {
				t.Errorf("sessions held: got %d; want 2", held)
			}
		})
	}
}

// TestHTTPSessionQuotaPerToken has two agents' tokens share one address (one
// machine, or one proxy): an agent at its session quota ends only its own
// idle sessions, never another token's, which belongs to that token alone.
func TestHTTPSessionQuotaPerToken(t *testing.T) {
	tokens, _ := newTestTokens(t, "", []string{"alice", "alice-secret", "alice"}, []string{"bob", "bob-secret", "bob"})
	s := newHTTPTokensServer(t, tokens, httpLimits{maxSessionsPerClient: 2, sessionReclaim: time.Nanosecond})
	alice := s.client(t, "alice-secret")
	alice.initialize()
	waitUntil(t, "alice's initialize done", func() bool { return s.serving.Load() == 0 })
	for i := range 3 {
		bob := s.client(t, "bob-secret")
		if got, body := statusOf(bob, http.MethodPost, string(bob.request("initialize", map[string]any{"protocolVersion": "2025-11-25"})), nil); got != http.StatusOK {
			t.Fatalf("bob's session %d: got status %d (%s); want 200", i+1, got, body)
		}
	}
	if got, body := statusOf(alice, http.MethodPost, string(alice.request("tools/list", nil)), nil); got != http.StatusOK {
		t.Errorf("alice's session after bob's three: got status %d (%s); want 200", got, body)
	}
}
