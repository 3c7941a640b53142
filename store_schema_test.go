package main

import "testing"

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
