package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// timestampPattern is the original's isoformat() for UTC.
var timestampPattern = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$`)

func TestGroupDatabaseLayout(t *testing.T) {
	s, _ := newTestServer(t)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	mustSend(t, s, g, "alice", "Alice", "indexed text", nil)
	db := openTestDB(t, s.store.groupPath(g), "rw")
	checks := []struct{ q, want string }{
		{"PRAGMA user_version", "1"},
		{"PRAGMA journal_mode", "wal"},
		{"PRAGMA integrity_check", "ok"},
		{"SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'message_search_%' ORDER BY name)",
			"group_members,group_message_metrics,group_metadata,group_state,member_unread_messages,message_search,messages,wakeup_events"},
		{"SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY name)",
			"member_unread_messages_by_message,messages_by_sender_and_id,wakeup_events_by_context"},
		{"SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name)",
			"messages_search_after_content_update,messages_search_after_delete,messages_search_after_insert"},
		{"SELECT sql LIKE '%tokenize=''trigram''%' FROM sqlite_master WHERE name = 'message_search'", "1"},
		{"SELECT message_revision || ',' || member_revision || ',' || wakeup_revision || ',' || metadata_revision FROM group_state", "1,1,0,0"},
		{"SELECT group_concat(metric || '=' || value || ':' || count, ',') FROM group_message_metrics", "priority=normal:1,routing=fallback:1"},
		{"SELECT mentions || wakeup_targets FROM messages", "[][]"},
		{"SELECT count(*) FROM message_search WHERE content LIKE '%dexed t%'", "1"},
	}
	for _, c := range checks {
		if got := queryRows(t, db, c.q); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: got %v; want %s", c.q, got, c.want)
		}
	}
	if _, err := db.Exec("INSERT INTO message_search(message_search) VALUES('integrity-check')"); err != nil {
		t.Errorf("FTS integrity check: %v", err)
	}
	for _, ts := range queryRows(t, db, "SELECT created_at FROM messages UNION ALL SELECT joined_at FROM group_members UNION ALL SELECT updated_at FROM group_metadata") {
		if !timestampPattern.MatchString(ts) {
			t.Errorf("timestamp %q is not in the original's format", ts)
		}
	}
}

func TestStoredListsUsePythonFormat(t *testing.T) {
	s, _ := newTestServer(t)
	g := mustCreateGroup(t, s, "alice")
	for _, m := range [][2]string{{"alice", "Alice"}, {"bob", "Bob"}, {"ça", "Ça"}} {
		mustJoin(t, s, g, m[0], m[1])
	}
	mustSend(t, s, g, "alice", "Alice", "@all hi", nil)
	got := queryRows(t, openTestDB(t, s.store.groupPath(g), "rw"), "SELECT mentions || '|' || wakeup_targets || '|' || routing_reason FROM messages")
	want := `["bob", "\u00e7a"]|["bob", "\u00e7a"]|mentioned`
	if len(got) != 1 || got[0] != want {
		t.Errorf("got %v; want %s", got, want)
	}
}

func TestCatalog(t *testing.T) {
	dir := t.TempDir()
	st := newTestStore(t, dir)
	if _, err := os.Stat(filepath.Join(dir, catalogFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("catalog before first use: got %v; want no file (start-up does no database work)", err)
	}
	if _, err := st.listGroups(); err != nil {
		t.Fatal(err)
	}
	cat := openTestDB(t, filepath.Join(dir, catalogFileName), "rw")
	if got := queryRows(t, cat, "PRAGMA auto_vacuum"); got[0] != "2" {
		t.Errorf("auto_vacuum: got %s; want 2 (incremental)", got[0])
	}
	a, err := st.createGroup("alice", "A", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.createGroup("alice", "B", "")
	if err != nil {
		t.Fatal(err)
	}
	// Another writer removes b's file and a's catalog row behind our back.
	if err := removeDatabaseFiles(st.groupPath(b.groupID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Exec("DELETE FROM groups WHERE group_id = ?", a.groupID); err != nil {
		t.Fatal(err)
	}
	groups, err := st.listGroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].groupID != a.groupID || groups[0].name != "A" {
		t.Errorf("listGroups: got %+v; want only %s named A", groups, a.groupID)
	}
	if got := queryRows(t, cat, "SELECT group_id FROM groups"); len(got) != 1 || got[0] != a.groupID {
		t.Errorf("catalog rows: got %v; want [%s] (stale removed, missing restored)", got, a.groupID)
	}
}

func TestDeleteGroupRemovesFiles(t *testing.T) {
	s, _ := newTestServer(t)
	keep := mustCreateGroup(t, s, "alice")
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	mustSend(t, s, g, "alice", "Alice", "bye", nil)
	path := s.store.groupPath(g)
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("expected a -wal file while the group is open: %v", err)
	}
	mustCall(t, s, "delete_group", map[string]any{"group_id": g, "context_id": "alice"})
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: got %v; want it removed", filepath.Base(p), err)
		}
	}
	rows := queryRows(t, openTestDB(t, filepath.Join(s.store.dir, catalogFileName), "rw"), "SELECT group_id FROM groups")
	if len(rows) != 1 || rows[0] != keep {
		t.Errorf("catalog: got %v; want only %s", rows, keep)
	}
	if !s.store.groupExists(keep) {
		t.Error("the other group was removed too")
	}
}

// TestGroupDeletedElsewhere shows that a group deleted through another
// store (as by another process) is reported as not found by a store that
// holds a cached handle, and that its file is never recreated.
func TestGroupDeletedElsewhere(t *testing.T) {
	dir := t.TempDir()
	st := newTestStore(t, dir)
	other := newTestStore(t, dir)
	meta, err := st.createGroup("alice", "", "")
	if err != nil {
		t.Fatal(err)
	}
	g := meta.groupID
	if err := st.joinGroup(g, "alice", "Alice"); err != nil {
		t.Fatal(err)
	}
	if err := other.deleteGroup(g, "alice"); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func() error{
		"users": func() error { _, err := st.users(g); return err },
		"sendMessage": func() error {
			_, err := st.sendMessage(g, outgoing{contextID: "alice", name: "Alice", text: "x", priority: "normal"})
			return err
		},
		"joinGroup": func() error { return st.joinGroup(g, "bob", "Bob") },
		"revision":  func() error { _, err := st.messageRevision(g); return err },
	}
	for name, op := range ops {
		var de *domainError
		if err := op(); !errors.As(err, &de) || de.category != categoryNotFound {
			t.Errorf("%s: got %v; want not_found", name, err)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(dir, g+"*"))
	if len(matches) != 0 {
		t.Errorf("group files reappeared: %v", matches)
	}
}

func TestBusyRetry(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 3 s retry window")
	}
	for _, tt := range []struct {
		name   string
		hold   time.Duration
		isBusy bool
	}{
		{"held 200 ms is retried into success", 200 * time.Millisecond, false},
		{"held past the retry window is busy", busyRetryWindow + 500*time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			g := mustCreateGroup(t, s, "alice")
			mustJoin(t, s, g, "alice", "Alice")
			released := time.AfterFunc(tt.hold, holdWriteLock(t, s.store.groupPath(g)))
			defer released.Stop()
			start := time.Now()
			out, isErr := callTool(t, s, "send_message", map[string]any{"group_id": g, "context_id": "alice", "name": "Alice", "message": "hi"})
			elapsed := time.Since(start)
			if isErr != tt.isBusy {
				t.Fatalf("got %v (isError %v); want isError %v", out, isErr, tt.isBusy)
			}
			if tt.isBusy && out["error"] != errGroupBusy.msg {
				t.Errorf("got %v; want %q", out["error"], errGroupBusy.msg)
			}
			if !tt.isBusy && elapsed < tt.hold/2 {
				t.Errorf("succeeded after %v; want it to wait for the %v lock", elapsed, tt.hold)
			}
			if tt.isBusy && (elapsed < busyRetryWindow || elapsed > busyRetryWindow+2*time.Second) {
				t.Errorf("gave up after %v; want about %v", elapsed, busyRetryWindow)
			}
		})
	}
}

func TestCorruptGroupIsAnInternalError(t *testing.T) {
	s, _ := newTestServer(t)
	g := "grp_" + strings.Repeat("ab", 16)
	if err := os.WriteFile(s.store.groupPath(g), []byte(strings.Repeat("not a database ", 512)), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ := parseArgs([]byte(`{"caller_name":"c","group_id":"` + g + `"}`))
	res := runTool(t, s, "get_users", a)
	if !res.isError || res.category != categoryInternal || pyJSON(res.value) != `{"error": "Database error while processing get_users: file is not a database"}` {
		t.Errorf("got %s (%s); want the original's database error", pyJSON(res.value), res.category)
	}
}

func TestHandleCacheIsBounded(t *testing.T) {
	s, _ := newTestServer(t)
	var ids []string
	for i := 0; i < maxOpenGroups+5; i++ {
		g := mustCreateGroup(t, s, "alice")
		mustJoin(t, s, g, "alice", "Alice")
		ids = append(ids, g)
	}
	s.store.mu.Lock()
	n := len(s.store.handles)
	s.store.mu.Unlock()
	if n > maxOpenGroups {
		t.Errorf("got %d open handles; want at most %d", n, maxOpenGroups)
	}
	sort.Strings(ids)
	for _, g := range ids {
		if _, err := s.store.users(g); err != nil {
			t.Errorf("users(%s) after eviction: %v", g, err)
		}
	}
}
