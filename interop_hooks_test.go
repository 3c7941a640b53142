package main

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
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
	if err := st.deliverMessages(interopGroup, "ctx-carol", viaWait, []int64{1}, nil); err != nil {
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
