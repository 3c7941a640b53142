package main

import (
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
