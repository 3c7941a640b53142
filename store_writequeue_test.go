package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestWriteQueueLifecycle(t *testing.T) {
	if !writeQueueAvailable {
		t.Skip("no write queue on " + runtime.GOOS)
	}
	dir := t.TempDir()
	st := newTestStore(t, dir)
	other := newTestStore(t, dir)
	send := func(s *store, g string) error {
		_, err := s.sendMessage(g, outgoing{contextID: "alice", name: "Alice", text: "hi", priority: "normal"})
		return err
	}
	newGroup := func() string {
		meta, err := st.createGroup("alice", "", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.joinGroup(meta.groupID, "alice", "Alice"); err != nil {
			t.Fatal(err)
		}
		return meta.groupID
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	t.Run("made by a write, removed with the group", func(t *testing.T) {
		g := newGroup()
		if err := send(st, g); err != nil {
			t.Fatal(err)
		}
		queue := st.groupPath(g) + writeQueueSuffix
		if !exists(queue) {
			t.Fatalf("no side file %s after a write", filepath.Base(queue))
		}
		if err := other.deleteGroup(g, "alice"); err != nil {
			t.Fatal(err)
		}
		if err := send(st, g); err == nil {
			t.Error("send to a deleted group succeeded")
		}
		if matches, _ := filepath.Glob(filepath.Join(dir, g+"*")); len(matches) != 0 {
			t.Errorf("files of the deleted group remain: %v", matches)
		}
	})

	t.Run("left by a writer that does not know it", func(t *testing.T) {
		for _, cleanup := range []struct {
			name string
			run  func(g string)
		}{
			{"list_groups", func(string) { st.listGroups() }},
			{"a later call on the group", func(g string) { send(other, g) }},
		} {
			g := newGroup()
			if err := send(st, g); err != nil {
				t.Fatal(err)
			}
			st.forget(g)
			// The original's delete_group removes these three only.
			for _, suffix := range []string{"", "-wal", "-shm"} {
				os.Remove(st.groupPath(g) + suffix)
			}
			cleanup.run(g)
			if matches, _ := filepath.Glob(filepath.Join(dir, g+"*")); len(matches) != 0 {
				t.Errorf("%s: files of the deleted group remain: %v", cleanup.name, matches)
			}
		}
		groups, err := st.listGroups()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range groups {
			if !exists(st.groupPath(m.groupID)) {
				t.Errorf("list_groups lists %s, which has no database", m.groupID)
			}
		}
	})

	t.Run("writers wait their turn, but not forever", func(t *testing.T) {
		g := newGroup()
		if err := send(st, g); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(st.groupPath(g))
		if err != nil {
			t.Fatal(err)
		}
		// Another process's turn, held for 150 ms: the send waits for it.
		unlock := newWriteQueue(st.groupPath(g), info).lock()
		time.AfterFunc(150*time.Millisecond, unlock)
		start := time.Now()
		if err := send(other, g); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < 100*time.Millisecond {
			t.Errorf("send finished %v after another writer took the queue for 150ms; want it to wait", waited)
		}
		// A turn that is never given up delays a send by writeQueueWait,
		// after which SQLite's own lock is all that counts.
		unlock = newWriteQueue(st.groupPath(g), info).lock()
		defer unlock()
		start = time.Now()
		if err := send(other, g); err != nil {
			t.Fatalf("send behind a stuck queue: %v", err)
		}
		if waited := time.Since(start); waited < writeQueueWait || waited > writeQueueWait+2*time.Second {
			t.Errorf("send behind a stuck queue took %v; want about %v", waited, writeQueueWait)
		}
	})
}
