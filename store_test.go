package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"syscall"
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

// TestEmptyReadsTakeNoWriteLock reads with nothing to return while another
// process holds the group's write lock, as a huge send or a stopped writer
// does for seconds. The original reads without the lock and takes it only
// to mark what it returns, so it answers these at once; the port took the
// lock first and answered "group is busy" after 3 s. Refusals, also decided
// by a read, come at once too.
func TestEmptyReadsTakeNoWriteLock(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	g := newTestGroup(t, st, "team", "alice", "bob")
	if _, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: "hello", priority: "normal"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.unreadMessages(context.Background(), g, "bob", "bob", ""); err != nil {
		t.Fatal(err)
	}
	holdWriteLock(t, st.groupPath(g))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		read func() ([]message, error)
		want error
	}{
		{"unread", func() ([]message, error) { return st.unreadMessages(ctx, g, "bob", "bob", "") }, nil},
		{"after the last", func() ([]message, error) { return st.messagesAfter(ctx, g, "bob", "bob", 1) }, nil},
		{"latest after own", func() ([]message, error) { return st.latestMessages(ctx, g, "alice", "alice") }, nil},
		{"search without hits", func() ([]message, error) { return st.searchMessages(ctx, g, "bob", "bob", "nothing") }, nil},
		{"not joined", func() ([]message, error) { return st.messagesAfter(ctx, g, "carol", "carol", 0) }, errNotJoined},
		{"wrong name", func() ([]message, error) { return st.searchMessages(ctx, g, "bob", "Bob", "hello") }, errNameMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := tc.read(); len(got) != 0 || err != tc.want {
				t.Errorf("got %d messages, %v; want none, %v", len(got), err, tc.want)
			}
		})
	}
}

// TestStorageErrorText shows that a file error reaches the agent in the
// words of Python's OSError, as the original reports it.
func TestStorageErrorText(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Python reports Windows errors as [WinError N]")
	}
	path := "/groups/grp_" + strings.Repeat("ab", 16) + ".sqlite3"
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"not permitted", fmt.Errorf("delete group: %w", &fs.PathError{Op: "remove", Path: path, Err: syscall.EPERM}),
			"Storage error while processing delete_group: [Errno 1] Operation not permitted: '" + path + "'"},
		{"permission denied", &fs.PathError{Op: "remove", Path: path + "-wal", Err: syscall.EACCES},
			"Storage error while processing delete_group: [Errno 13] Permission denied: '" + path + "-wal'"},
		{"read-only", &fs.PathError{Op: "remove", Path: path, Err: syscall.EROFS},
			"Storage error while processing delete_group: [Errno 30] Read-only file system: '" + path + "'"},
		{"not a file error", errors.New("rename failed"), "Storage error while processing delete_group: rename failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			de := classify("delete_group", tt.err)
			if de.msg != tt.want || de.category != categoryInternal {
				t.Errorf("got %q (%s); want %q (internal)", de.msg, de.category, tt.want)
			}
		})
	}
}
