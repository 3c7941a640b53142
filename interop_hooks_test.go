package main

import (
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestInteropHookOnOriginalDatabase runs a hook and `wait` for Carol on the
// group the Python original wrote: her mail comes out wakeups first, read
// and acknowledged the way get_unread_messages leaves it, and the only
// schema change is the new wakeup_deliveries table, which the original
// never reads, so its tables, columns and indexes stay exactly its own.
func TestInteropHookOnOriginalDatabase(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, filepath.Join("testdata", "interop", interopGroup+".sqlite3"), filepath.Join(dir, interopGroup+".sqlite3"))
	copyFile(t, filepath.Join("testdata", "interop", "observability.sqlite3"), filepath.Join(dir, "observability.sqlite3"))
	groupPath := filepath.Join(dir, interopGroup+".sqlite3")
	before := interopSchema(t, groupPath)
	t.Setenv("CROSSTALK_GROUPS_DIR", dir)
	t.Setenv("CROSSTALK_CONTEXT_ID", "")

	st := newTestStore(t, dir)
	claimed, err := claimAnyWakeup(st, "ctx-carol", nil)
	if err != nil || claimed == nil || claimed.messageID != 1 || claimed.sender != "alice" {
		t.Fatalf("wait's claim: %+v (%v); want message 1 from alice", claimed, err)
	}
	// As `wait` does once its notice is written.
	if err := st.deliverMessages(interopGroup, "ctx-carol", []int64{1}, nil); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := runHookCLI(t, []byte(`{"session_id": "ctx-carol", "hook_event_name": "UserPromptSubmit"}`), "--client", "claude-code")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	text := additionalContext(t, out, true)
	var order []string
	for _, line := range strings.Split(text, "\n") {
		if id, ok := strings.CutPrefix(line, "- message "); ok {
			order = append(order, strings.Fields(id)[0])
		}
	}
	// Wake events first (4, 5, 7, 8, 9; wait delivered 1), then message 2,
	// which only mentions alice.
	if want := []string{"4", "5", "7", "8", "9", "2"}; !reflect.DeepEqual(order, want) {
		t.Errorf("printed messages %v; want %v", order, want)
	}
	if got := interopString(t, groupPath, "SELECT unread_count FROM group_members WHERE context_id = 'ctx-carol'"); got != "0" {
		t.Errorf("Carol's unread_count: %s; want 0", got)
	}
	if got := interopString(t, groupPath, "SELECT COUNT(*) FROM wakeup_events WHERE context_id = 'ctx-carol' AND acknowledged_at IS NULL"); got != "0" {
		t.Errorf("Carol's pending wake events: %s; want 0", got)
	}
	if got := interopString(t, groupPath, "SELECT group_concat(message_id || ':' || delivered_via) FROM (SELECT * FROM wakeup_deliveries ORDER BY message_id)"); got != "1:wait,2:hook,4:hook,5:hook,7:hook,8:hook,9:hook" {
		t.Errorf("deliveries: %s", got)
	}
	after := interopSchema(t, groupPath)
	var added []string
	for _, obj := range after {
		if !slices.Contains(before, obj) {
			added = append(added, obj)
		}
	}
	if len(after) != len(before)+2 || len(added) != 2 || !strings.HasPrefix(added[0], "index sqlite_autoindex_wakeup_deliveries_1") ||
		!strings.HasPrefix(added[1], "table wakeup_deliveries wakeup_deliveries CREATE TABLE wakeup_deliveries") {
		t.Errorf("schema changes: %v; want only the wakeup_deliveries table and its key", added)
	}
}

// TestInteropTokenedSendOnOriginalDatabase sends one message over HTTP to
// the group the Python original wrote, through a per-agent token, and the
// same message to a second copy through the shared token: the tokened copy's
// only schema change is message_tokens, which doctor accepts; the other
// copy's schema is untouched; and every read tool answers the same on both.
func TestInteropTokenedSendOnOriginalDatabase(t *testing.T) {
	tokens, _ := newTestTokens(t, "shared-secret", []string{"bob-laptop", "bob-secret", "ctx-bob"})
	bob := map[string]any{"group_id": interopGroup, "context_id": "ctx-bob", "name": "bob"}
	carol := map[string]any{"group_id": interopGroup, "context_id": "ctx-carol", "name": "Carol"}
	alice := map[string]any{"group_id": interopGroup, "context_id": "ctx-alice", "name": "alice"}
	reads := map[string][]string{}
	for _, token := range []string{"bob-secret", "shared-secret"} {
		dir := t.TempDir()
		for _, name := range []string{interopGroup + ".sqlite3", "observability.sqlite3"} {
			copyFile(t, filepath.Join("testdata", "interop", name), filepath.Join(dir, name))
		}
		groupPath := groupFile(dir, interopGroup)
		before := interopSchema(t, groupPath)
		st, err := newStore(dir, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		tr := newHTTPTransport(st, newServerConfig(version, time.Hour), nil, defaultHTTPLimits)
		tr.tokens = tokens
		srv := httptest.NewServer(newHTTPGuard(true, tokens, nil, tr))
		t.Cleanup(func() {
			srv.Close()
			tr.close()
			st.close()
		})
		c := &httpTestClient{tb: t, url: srv.URL + httpEndpoint, token: token}
		c.initialize()
		c.ok("send_message", with(bob, "message", "@carol from bob's laptop ✓"), nil)
		var added []string
		for _, obj := range interopSchema(t, groupPath) {
			if !slices.Contains(before, obj) {
				added = append(added, obj)
			}
		}
		want := []string(nil)
		if token == "bob-secret" {
			want = []string{"table message_tokens message_tokens " + strings.Replace(tokensTable, " IF NOT EXISTS", "", 1)}
			if got := interopString(t, groupPath, "SELECT group_concat(message_id || ':' || token_name) FROM message_tokens"); got != "11:bob-laptop" {
				t.Errorf("message_tokens: got %s; want 11:bob-laptop", got)
			}
		}
		if !reflect.DeepEqual(added, want) {
			t.Errorf("schema changes through %s: got %q; want %q", token, added, want)
		}
		if err := checkGroupFile(groupPath); err != nil {
			t.Errorf("doctor's check after a send through %s: %v", token, err)
		}
		// The reads go through the shared token, which may read as anyone,
		// after the schema is compared: read tools record deliveries.
		reader := &httpTestClient{tb: t, url: c.url, token: "shared-secret"}
		reader.initialize()
		sentAt := interopString(t, groupPath, "SELECT created_at FROM messages WHERE id = 11")
		for _, call := range []struct {
			tool string
			args map[string]any
		}{
			{"get_unread_messages", carol},
			{"wait_for_messages", with(alice, "timeout_seconds", 0)},
			{"get_messages_after", with(carol, "after_message_id", 9)},
			{"get_latest_messages", carol},
			{"search_messages", with(carol, "query", "laptop")},
			{"get_all_messages", carol},
		} {
			reply := reader.tool(call.tool, call.args)
			if reply.isError || !strings.Contains(reply.text, "from bob's laptop") {
				t.Errorf("%s through %s: got %s; want message 11", call.tool, token, reply.text)
			}
			reads[token] = append(reads[token], call.tool+" "+strings.ReplaceAll(reply.text, sentAt, "SENT_AT"))
		}
	}
	if !reflect.DeepEqual(reads["bob-secret"], reads["shared-secret"]) {
		t.Errorf("reads after the tokened send:\n%q\ndiffer from those after the shared token's:\n%q", reads["bob-secret"], reads["shared-secret"])
	}
}
