package main

import "testing"

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
