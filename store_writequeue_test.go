//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestWriteQueueLifecycle(t *testing.T) {
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

// TestWriteQueueStoppedHolder stops, with SIGSTOP, another process that
// holds a group's write queue, and waits for the queue 50 times: every wait
// gives up on time, and none leaves a goroutine or a descriptor behind. A
// send behind the stopped holder still succeeds, after writeQueueWait.
func TestWriteQueueStoppedHolder(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1) to hold the queue from another process")
	}
	st := newTestStore(t, t.TempDir())
	g := newTestGroup(t, st, "stopped", "alice")
	queue := st.groupPath(g) + writeQueueSuffix
	holder := exec.Command("flock", "--exclusive", queue, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		holder.Process.Signal(syscall.SIGCONT)
		holder.Process.Kill()
		holder.Wait()
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		fd, err := openQueueFile(queue, false)
		if err == nil && syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB) == syscall.EWOULDBLOCK {
			closeQueueFile(fd)
			break
		}
		if err == nil {
			closeQueueFile(fd) // not taken yet; closing drops this lock
		}
		if time.Now().After(deadline) {
			t.Fatal("flock(1) never took the queue")
		}
	}
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	const wait = 2 * time.Millisecond
	for range 50 {
		fd, err := openQueueFile(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		lockQueueFile(fd, wait)()
		if took := time.Since(start); took > wait+50*time.Millisecond {
			t.Errorf("a wait behind the stopped holder took %v; want about %v", took, wait)
		}
	}
	start := time.Now()
	if _, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: "past a stopped holder", priority: "normal"}); err != nil {
		t.Errorf("send behind the stopped holder: %v", err)
	}
	if took := time.Since(start); took < writeQueueWait {
		t.Errorf("send behind the stopped holder took %v; want at least writeQueueWait", took)
	}
	if g, f := runtime.NumGoroutine(), openFDs(t); g > goroutines || f > fds {
		t.Errorf("after 50 timed-out waits: got %d goroutines and %d descriptors; want at most %d and %d as before", g, f, goroutines, fds)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		entries, err = os.ReadDir("/dev/fd")
	}
	if err != nil {
		t.Skip("cannot count descriptors here")
	}
	return len(entries)
}
