package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

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

// TestListGroupsWithLockedCatalog: the catalog is an index that list_groups
// repairs as it can. Another process holding its write lock (a long audit
// query, sqlite3 on observability.sqlite3) made a stale row's removal fail
// list_groups as "the group is busy", though every group could be read; and
// each repair waited out a busy window of its own, 3 s a row.
func TestListGroupsWithLockedCatalog(t *testing.T) {
	dir := t.TempDir()
	st := newTestStore(t, dir)
	var want []string
	for i := range 6 {
		id := newTestGroup(t, st, fmt.Sprint(i), "alice")
		switch i % 3 {
		case 0: // deleted by hand: its catalog row is stale
			if err := removeDatabaseFiles(st.groupPath(id)); err != nil {
				t.Fatal(err)
			}
			continue
		case 1: // missing from the catalog, as one a Python server made
			if err := st.catalogExec(context.Background(), "DELETE FROM groups WHERE group_id = ?", id); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, id)
	}
	slices.Sort(want)
	holdWriteLock(t, filepath.Join(dir, catalogFileName))
	start := time.Now()
	groups, err := st.listGroups()
	took := time.Since(start)
	var got []string
	for _, g := range groups {
		got = append(got, g.groupID)
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("listGroups with the catalog locked: got %v, %v; want %v", got, err, want)
	}
	if took > 2*busyRetryWindow {
		t.Errorf("listGroups with 4 repairs under a locked catalog took %v; want one busy window (%v)", took, busyRetryWindow)
	}
}

// TestCatalogOpensUnderWriteLock shows that a server's first use of an
// existing catalog needs no write lock: while another process holds
// observability.sqlite3's (an audit clean-up, "Delete audit history"), a
// newly started server still lists the groups.
func TestCatalogOpensUnderWriteLock(t *testing.T) {
	dir := t.TempDir()
	a := newTestGroup(t, newTestStore(t, dir), "A", "alice")
	holdWriteLock(t, filepath.Join(dir, catalogFileName))
	groups, err := newTestStore(t, dir).listGroups()
	if err != nil || len(groups) != 1 || groups[0].groupID != a {
		t.Errorf("listGroups of a new store with the catalog locked: got %+v, %v; want %s", groups, err, a)
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
	// Earlier builds kept an empty lock file "-wq" beside each group.
	if err := os.WriteFile(path+"-wq", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mustCall(t, s, "delete_group", map[string]any{"group_id": g, "context_id": "alice"})
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-wq"} {
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

// TestSendWaitingThroughADelete has a send wait for the group's write lock,
// held by another connection, while another store deletes the group, as
// another process would: the send must be answered not_found, not
// acknowledged for a file that is gone.
func TestSendWaitingThroughADelete(t *testing.T) {
	dir := t.TempDir()
	st, other := newTestStore(t, dir), newTestStore(t, dir)
	g := newTestGroup(t, st, "doomed", "alice")
	ctx := context.Background()
	holder, err := openTestDB(t, st.groupPath(g), "rw").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: "into the void", priority: "normal"})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the send is waiting for the lock (it waits up to busyRetryWindow)
	if err := other.deleteGroup(g, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	var de *domainError
	if err := <-done; !errors.As(err, &de) || de.category != categoryNotFound {
		t.Errorf("send waiting through a delete: got %v; want not_found", err)
	}
}

// TestCatalogFollowsItsFile shows that a server whose observability.sqlite3
// was deleted (a user resetting the audit history, a cache cleaner) lists
// what the new file says, as the original does, rather than the rows of
// the unlinked file it still held open: another server renamed the group.
func TestCatalogFollowsItsFile(t *testing.T) {
	dir := t.TempDir()
	a, b := newTestStore(t, dir), newTestStore(t, dir)
	meta, err := a.createGroup("alice", "old name", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := removeDatabaseFiles(filepath.Join(dir, catalogFileName)); err != nil {
		t.Fatal(err)
	}
	renamed := "new name"
	if _, err := b.updateGroupMetadata(meta.groupID, "alice", &renamed, nil); err != nil {
		t.Fatal(err)
	}
	groups, err := a.listGroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].name != renamed {
		t.Errorf("listGroups after the catalog file was replaced: got %+v; want the group named %q", groups, renamed)
	}
	if _, err := a.createGroup("alice", "second", ""); err != nil {
		t.Fatal(err)
	}
	cat := openTestDB(t, filepath.Join(dir, catalogFileName), "ro")
	if got := queryRows(t, cat, "SELECT name FROM groups ORDER BY name"); len(got) != 2 {
		t.Errorf("catalog file rows: got %v; want both groups (the dashboard reads their names there)", got)
	}
}

// TestListGroupsWhileAnotherProcessChangesThem has another process create
// or delete a group while list_groups waits for the catalog, held locked
// here so that the change lands in that window: the new group's catalog
// row must survive, and the deleted group must not be reported on stderr
// as a damaged file.
func TestListGroupsWhileAnotherProcessChangesThem(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		before func(t *testing.T, other *store) string                        // returns the group's id
		during func(t *testing.T, other *store, catalog *sql.Conn, id string) // the other process's change
		check  func(t *testing.T, dir, id, logs string)
	}{
		{
			name:   "created",
			before: func(*testing.T, *store) string { return "grp_" + randomHex(16) },
			during: func(t *testing.T, other *store, catalog *sql.Conn, id string) {
				if err := other.initGroup(id, "alice", "fresh", ""); err != nil {
					t.Fatal(err)
				}
				if _, err := catalog.ExecContext(ctx, "INSERT INTO groups(group_id, name, description, updated_at) VALUES (?, 'fresh', '', '')", id); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, dir, id, _ string) {
				cat := openTestDB(t, filepath.Join(dir, catalogFileName), "ro")
				if got := queryRows(t, cat, "SELECT name FROM groups WHERE group_id = ?", id); len(got) != 1 {
					t.Errorf("catalog rows of the group created during list_groups: got %v; want [fresh]", got)
				}
			},
		},
		{
			name:   "deleted",
			before: func(t *testing.T, other *store) string { return newTestGroup(t, other, "doomed", "alice") },
			during: func(t *testing.T, other *store, catalog *sql.Conn, id string) {
				other.forget(id)
				if err := removeDatabaseFiles(other.groupPath(id)); err != nil {
					t.Fatal(err)
				}
				if _, err := catalog.ExecContext(ctx, "DELETE FROM groups WHERE group_id = ?", id); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, _, id, logs string) {
				if strings.Contains(logs, id) {
					t.Errorf("stderr after a group was deleted during list_groups: got %q; want no line naming %s", logs, id)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := captureLog(t)
			dir := t.TempDir()
			lister, other := newTestStore(t, dir), newTestStore(t, dir)
			id := tt.before(t, other)
			if _, err := other.listGroups(); err != nil { // the catalog exists
				t.Fatal(err)
			}
			other.closeCatalog()
			// Exclusive locking mode keeps every other connection out of
			// the catalog, readers too, until this one closes.
			catalogDB := openTestDB(t, filepath.Join(dir, catalogFileName), "rw")
			catalog, err := catalogDB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"PRAGMA locking_mode=EXCLUSIVE", "BEGIN IMMEDIATE", "UPDATE groups SET name = name"} {
				if _, err := catalog.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			listed := make(chan error, 1)
			go func() {
				_, err := lister.listGroups()
				listed <- err
			}()
			time.Sleep(300 * time.Millisecond) // list_groups waits for the catalog (for up to busyRetryWindow)
			tt.during(t, other, catalog, id)
			if _, err := catalog.ExecContext(ctx, "COMMIT"); err != nil {
				t.Fatal(err)
			}
			catalog.Close()
			catalogDB.Close()
			if err := <-listed; err != nil {
				t.Fatalf("listGroups: %v", err)
			}
			tt.check(t, dir, id, logs.String())
		})
	}
}

// TestGroupsDirectoryRemovedWhileRunning removes the groups directory under
// a running store, as clearing ~/.cache (the default's parent) does:
// list_groups and create_group work again at once, without a restart.
func TestGroupsDirectoryRemovedWhileRunning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "groups")
	st := newTestStore(t, dir)
	if _, err := st.createGroup("alice", "before", ""); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if groups, err := st.listGroups(); err != nil || len(groups) != 0 {
		t.Errorf("list_groups after the directory was removed: got %d groups, %v; want none and no error", len(groups), err)
	}
	created, err := st.createGroup("alice", "after", "")
	if err != nil {
		t.Fatalf("create_group after the directory was removed: got %v; want success", err)
	}
	if groups, err := st.listGroups(); err != nil || len(groups) != 1 || groups[0].groupID != created.groupID {
		t.Errorf("list_groups: got %+v, %v; want only %s", groups, err, created.groupID)
	}
}

// TestGroupsDirectoryWithPatternCharacters keeps groups findable in a
// directory whose path holds glob pattern characters: globbed, "[team]"
// matched a directory named "t" and "a[" was a bad pattern, so list_groups
// answered no groups (and dropped every catalog row as stale) and hooks,
// status and wait found no memberships.
func TestGroupsDirectoryWithPatternCharacters(t *testing.T) {
	for _, name := range []string{"[team]", "a[", "*", "what?"} {
		t.Run(name, func(t *testing.T) {
			st := newTestStore(t, filepath.Join(t.TempDir(), name))
			g := newTestGroup(t, st, "team", "alice")
			groups, err := st.listGroups()
			if err != nil || len(groups) != 1 || groups[0].groupID != g {
				t.Errorf("listGroups: got %v, %v; want the group %s", groups, err, g)
			}
			ms, err := st.memberships("alice")
			if err != nil || len(ms) != 1 || ms[0].groupID != g {
				t.Errorf("memberships: got %v, %v; want the group %s", ms, err, g)
			}
		})
	}
}

// TestMembershipsReadsManyGroups reads more groups than membershipReaders,
// a member of every third with as many unread messages as its place, and a
// damaged file among them: each membership comes once, in group id order,
// with its own counts, and the damaged file is skipped.
func TestMembershipsReadsManyGroups(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	var want []membership
	for i := range 5 * membershipReaders {
		if i%3 != 0 {
			newTestGroup(t, st, fmt.Sprint("other ", i), "bob")
			continue
		}
		g := newTestGroup(t, st, fmt.Sprint("team ", i), "bob", "alice")
		for range i {
			if _, err := st.sendMessage(g, outgoing{contextID: "bob", name: "bob", text: "hi", priority: "normal"}); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, membership{groupID: g, groupName: fmt.Sprint("team ", i), name: "alice", unread: int64(i), wakeups: int64(i)}) // a group of two wakes for every message
	}
	slices.SortFunc(want, func(a, b membership) int { return cmp.Compare(a.groupID, b.groupID) })
	if err := os.WriteFile(filepath.Join(st.dir, "grp_"+strings.Repeat("7", 32)+".sqlite3"), []byte("not a database"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := st.memberships("alice")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v;\nwant %+v", got, err, want)
	}
}

// TestRemoveDatabaseFilesStopsAtFirstFailure shows that a database file that
// cannot be removed keeps its -wal and -shm files, as in the original, whose
// delete_group stops at the first file it cannot unlink: the -wal may hold
// commits another process has not yet written into the database.
func TestRemoveDatabaseFilesStopsAtFirstFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grp_"+strings.Repeat("ab", 16)+".sqlite3")
	// A directory with an entry stands for a file this process may not
	// remove (root may remove any file).
	if err := os.MkdirAll(filepath.Join(path, "entry"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeDatabaseFiles(path); err == nil {
		t.Fatal("got no error; want the database file's")
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: got %v; want it kept", filepath.Base(p), err)
		}
	}
}
