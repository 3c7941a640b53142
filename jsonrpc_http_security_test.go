package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeTokensFile writes a tokens file of agents (name → token, patterns)
// and returns its path.
func writeTokensFile(tb testing.TB, path string, agents ...[]string) string {
	tb.Helper()
	var text strings.Builder
	text.WriteString("# test agents\n\n")
	for _, a := range agents {
		text.WriteString(tokenLine(a[0], a[1], a[2:]))
	}
	if err := os.WriteFile(path, []byte(text.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// newTestTokens writes a tokens file of agents in a temporary directory and
// loads it with the shared token (none when ""); it returns the table and
// the file's path, for tests that edit the file.
func newTestTokens(tb testing.TB, shared string, agents ...[]string) (*tokenTable, string) {
	tb.Helper()
	path := writeTokensFile(tb, filepath.Join(tb.TempDir(), "tokens"), agents...)
	tokens, err := newTokenTable(shared, path)
	if err != nil {
		tb.Fatal(err)
	}
	return tokens, path
}

func TestParseTokens(t *testing.T) {
	hash := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		name, file string
		want       string // "name patterns" lines, or the error's text
	}{
		{"comments and blanks", "# c\n\n  # indented\nalice " + hash + " alice ci-*\n", "alice [alice ci-*]"},
		{"tabs", "bob\t" + hash + "\t*", "bob [*]"},
		{"no pattern", "alice " + hash, "line 1: want NAME"},
		{"bad name", "al/ice " + hash + " a", "line 1: NAME must be"},
		{"name starting with a mark", ".alice " + hash + " a", "line 1: NAME must be"},
		{"longest name", strings.Repeat("a", 63) + "@ " + hash + " a", strings.Repeat("a", 63) + "@ [a]"},
		{"name too long", strings.Repeat("a", 65) + " " + hash + " a", "line 1: NAME must be"},
		{"plain token", "alice s3cret a", "line 1: alice: the second field must be sha256:"},
		{"short hash", "alice sha256:abcd a", "line 1: alice: the second field"},
		{"long hash", "alice " + hash + "abcd a", "line 1: alice: the second field"},
		{"star inside", "alice " + hash + " a*b", "line 1: alice: pattern \"a*b\" may have '*' only at its end"},
		{"twice", "a " + hash + " x\n#\na " + hash + " y", "line 3: a repeats an earlier line's NAME or token"},
		{"same token", "a " + hash + " x\nb " + hash + " y", "line 2: b repeats"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokens, err := parseTokens([]byte(tt.file))
			got := fmt.Sprint(err)
			if err == nil {
				got = ""
				for _, tok := range tokens {
					got += fmt.Sprintf("%s %v", tok.name, tok.patterns)
				}
			}
			if !strings.HasPrefix(got, tt.want) || strings.Contains(got, "s3cret") {
				t.Errorf("got %q; want it to start %q (and never show a token)", got, tt.want)
			}
		})
	}
}

func TestContextPatterns(t *testing.T) {
	p := contextPatterns{"alice", "ci-*"}
	for id, want := range map[string]bool{"alice": true, "ci-": true, "ci-7": true, "alice2": false, "ci": false, "bob": false, "": false} {
		if got := p.allow(id); got != want {
			t.Errorf("allow(%q): got %v; want %v", id, got, want)
		}
	}
	if !(contextPatterns{"*"}).allow("anyone") {
		t.Error(`allow with "*": got false; want true`)
	}
}

// TestSpeakerRules runs tools for a context_id as each kind of identity
// (the shared token, per-agent tokens, the stdio pin) and checks who is
// refused, with what, and that a refused call changes nothing.
func TestSpeakerRules(t *testing.T) {
	tokens, _ := newTestTokens(t, "shared-secret", []string{"alice", "alice-secret", "alice", "ci-*"}, []string{"bob", "bob-secret", "bob"})
	speakers := map[string]func(string) *domainError{"shared": speaksForAnyone, "pinned": pinnedSpeaker("alice")}
	for _, name := range []string{"alice", "bob", "shared"} {
		tok := tokens.authenticate("Bearer " + name + "-secret")
		if tok == nil {
			t.Fatalf("authenticate %s: got nil; want its token", name)
		}
		if tok.patterns != nil {
			speakers[name] = tokens.speaksFor(*tok)
		}
	}
	refusal := map[string]string{"alice": "Token alice may not act as context_id ", "bob": "Token bob may not act as context_id ",
		"pinned": "This server is pinned to CROSSTALK_CONTEXT_ID alice and may not act as context_id "}
	tests := []struct {
		speaker, tool, contextID string
		refused                  bool
	}{
		{"alice", "create_group", "alice", false},
		{"alice", "create_group", "ci-7", false},
		{"alice", "create_group", "bob", true},
		{"alice", "create_group", "ci", true},
		{"alice", "join_group", "alice2", true},
		{"bob", "join_group", "alice", true},
		{"bob", "send_message", "alice", true},
		{"bob", "get_unread_messages", "alice", true},
		{"bob", "leave_group", "alice", true},
		{"bob", "update_group_metadata", "alice", true},
		{"bob", "delete_group", "alice", true},
		{"bob", "send_message", "bob", false},
		{"bob", "leave_group", "bob", false},
		{"alice", "update_group_metadata", "alice", false},
		{"alice", "delete_group", "alice", false},
		{"shared", "send_message", "bob", false},
		{"shared", "delete_group", "alice", false},
		{"pinned", "send_message", "bob", true},
		{"pinned", "delete_group", "bob", true},
		{"pinned", "send_message", "alice", false},
	}
	for _, tt := range tests {
		t.Run(tt.speaker+" "+tt.tool+" as "+tt.contextID, func(t *testing.T) {
			st := newTestStore(t, t.TempDir())
			group := newTestGroup(t, st, "g", "alice", "bob")
			before := storeSnapshot(t, st, group)
			cfg := newServerConfig(version, time.Hour)
			cfg.speaksFor = speakers[tt.speaker]
			s := newServer(st, &syncBuffer{}, cfg)
			defer s.subs.close()
			initializeSession(t, s)
			var got toolCall
			s.audit = func(c toolCall) { got = c }
			req := toolRequest(tt.tool, speakerArgs(tt.tool, group, tt.contextID))
			req.JSONRPC, req.ID = "2.0", 1
			line, _ := json.Marshal(req)
			exchangeLine(t, s, string(line))
			text := pyJSON(got.result.value)
			if tt.refused != (got.result.category == categoryAuthorization) || tt.refused != got.result.isError {
				t.Fatalf("got %s (%s); want refused %v", text, got.result.category, tt.refused)
			}
			if !tt.refused {
				return
			}
			if want := refusal[tt.speaker] + tt.contextID; !strings.Contains(text, want) || strings.Contains(text, "secret") {
				t.Errorf("got %s; want it to say %q and never show a token", text, want)
			}
			if after := storeSnapshot(t, st, group); after != before {
				t.Errorf("store after the refusal: got %s; want %s", after, before)
			}
		})
	}
}

// speakerArgs are tool's arguments for the group as contextID.
func speakerArgs(tool, group, contextID string) map[string]any {
	args := map[string]any{"context_id": contextID}
	if tool != "create_group" {
		args["group_id"] = group
	}
	switch tool {
	case "join_group", "leave_group", "get_unread_messages":
		args["name"] = contextID
	case "send_message":
		args["name"], args["message"] = contextID, "hello"
	case "update_group_metadata":
		args["name"] = "renamed"
	}
	return args
}

// storeSnapshot describes what a tool could change: the groups, their
// names, the group's members and its message revision.
func storeSnapshot(tb testing.TB, st *store, group string) string {
	tb.Helper()
	groups, err := st.listGroups()
	if err != nil {
		tb.Fatal(err)
	}
	users, _ := st.users(group)
	rev, _ := st.messageRevision(group)
	var members []string
	for _, m := range users {
		members = append(members, m.contextID)
	}
	var names []string
	for _, g := range groups {
		names = append(names, g.name)
	}
	return fmt.Sprint(names, members, rev)
}

// TestTokensReload edits the tokens file under a running transport: a
// session whose token stays listed keeps working (and follows the new
// patterns), one whose token was removed is ended and refused.
func TestTokensReload(t *testing.T) {
	tokens, path := newTestTokens(t, "", []string{"alice", "alice-secret", "alice"}, []string{"bob", "bob-secret", "bob"})
	s := newHTTPTokensServer(t, tokens, httpLimits{})
	alice, bob := s.client(t, "alice-secret"), s.client(t, "bob-secret")
	alice.initialize()
	bob.initialize()
	if reply := alice.tool("create_group", map[string]any{"context_id": "alice2"}); !strings.Contains(reply.text, "Token alice may not") {
		t.Fatalf("before the reload: got %s; want a refusal", reply.text)
	}
	// reload compares the file's content, so an edit is seen whatever its
	// size and time stamp.
	writeTokensFile(t, path, []string{"alice", "alice-secret", "alice", "alice2"})
	if changed, err := tokens.reload(false); !changed || err != nil {
		t.Fatalf("reload: got %v, %v; want true, nil", changed, err)
	}
	s.t.endWhere(func(s *httpSession) bool { return tokens.find(s.owner) == nil })
	alice.ok("create_group", map[string]any{"context_id": "alice2"}, nil)
	if code, body := statusOf(bob, "POST", string(bob.request("tools/list", nil)), nil); code != 401 {
		t.Errorf("bob after removal: got %d (%s); want 401", code, body)
	}
	if held := s.t.sessionQuota.held(); held != 1 {
		t.Errorf("sessions after the reload: got %d; want 1 (alice's)", held)
	}
	// A malformed file is refused whole: alice's token keeps working.
	os.WriteFile(path, []byte("alice sha256:nothex alice\n"), 0o600)
	if _, err := tokens.reload(true); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("malformed reload: got %v; want the line's error", err)
	}
	alice.ok("list_groups", nil, nil)
	// A deleted file lists nobody.
	os.Remove(path)
	if changed, err := tokens.reload(false); !changed || err != nil {
		t.Fatalf("reload of a deleted file: got %v, %v; want true, nil", changed, err)
	}
	if code, _ := statusOf(alice, "POST", string(alice.request("tools/list", nil)), nil); code != 401 {
		t.Errorf("alice after the file was deleted: got %d; want 401", code)
	}
}

// TestTokensRevokedEndListen removes a token from the file while its
// 2026-07-28 listen is open: the stream ends, as a 2025-era session of the
// token does, so that it carries the group's changes no longer.
func TestTokensRevokedEndListen(t *testing.T) {
	tokens, path := newTestTokens(t, "", []string{"alice", "alice-secret", "alice"}, []string{"bob", "bob-secret", "bob"})
	s := newHTTPTokensServer(t, tokens, httpLimits{keepAlive: 50 * time.Millisecond})
	resp := s.client(t, "bob-secret").listen(t.Context())
	defer resp.Body.Close()
	waitUntil(t, "bob's listen open", func() bool { return s.t.streamQuota.held() == 1 })
	writeTokensFile(t, path, []string{"alice", "alice-secret", "alice"})
	if changed, err := tokens.reload(false); !changed || err != nil {
		t.Fatalf("reload: got %v, %v; want true, nil", changed, err)
	}
	s.t.endWhere(func(s *httpSession) bool { return tokens.find(s.owner) == nil })
	waitUntil(t, "bob's listen ended", func() bool { return s.serving.Load() == 0 && s.t.streamQuota.held() == 0 })
}

// TestTokensFollowFile checks the transport's own watcher: a removed line
// ends its token's session within a few polls, with no SIGHUP.
func TestTokensFollowFile(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the tokens poll")
	}
	tokens, path := newTestTokens(t, "", []string{"alice", "alice-secret", "alice"}, []string{"bob", "bob-secret", "bob"})
	s := newHTTPTokensServer(t, tokens, httpLimits{})
	hup := make(chan os.Signal, 1)
	s.t.followTokens(hup)
	alice, bob := s.client(t, "alice-secret"), s.client(t, "bob-secret")
	alice.initialize()
	bob.initialize()
	writeTokensFile(t, path, []string{"alice", "alice-secret", "alice"})
	waitUntil(t, "bob's session ended", func() bool { return s.t.sessionQuota.held() == 1 })
	alice.ok("list_groups", nil, nil)
}

// TestSessionBelongsToItsToken tries another token's session id on every
// method: each answers 404, as for an unknown id, and the session lives on.
func TestSessionBelongsToItsToken(t *testing.T) {
	tokens, _ := newTestTokens(t, "shared-secret", []string{"alice", "alice-secret", "alice"}, []string{"bob", "bob-secret", "bob"})
	s := newHTTPTokensServer(t, tokens, httpLimits{})
	alice := s.client(t, "alice-secret")
	alice.initialize()
	for _, token := range []string{"bob-secret", "shared-secret"} {
		thief := s.client(t, token)
		thief.session, thief.version = alice.session, alice.version
		for _, tc := range []struct{ method, body string }{
			{"POST", string(thief.request("tools/call", toolRequest("join_group", speakerArgs("join_group", "grp_"+strings.Repeat("0", 32), "alice")).Params))},
			{"GET", ""},
			{"DELETE", ""},
		} {
			if code, body := statusOf(thief, tc.method, tc.body, map[string]string{"Accept": "application/json, text/event-stream"}); code != 404 {
				t.Errorf("%s %s with alice's session: got %d (%s); want 404", token, tc.method, code, body)
			}
		}
	}
	alice.ok("list_groups", nil, nil)
	if code, _ := statusOf(alice, "DELETE", "", nil); code != 204 {
		t.Errorf("alice's own DELETE: got %d; want 204", code)
	}
}

// TestTokensTwoAgents runs two agents on two tokens over HTTP: each speaks
// as itself, and a spoof of the other (a 2025-era session's call or a
// 2026-07-28 request's) is refused with nothing stored.
func TestTokensTwoAgents(t *testing.T) {
	tokens, _ := newTestTokens(t, "", []string{"alice", "alice-secret", "alice"}, []string{"bob", "bob-secret", "bob"})
	s := newHTTPTokensServer(t, tokens, httpLimits{})
	alice, bob := s.client(t, "alice-secret"), s.client(t, "bob-secret")
	alice.initialize()
	bob.initialize()
	g := alice.createGroup(map[string]any{"context_id": "alice"})
	alice.ok("join_group", speakerArgs("join_group", g, "alice"), nil)
	bob.ok("join_group", speakerArgs("join_group", g, "bob"), nil)
	bob.ok("send_message", with(speakerArgs("send_message", g, "bob"), "wake_context_ids", []string{"alice"}), nil)
	for _, spoof := range []struct{ tool, want string }{
		{"send_message", "Token bob may not act as context_id alice"},
		{"delete_group", "Token bob may not act as context_id alice"},
		{"get_unread_messages", "Token bob may not act as context_id alice"},
	} {
		if reply := bob.tool(spoof.tool, speakerArgs(spoof.tool, g, "alice")); !reply.isError || !strings.Contains(reply.text, spoof.want) {
			t.Errorf("bob's %s as alice: got %s; want an error saying %q", spoof.tool, reply.text, spoof.want)
		}
	}
	modern := s.client(t, "bob-secret")
	modern.version = "2026-07-28"
	req := toolRequest("send_message", speakerArgs("send_message", g, "alice"))
	body := modern.request(req.Method, modernParams(req.Params.(map[string]any)))
	header := map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "send_message"}
	if _, text := statusOf(modern, "POST", string(body), header); !strings.Contains(text, "Token bob may not act as context_id alice") {
		t.Errorf("bob's 2026-07-28 send as alice: got %s; want the refusal", text)
	}
	var unread struct {
		Messages []struct {
			ContextID string `json:"context_id"`
		} `json:"messages"`
	}
	alice.ok("get_unread_messages", speakerArgs("get_unread_messages", g, "alice"), &unread)
	if len(unread.Messages) != 1 || unread.Messages[0].ContextID != "bob" {
		t.Errorf("alice's unread: got %+v; want bob's one message", unread.Messages)
	}
}

// TestTokensNarrowedReachResources narrows a token after its session joined
// a context: that context's wakeup resource is then neither delivered nor
// read, subscribed or unsubscribed (which would leave the group as it).
func TestTokensNarrowedReachResources(t *testing.T) {
	tokens, path := newTestTokens(t, "", []string{"alice", "alice-secret", "alice", "bob"}, []string{"carol", "carol-secret", "carol"})
	s := newHTTPTokensServer(t, tokens, httpLimits{keepAlive: 50 * time.Millisecond})
	alice, carol := s.client(t, "alice-secret"), s.client(t, "carol-secret")
	alice.initialize()
	carol.initialize()
	g := alice.createGroup(map[string]any{"context_id": "alice"})
	for _, id := range []string{"alice", "bob"} {
		alice.ok("join_group", speakerArgs("join_group", g, id), nil)
	}
	carol.ok("join_group", speakerArgs("join_group", g, "carol"), nil)
	stream := alice.openStream(t.Context())
	bobURI, aliceURI := wakeupURI(g, "bob"), wakeupURI(g, "alice")
	for _, uri := range []string{bobURI, aliceURI} { // bob's first: the poller checks in this order
		if msg := alice.call("resources/subscribe", map[string]any{"uri": uri}); msg.Error != nil {
			t.Fatalf("subscribe %s: %+v", uri, msg.Error)
		}
	}
	writeTokensFile(t, path, []string{"alice", "alice-secret", "alice"}, []string{"carol", "carol-secret", "carol"})
	if changed, err := tokens.reload(false); !changed || err != nil {
		t.Fatalf("reload: got %v, %v; want true, nil", changed, err)
	}
	carol.ok("send_message", with(speakerArgs("send_message", g, "carol"), "wake_context_ids", []string{"alice", "bob"}), nil)
	timeout, woken := time.After(30*time.Second), false
	for done := false; !done; {
		select {
		case msg := <-stream:
			var n notification
			json.Unmarshal(msg.Params, &n)
			if n.URI == bobURI {
				t.Fatalf("got %s for bob's wakeups after the narrowing; want none", msg.Method)
			}
			if n.URI == aliceURI && !woken { // gives bob's, were it sent, time to follow
				timeout, woken = time.After(500*time.Millisecond), true
			}
		case <-timeout:
			if !woken {
				t.Fatal("got no wakeup notification for alice within 30 s")
			}
			done = true
		}
	}
	for _, method := range []string{"resources/read", "resources/subscribe", "resources/unsubscribe"} {
		if msg := alice.call(method, map[string]any{"uri": bobURI}); msg.Error == nil || !strings.Contains(msg.Error.Message, "Token alice may not act as context_id bob") {
			t.Errorf("%s of bob's wakeups after the narrowing: got %+v, %s; want the refusal", method, msg.Error, msg.Result)
		}
	}
	if snapshot := storeSnapshot(t, s.t.store, g); !strings.Contains(snapshot, "bob") {
		t.Errorf("after the narrowing: got %s; want bob still a member", snapshot)
	}
}

// TestSendRecordsTokenName sends over HTTP with a per-agent token and with
// the shared one: message_tokens holds the agent token's NAME for its
// message only, never a token, and a group that only the shared token
// wrote to has no such table.
func TestSendRecordsTokenName(t *testing.T) {
	tokens, _ := newTestTokens(t, "shared-secret", []string{"alice-laptop", "alice-secret", "alice"})
	s := newHTTPTokensServer(t, tokens, httpLimits{})
	alice, shared := s.client(t, "alice-secret"), s.client(t, "shared-secret")
	alice.initialize()
	shared.initialize()
	var tokened, plain struct {
		GroupID string `json:"group_id"`
	}
	alice.ok("create_group", map[string]any{"context_id": "alice"}, &tokened)
	shared.ok("create_group", map[string]any{"context_id": "bob"}, &plain)
	alice.ok("join_group", speakerArgs("join_group", tokened.GroupID, "alice"), nil)
	for _, g := range []string{tokened.GroupID, plain.GroupID} {
		shared.ok("join_group", speakerArgs("join_group", g, "bob"), nil)
		shared.ok("send_message", speakerArgs("send_message", g, "bob"), nil)
	}
	alice.ok("send_message", speakerArgs("send_message", tokened.GroupID, "alice"), nil)
	if got := interopStrings(t, groupFile(s.dir, tokened.GroupID), "SELECT m.id || ':' || m.sender_context_id || ':' || t.token_name FROM message_tokens t JOIN messages m ON m.id = t.message_id"); !reflect.DeepEqual(got, []string{"2:alice:alice-laptop"}) {
		t.Errorf("message_tokens: got %v; want only alice's message 2 under her token's name", got)
	}
	if got := interopString(t, groupFile(s.dir, tokened.GroupID), "SELECT COUNT(*) FROM message_tokens WHERE token_name LIKE '%secret%'"); got != "0" {
		t.Errorf("rows holding a token: %s; want 0", got)
	}
	if got := interopString(t, groupFile(s.dir, plain.GroupID), "SELECT COUNT(*) FROM sqlite_master WHERE name = 'message_tokens'"); got != "0" {
		t.Errorf("message_tokens in the group only the shared token wrote to: %s; want none", got)
	}
}

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

// TestTokensNarrowedEndWait narrows a token in the tokens file while its
// wait_for_messages waits for a context the token then loses: the mail
// that arrives is not read for it, and stays unread.
func TestTokensNarrowedEndWait(t *testing.T) {
	tokens, path := newTestTokens(t, "shared-secret", []string{"bot", "bot-secret", "ci-*"})
	s := newHTTPTokensServer(t, tokens, httpLimits{})
	bot, admin := s.client(t, "bot-secret"), s.client(t, "shared-secret")
	bot.initialize()
	admin.initialize()
	g := admin.createGroup(map[string]any{"context_id": "admin", "name": "g"})
	admin.ok("join_group", map[string]any{"group_id": g, "context_id": "admin", "name": "admin"}, nil)
	bot.ok("join_group", map[string]any{"group_id": g, "context_id": "ci-2", "name": "ci2"}, nil)
	got := make(chan toolReply, 1)
	go func() {
		got <- bot.tool("wait_for_messages", map[string]any{"group_id": g, "context_id": "ci-2", "name": "ci2", "timeout_seconds": 5})
	}()
	waitUntil(t, "the wait to start", func() bool { return s.t.streamQuota.held() == 1 })
	writeTokensFile(t, path, []string{"bot", "bot-secret", "ci-1"})
	if changed, err := tokens.reload(false); !changed || err != nil {
		t.Fatalf("reload: got %v, %v; want true, nil", changed, err)
	}
	admin.ok("send_message", map[string]any{"group_id": g, "context_id": "admin", "name": "admin", "message": "for ci-2 only"}, nil)
	if r := <-got; strings.Contains(r.text, "for ci-2 only") {
		t.Fatalf("the narrowed token's wait got ci-2's mail: %s", r.text)
	}
	if n, _, err := s.t.store.unreadCount(g, "ci-2"); n != 1 || err != nil {
		t.Errorf("ci-2's unread after the refused wait: %d (%v); want 1", n, err)
	}
}

// TestTokensMalformedReportedOnce leaves a malformed or unreadable tokens
// file in place across polls: it is reported once, not every two seconds for
// as long as it stays, and a SIGHUP (a forced reload) reports it again.
func TestTokensMalformedReportedOnce(t *testing.T) {
	for name, spoil := range map[string]func(path string){
		"malformed":  func(path string) { os.WriteFile(path, []byte("alice sha256:nothex alice\n"), 0o600) },
		"unreadable": func(path string) { os.Remove(path); os.Mkdir(path, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			tokens, path := newTestTokens(t, "", []string{"alice", "alice-secret", "alice"})
			spoil(path)
			for i, want := range []struct {
				force, err bool
			}{{false, true}, {false, false}, {false, false}, {true, true}} {
				changed, err := tokens.reload(want.force)
				if changed || (err != nil) != want.err {
					t.Errorf("reload %d (forced: %v): got changed %v, error %v; want changed false, an error: %v", i+1, want.force, changed, err, want.err)
				}
			}
			if tokens.authenticate("Bearer alice-secret") == nil {
				t.Error("alice after the spoiled file: refused; want the tokens loaded before")
			}
		})
	}
}

// TestTokensRevokedWhileBodyCame removes a token from the file after its
// 2026-07-28 listen or 2025-era initialize passed the guard but before its
// body arrived, so the reload's endWhere ran before the request was listed:
// it must not open a stream or a session that outlives the revocation.
func TestTokensRevokedWhileBodyCame(t *testing.T) {
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{}}
	for _, tt := range []struct {
		name, method, headers string
		params                map[string]any
	}{
		{"listen", "subscriptions/listen", "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\n",
			map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{}}, "_meta": meta}},
		{"initialize", "initialize", "", map[string]any{"protocolVersion": "2025-11-25"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tokens, path := newTestTokens(t, "", []string{"alice", "alice-secret", "alice"}, []string{"bob", "bob-secret", "bob"})
			s := newHTTPTokensServer(t, tokens, httpLimits{})
			body := s.client(t, "bob-secret").request(tt.method, tt.params)
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer bob-secret\r\nContent-Type: application/json\r\n"+
				"Accept: application/json, text/event-stream\r\n%sContent-Length: %d\r\n\r\n", tt.headers, len(body))
			waitUntil(t, "bob's request past the guard", func() bool { return s.serving.Load() == 1 })
			writeTokensFile(t, path, []string{"alice", "alice-secret", "alice"})
			if changed, err := tokens.reload(false); !changed || err != nil {
				t.Fatalf("reload: got %v, %v; want true, nil", changed, err)
			}
			s.t.endWhere(func(s *httpSession) bool { return tokens.find(s.owner) == nil })
			conn.Write(body)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("bob's %s after bob was removed: got %s; want 401", tt.method, resp.Status)
			}
			if held := s.t.sessionQuota.held(); held != 0 {
				t.Errorf("sessions held: got %d; want 0", held)
			}
		})
	}
}

// TestTokensEmptyTokenNeverMatches lists the digest of an empty token, as
// `printf %s "$TOKEN" | sha256sum` makes with TOKEN unset: a header whose
// token is only blanks (a no-break space survives HTTP's trimming, then
// strings.TrimSpace took it) must not authenticate as that agent.
func TestTokensEmptyTokenNeverMatches(t *testing.T) {
	tokens, _ := newTestTokens(t, "", []string{"unset", "", "*"}, []string{"alice", "alice-secret", "alice"})
	for _, header := range []string{"Bearer \u00a0", "Bearer \u0085", "Bearer  "} {
		if tok := tokens.authenticate(header); tok != nil {
			t.Errorf("authenticate(%q): got token %s; want none", header, tok.name)
		}
	}
	if tok := tokens.authenticate("Bearer alice-secret"); tok == nil || tok.name != "alice" {
		t.Errorf("authenticate alice: got %v; want alice's token", tok)
	}
}

// TestTokensRenamedEndSessions renames a token in the tokens file, its
// digest kept: the sessions it opened are ended, as for a removed line, so
// that no later send or audited call carries the name it no longer has.
func TestTokensRenamedEndSessions(t *testing.T) {
	tokens, path := newTestTokens(t, "", []string{"alice", "alice-secret", "alice"})
	s := newHTTPTokensServer(t, tokens, httpLimits{})
	hup := make(chan os.Signal, 1)
	s.t.followTokens(hup)
	alice := s.client(t, "alice-secret")
	alice.initialize()
	g := alice.createGroup(map[string]any{"context_id": "alice"})
	alice.ok("join_group", speakerArgs("join_group", g, "alice"), nil)
	writeTokensFile(t, path, []string{"alice-laptop", "alice-secret", "alice"})
	hup <- syscall.SIGHUP
	waitUntil(t, "the renamed token's session ended", func() bool { return s.t.sessionQuota.held() == 0 })
	if code, body := statusOf(alice, "POST", string(alice.request("tools/list", nil)), nil); code != 404 {
		t.Fatalf("the renamed token's session: got %d (%s); want 404", code, body)
	}
	alice.session = ""
	alice.initialize()
	alice.ok("send_message", speakerArgs("send_message", g, "alice"), nil)
	if got := interopStrings(t, groupFile(s.dir, g), "SELECT token_name FROM message_tokens"); !reflect.DeepEqual(got, []string{"alice-laptop"}) {
		t.Errorf("message_tokens: got %v; want [alice-laptop]", got)
	}
}

// TestTokensSharedListedAsAgent lists the shared token's digest in the
// tokens file too, as when a shared token is narrowed to one agent: the
// token is that agent's everywhere, authenticated and allowed alike.
func TestTokensSharedListedAsAgent(t *testing.T) {
	tokens, _ := newTestTokens(t, "shared-secret", []string{"alice", "shared-secret", "alice"})
	tok := tokens.authenticate("Bearer shared-secret")
	if tok == nil || tok.name != "alice" {
		t.Fatalf("authenticate: got %v; want alice's token", tok)
	}
	speaks := tokens.speaksFor(*tok)
	for id, want := range map[string]bool{"alice": true, "bob": false} {
		if got := speaks(id) == nil; got != want {
			t.Errorf("speaks for %s: got %v; want %v", id, got, want)
		}
	}
}
