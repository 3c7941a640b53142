//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
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
		unlock := lockWriteQueue(st.groupPath(g), info)
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
		unlock = lockWriteQueue(st.groupPath(g), info)
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
	goroutines, fds, threads := runtime.NumGoroutine(), openFDs(t), osThreads(t)
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
	// A wait blocked in flock would pin an OS thread each; the runtime may
	// start a few of its own meanwhile, hence the small allowance.
	if n := osThreads(t); n > threads+4 {
		t.Errorf("after 50 timed-out waits: got %d OS threads; want at most %d (%d before)", n, threads+4, threads)
	}
}

// osThreads counts this process's OS threads.
func osThreads(t *testing.T) int {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("cannot count threads here")
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(rest))
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return n
		}
	}
	t.Skip("no Threads line in /proc/self/status")
	return 0
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

// stoppedWriter starts sqlite3(1) holding group g's write queue and an
// IMMEDIATE transaction on its database, stops it with SIGSTOP, and returns
// the function that resumes it and ends its transaction.
func stoppedWriter(t *testing.T, st *store, g string) (resume func()) {
	t.Helper()
	for _, tool := range []string{"flock", "sqlite3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s(1) to hold the group from another process", tool)
		}
	}
	path := st.groupPath(g)
	holder := exec.Command("flock", "--exclusive", path+writeQueueSuffix, "sqlite3", path)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "BEGIN IMMEDIATE;\nSELECT 'held';\n")
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("sqlite3 holding the group: got %q, %v; want held", line, err)
	}
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			holder.Process.Signal(syscall.SIGCONT)
			stdin.Close() // sqlite3 rolls back and exits, and flock with it
			holder.Wait()
		})
	}
	t.Cleanup(resume)
	return resume
}

// TestSendsBehindStoppedWriter fires 20 sends, each with its own context,
// at a group whose write lock another process holds while stopped, and
// cancels half of them: a cancelled send is never stored, and every send is
// answered within its own busy window, however many wait beside it.
func TestSendsBehindStoppedWriter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resumeAt time.Duration // when the writer resumes; 0 after every answer
	}{
		{"resumed within the window", 2 * time.Second},
		{"stopped past the window", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newTestStore(t, t.TempDir())
			g := newTestGroup(t, st, "stopped", "alice", "bob")
			resume := stoppedWriter(t, st, g)
			if tc.resumeAt > 0 {
				time.AfterFunc(tc.resumeAt, resume)
			}
			const sends = 20
			errs, took := make([]error, sends), make([]time.Duration, sends)
			var wg sync.WaitGroup
			for i := range sends {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if i%2 == 1 {
					time.AfterFunc(time.Second, cancel)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(i) * 25 * time.Millisecond)
					start := time.Now()
					_, _, errs[i] = st.sendMessages(ctx, g, []outgoing{{contextID: "alice", name: "alice", text: fmt.Sprintf("send %d", i), priority: "normal"}})
					took[i] = time.Since(start)
				}()
			}
			wg.Wait()
			resume()
			db := openTestDB(t, st.groupPath(g), "ro")
			for i := range sends {
				stored := queryInt(t, db, "SELECT COUNT(*) FROM messages WHERE content = ?", fmt.Sprintf("send %d", i))
				switch {
				case took[i] > 6*time.Second:
					t.Errorf("send %d answered %v after it started; want within its busy window of %v", i, took[i], busyRetryWindow)
				case i%2 == 1 && (stored != 0 || !errors.Is(errs[i], context.Canceled)):
					t.Errorf("cancelled send %d: got %d stored, error %v; want none stored, context.Canceled", i, stored, errs[i])
				case i%2 == 0 && tc.resumeAt > 0 && (stored != 1 || errs[i] != nil):
					t.Errorf("send %d: got %d stored, error %v; want it stored once the writer resumed", i, stored, errs[i])
				case i%2 == 0 && tc.resumeAt == 0 && (stored != 0 || !isBusy(errs[i]) || took[i] < busyRetryWindow-100*time.Millisecond):
					t.Errorf("send %d: got %d stored, error %v after %v; want busy after its window", i, stored, errs[i], took[i])
				}
			}
			t.Logf("answer times: %v", took)
		})
	}
}

// TestWriteQueueHostileSideFile: whatever sits at a group's "-wq" name, a
// write neither hangs nor touches a file outside the groups directory. The
// side file was opened blocking and following symlinks, so a FIFO there
// hung every write to the group for good, and a dangling symlink made each
// write create the file it pointed to.
func TestWriteQueueHostileSideFile(t *testing.T) {
	for _, tc := range []struct {
		kind string
		make func(path, outside string) error
	}{
		{"fifo", func(path, _ string) error { return syscall.Mkfifo(path, 0o644) }},
		{"dangling symlink", func(path, outside string) error { return os.Symlink(outside, path) }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			dir := t.TempDir()
			outside := filepath.Join(t.TempDir(), "created")
			st := newTestStore(t, dir)
			id := newTestGroup(t, st, "team", "alice")
			path := groupFile(dir, id) + writeQueueSuffix
			if err := errors.Join(os.Remove(path), tc.make(path, outside)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- st.joinGroup(id, "bob", "bob") }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("join_group: got %v; want nil", err)
				}
			case <-time.After(20 * time.Second):
				if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
					f.Close() // lets a hung open of the FIFO return, so the store can close
				}
				t.Fatalf("join_group with a %s for the write queue: still running after 20 s", tc.kind)
			}
			if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("file outside the groups directory: got %v; want it never created", err)
			}
		})
	}
}
