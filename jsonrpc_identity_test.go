package main

import (
	"errors"
	"strings"
	"testing"
)

// TestStdioPin runs the stdio server with and without CROSSTALK_CONTEXT_ID:
// pinned, it refuses another context_id with an authorization error and
// stores nothing; unset, anyone may be named.
func TestStdioPin(t *testing.T) {
	for _, tt := range []struct {
		pin     string
		refused bool
	}{{"alice", true}, {"", false}} {
		t.Run("pin="+tt.pin, func(t *testing.T) {
			t.Setenv("CROSSTALK_GROUPS_DIR", t.TempDir())
			t.Setenv("CROSSTALK_CONTEXT_ID", tt.pin)
			input := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_group","arguments":{"caller_name":"t","context_id":"bob"}}}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_groups","arguments":{"caller_name":"t"}}}
`
			var stdout, stderr syncBuffer
			if code := run(nil, strings.NewReader(input), &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			out := stdout.String()
			refusal := `This server is pinned to CROSSTALK_CONTEXT_ID alice and may not act as context_id bob.`
			stored := !strings.Contains(out, `\"groups\": []`)
			if strings.Contains(out, refusal) != tt.refused || stored == tt.refused {
				t.Errorf("got %s; want refused %v and a group stored %v", out, tt.refused, !tt.refused)
			}
		})
	}
}

// TestMemberWakeupSpeaksFor reads wakeup resources the 2026-07-28 way, where
// membership authorizes: a session pinned to bob reads bob's wakeups but not
// alice's, although alice is a member too.
func TestMemberWakeupSpeaksFor(t *testing.T) {
	s, _ := newTestServer(t)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	mustJoin(t, s, g, "bob", "Bob")
	s.cfg.speaksFor = pinnedSpeaker("bob")
	for _, tt := range []struct {
		contextID string
		refused   bool
	}{{"bob", false}, {"alice", true}} {
		t.Run(tt.contextID, func(t *testing.T) {
			_, c, err := s.memberWakeup(wakeupURI(g, tt.contextID))
			var de *domainError
			if refused := errors.As(err, &de) && de.category == categoryAuthorization; refused != tt.refused || (!tt.refused && (err != nil || c != tt.contextID)) {
				t.Errorf("got %q, %v; want refused %v", c, err, tt.refused)
			}
		})
	}
}
