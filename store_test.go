package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// timestampPattern is the original's isoformat() for UTC.
var timestampPattern = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$`)

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
