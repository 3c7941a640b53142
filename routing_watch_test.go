package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// awaitGroup waits (generously) until sub names group id.
func awaitGroup(t *testing.T, sub *watchSubscription, id string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-sub.C:
			if groups, all := sub.take(); all || slices.Contains(groups, id) {
				return
			}
		case <-deadline:
			t.Fatalf("no change reported for %s", id)
		}
	}
}

// TestWatcherSeesCommitsAndDeletes checks that another writer's commit and
// a group's deletion are both reported for the right group.
func TestWatcherSeesCommitsAndDeletes(t *testing.T) {
	dir := t.TempDir()
	writer := newTestStore(t, dir)
	meta, err := writer.createGroup("alice", "team", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.joinGroup(meta.groupID, "alice", "alice"); err != nil {
		t.Fatal(err)
	}
	w := newChangeWatcher(dir)
	defer w.close()
	if !w.native {
		t.Skip("no file-system events on this platform")
	}
	sub := w.subscribe()
	defer sub.close()
	if _, err := writer.sendMessage(meta.groupID, outgoing{contextID: "alice", name: "alice", text: "hi", priority: "normal"}); err != nil {
		t.Fatal(err)
	}
	awaitGroup(t, sub, meta.groupID)
	if err := writer.deleteGroup(meta.groupID, "alice"); err != nil {
		t.Fatal(err)
	}
	awaitGroup(t, sub, meta.groupID)
}

// TestWatcherIgnoresOtherFiles checks that files that are not a group's
// database or journal never wake anyone.
func TestWatcherIgnoresOtherFiles(t *testing.T) {
	for name, want := range map[string]bool{
		"grp_0123456789abcdef0123456789abcdef.sqlite3":         true,
		"grp_0123456789abcdef0123456789abcdef.sqlite3-wal":     true,
		"grp_0123456789abcdef0123456789abcdef.sqlite3-journal": true,
		"grp_0123456789abcdef0123456789abcdef.sqlite3-shm":     false,
		"grp_0123456789abcdef0123456789abcdef.sqlite3-wq":      false,
		"observability.sqlite3-wal":                            false,
		"grp_XYZ.sqlite3":                                      false,
	} {
		if _, got := groupOfFile(name); got != want {
			t.Errorf("groupOfFile(%q) = %v; want %v", name, got, want)
		}
	}
}

// TestWatcherSettlesAndRechecks checks that one burst of events is
// announced once and then re-announced by each re-check, so a commit that
// became visible after its event is still seen.
func TestWatcherSettlesAndRechecks(t *testing.T) {
	w := &changeWatcher{subs: map[*watchSubscription]struct{}{}, timers: map[string]*time.Timer{}}
	sub := w.subscribe()
	const id = "grp_0123456789abcdef0123456789abcdef"
	for range 50 {
		w.fileEvent(id + ".sqlite3-wal")
	}
	got := 0
	deadline := time.After(10 * time.Second)
	for got < 1+len(watchRecheck) {
		select {
		case <-sub.C:
			if groups, _ := sub.take(); slices.Equal(groups, []string{id}) {
				got++
			}
		case <-deadline:
			t.Fatalf("got %d announcements; want %d", got, 1+len(watchRecheck))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.timers) != 0 {
		t.Errorf("timers left after the last re-check: %d", len(w.timers))
	}
}

// TestWatcherOnMissingDirectory checks that a watcher that cannot watch
// still works, as a quiet one.
func TestWatcherOnMissingDirectory(t *testing.T) {
	w := newChangeWatcher(t.TempDir() + string(os.PathSeparator) + "missing")
	defer w.close()
	if w.native {
		t.Fatal("native events on a missing directory")
	}
	sub := w.subscribe()
	w.publish("")
	if _, all := sub.take(); !all {
		t.Error("publish(\"\") did not reach the subscription")
	}
}

// TestPollerFollowsFileEvents checks that a poller whose ticker is an hour
// still notifies a wakeup at once when file events report the group: the
// send comes through another store, as another process's would.
func TestPollerFollowsFileEvents(t *testing.T) {
	f := newHookFixture(t, "bob-ctx")
	w := newChangeWatcher(f.st.dir)
	defer w.close()
	if !w.native {
		t.Skip("no file-system events on this platform")
	}
	rec := &recorder{}
	reader := newTestStore(t, f.st.dir)
	m := newSubscriptions(reader, time.Hour, rec.notify)
	defer m.close()
	m.follow(w)
	uri := wakeupURI(f.groupID, "bob-ctx")
	m.authorize(uri)
	if err := m.subscribe(uri); err != nil {
		t.Fatal(err)
	}
	f.sendAs(t, "@bob now")
	waitUntil(t, "a wakeup notification", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.got) == 1 && strings.Contains(rec.got[0], `"relevance": "mentioned"`)
	})
}
