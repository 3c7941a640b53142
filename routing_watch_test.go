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
// announced and then re-announced by each re-check, so a commit that became
// visible after its event is still seen, and that the watcher then forgets
// the group. The re-checks are a quarter second apart, so that a loaded
// machine pausing this goroutine does not merge two announcements into one
// wake-up; a pause in the burst longer than the quiet period starts the
// settling over, which only adds announcements.
func TestWatcherSettlesAndRechecks(t *testing.T) {
	w := &changeWatcher{quiet: watchQuietPeriod, recheck: []time.Duration{250 * time.Millisecond, 500 * time.Millisecond},
		subs: map[*watchSubscription]struct{}{}, settling: map[string]*watchSettle{}}
	sub := w.subscribe()
	const id = "grp_0123456789abcdef0123456789abcdef"
	for range 50 {
		w.fileEvent(id + ".sqlite3-wal")
	}
	want := 1 + len(w.recheck)
	got := 0
	deadline := time.After(10 * time.Second)
	for got < want || w.isSettling(id) {
		select {
		case <-sub.C:
			if groups, _ := sub.take(); slices.Equal(groups, []string{id}) {
				got++
			}
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("got %d announcements, still settling %v; want at least %d, then none", got, w.isSettling(id), want)
		}
	}
}

// isSettling reports whether the watcher still has announcements of group
// id to make.
func (w *changeWatcher) isSettling(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.settling[id] != nil
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
