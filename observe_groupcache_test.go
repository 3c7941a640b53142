package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ageGroupFiles sets the modification times of a group's database and WAL
// an hour back, so that their signature counts as settled.
func ageGroupFiles(t *testing.T, dir, id string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{groupFile(dir, id), groupFile(dir, id) + "-wal"} {
		if err := os.Chtimes(p, old, old); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

func TestGroupSignature(t *testing.T) {
	fx := newObserveFixture(t)
	id := fx.group("Signed", "", time.Now(), fixtureMember{"ctx0", "Zero"})
	path := groupFile(fx.dir, id)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Read as if at the moment of the write, however slow this machine is.
	fresh, ok := readGroupSignature(path, info.ModTime())
	if !ok {
		t.Fatal("no signature for an existing group")
	}
	again, _ := readGroupSignature(path, time.Now())
	if again.unchangedSince(fresh) {
		t.Error("a signature of files written just now proves nothing; got unchanged")
	}
	ageGroupFiles(t, fx.dir, id)
	settled, _ := readGroupSignature(path, time.Now())
	again, _ = readGroupSignature(path, time.Now())
	if !settled.settled || !again.unchangedSince(settled) {
		t.Errorf("untouched settled files: got settled %v, unchanged %v; want both", settled.settled, again.unchangedSince(settled))
	}
	fx.messages(id, fixtureMessage{Sender: "ctx0", SenderName: "Zero", Content: "news", At: time.Now()})
	if after, _ := readGroupSignature(path, time.Now()); after.unchangedSince(settled) {
		t.Error("a commit did not change the signature")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := readGroupSignature(path, time.Now()); ok {
		t.Error("a deleted group still has a signature")
	}
}

// TestOverviewSkipsIdleGroups checks that Overview reads a group whose
// files have not changed from its cache, without opening the database, and
// reads it again once it changes.
func TestOverviewSkipsIdleGroups(t *testing.T) {
	fx := newObserveFixture(t)
	ids := []string{
		fx.group("Quiet", "", time.Now().Add(-time.Hour), fixtureMember{"ctx0", "Zero"}),
		fx.group("Busy", "", time.Now().Add(-time.Hour), fixtureMember{"ctx0", "Zero"}),
	}
	for _, id := range ids {
		fx.messages(id, fixtureMessage{Sender: "ctx0", SenderName: "Zero", Content: "first", At: time.Now().Add(-time.Hour)})
		ageGroupFiles(t, fx.dir, id)
	}
	obs := newTestObserver(t, fx.dir, time.Hour)
	if _, body, _ := get(t, obs, "/fragments/overview"); !strings.Contains(body, "Messages</strong><span>2") {
		t.Fatalf("first render lacks the two messages")
	}
	obs.dbs.closeAll()
	if _, body, _ := get(t, obs, "/fragments/overview"); !strings.Contains(body, "Messages</strong><span>2") {
		t.Fatalf("cached render lacks the two messages")
	}
	for path := range obs.dbs.entries {
		if _, isGroup := groupIDOfFile(filepath.Base(path)); isGroup {
			t.Errorf("a render of unchanged groups opened %s", filepath.Base(path))
		}
	}
	fx.messages(ids[1], fixtureMessage{Sender: "ctx0", SenderName: "Zero", Content: "second", At: time.Now()})
	_, body, _ := get(t, obs, "/fragments/overview")
	if !strings.Contains(body, "Messages</strong><span>3") || !strings.Contains(body, "second") {
		t.Errorf("render after a write does not show it")
	}
	if _, open := obs.dbs.entries[groupFile(fx.dir, ids[0])]; open {
		t.Error("the unchanged group was opened again")
	}
}

func TestReadOnlyPoolBound(t *testing.T) {
	fx := newObserveFixture(t)
	pool := newReadOnlyPool()
	defer pool.closeAll()
	var first string
	for i := range maxReadOnlyHandles + 5 {
		id := fx.group("G", "", time.Now(), fixtureMember{"ctx0", "Zero"})
		if i == 0 {
			first = id
		}
		if _, err := pool.groupState(fx.dir, id); err != nil {
			t.Fatal(err)
		}
		if n := len(pool.entries); n > maxReadOnlyHandles {
			t.Fatalf("pool holds %d handles; want at most %d", n, maxReadOnlyHandles)
		}
	}
	if _, open := pool.entries[groupFile(fx.dir, first)]; open {
		t.Error("the least recently used handle was kept")
	}
	// A handle retired while a request holds it keeps answering.
	held, err := pool.group(fx.dir, first)
	if err != nil {
		t.Fatal(err)
	}
	// Every connection of a handle has the bounded page cache.
	if got := queryRows(t, held, "PRAGMA cache_size"); len(got) != 1 || got[0] != "-512" {
		t.Errorf("cache_size of a pool handle: got %v; want [-512]", got)
	}
	for range maxReadOnlyHandles {
		id := fx.group("H", "", time.Now(), fixtureMember{"ctx0", "Zero"})
		if _, err := pool.group(fx.dir, id); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := held.QueryRow("SELECT COUNT(*) FROM group_members").Scan(&n); err != nil || n != 1 {
		t.Errorf("retired handle: got %d members (%v); want 1", n, err)
	}
	if _, err := os.Stat(filepath.Join(fx.dir, first+".sqlite3")); err != nil {
		t.Fatal(err)
	}
}

// TestGroupCacheConcurrentReads reads one settled group through the cache
// from several goroutines at once, as Overview renders and starting event
// streams do, when its cache entry already holds another kind of read: every
// goroutine then finds the entry, and the first to miss stores into it.
// go test -race reports a field of the entry read without the lock its
// writer holds.
func TestGroupCacheConcurrentReads(t *testing.T) {
	fx := newObserveFixture(t)
	id := fx.group("Shared", "", time.Now().Add(-time.Hour), fixtureMember{"ctx0", "Zero"})
	fx.messages(id, fixtureMessage{Sender: "ctx0", SenderName: "Zero", Content: "first", At: time.Now().Add(-time.Hour)})
	ageGroupFiles(t, fx.dir, id)
	obs := newTestObserver(t, fx.dir, time.Hour)
	summary := func() error {
		if g, err := obs.cachedGroupSummary(t.Context(), id); err != nil || g.ID != id {
			return fmt.Errorf("cachedGroupSummary: got %q, %v; want %q", g.ID, err, id)
		}
		return nil
	}
	state := func() error {
		if s, err := obs.cachedSnapshotState(id); err != nil || s.latest == nil || *s.latest != 1 {
			return fmt.Errorf("cachedSnapshotState: got latest %v, %v; want 1", s.latest, err)
		}
		return nil
	}
	for _, tc := range []struct {
		name          string
		cached, raced func() error
	}{
		{"summary after state", state, summary},
		{"state after summary", summary, state},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 {
				obs.reads.forget(id)
				if err := tc.cached(); err != nil {
					t.Fatal(err)
				}
				start := make(chan struct{})
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						<-start
						if err := tc.raced(); err != nil {
							t.Error(err)
						}
					})
				}
				close(start)
				wg.Wait()
			}
		})
	}
}
