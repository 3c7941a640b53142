package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestProtocolTranscripts replays testdata/protocol/<revision>.jsonl, one
// transcript for every revision the server speaks, through the golden
// replay (golden_test.go; the format and normalization are those of
// testdata/golden/README.md). Each covers the handshake (initialize, or
// server/discover for 2026-07-28), tools/list, a call with structured
// output, a tool error and protocol errors, and a subscription with its
// notification: resources/subscribe before 2026-07-28, subscriptions/listen
// from then on. testdata/protocol/README.md says how they were made.
func TestProtocolTranscripts(t *testing.T) {
	for _, rev := range allProtocolVersions {
		t.Run(rev, func(t *testing.T) {
			file := filepath.Join("testdata", "protocol", rev+".jsonl")
			header, steps := readGoldenTranscript(t, file)
			if header.Transcript != rev {
				t.Fatalf("%s: header names transcript %q; want %q", file, header.Transcript, rev)
			}
			s := startGoldenSession(t, t.TempDir(), header.Env, steps)
			s.fullInfo = true // serverInfo per revision is part of what is checked
			s.replay(steps)
		})
	}
}

// modernMeta is the _meta a 2026-07-28 request carries.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// TestModernRequestsKeepNoSessionState holds a 2026-07-28 join_group to
// statelessness: it leaves no subscription or authorization behind (which
// could make the poller send a notification without a subscription id), and
// the wakeup resource is authorized by membership in the group instead, so
// that it does not matter which process or transport joined.
func TestModernRequestsKeepNoSessionState(t *testing.T) {
	s, _ := newTestServer(t)
	created := toolText(t, exchangeLine(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_group","arguments":{"caller_name":"t","context_id":"alpha"},`+modernMeta+`}}`))
	g, _ := created["group_id"].(string)
	if g == "" {
		t.Fatalf("create_group: got %v; want a group id", created)
	}
	joined := toolText(t, exchangeLine(t, s, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"join_group","arguments":{"caller_name":"t","group_id":"`+g+`","context_id":"alpha","name":"Alpha"},`+modernMeta+`}}`))
	uri := wakeupURI(g, "alpha")
	if joined["wakeup_resource_uri"] != uri {
		t.Fatalf("join_group: got %v; want wakeup_resource_uri %s", joined, uri)
	}
	s.subs.mu.Lock()
	subs, authorized := len(s.subs.subs), len(s.subs.authorized)
	s.subs.mu.Unlock()
	if subs != 0 || authorized != 0 {
		t.Errorf("after a 2026-07-28 join_group: got %d session subscriptions and %d authorizations; want none", subs, authorized)
	}

	read := func(version, uri string) string {
		meta := ""
		if version == revModern {
			meta = "," + modernMeta
		}
		return exchangeLine(t, s, `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"`+uri+`"`+meta+`}}`)
	}
	if got := read(revModern, uri); !strings.Contains(got, `"result"`) || !strings.Contains(got, `\"context_id\": \"alpha\"`) {
		t.Errorf("2026-07-28 resources/read of a member's wakeups: got %s; want its snapshot", got)
	}
	if got := read(revModern, wakeupURI(g, "ghost")); !strings.Contains(got, `"code": -32602`) {
		t.Errorf("2026-07-28 resources/read of a non-member's wakeups: got %s; want a -32602 error", got)
	}
	// A legacy session is still authorized by its own join_group only.
	initializeSession(t, s)
	if got := read("", uri); !strings.Contains(got, "not authorized for this MCP session") {
		t.Errorf("legacy resources/read of wakeups this session never joined: got %s; want the session authorization error", got)
	}
}
