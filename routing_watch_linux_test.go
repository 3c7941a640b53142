package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// inotifyFixture is an inotifyWatch of a directory holding two groups'
// database and -wal files, written by hand: the watch only sees names and
// writes, so no SQLite is needed to drive it.
type inotifyFixture struct {
	dir    string
	events chan string
}

const (
	firstGroup = "grp_0000000000000000000000000000000a"
	otherGroup = "grp_0000000000000000000000000000000b"
)

func newInotifyFixture(t *testing.T) *inotifyFixture {
	t.Helper()
	dir := t.TempDir()
	for _, g := range []string{firstGroup, otherGroup} {
		for _, suffix := range []string{"", "-wal"} {
			if err := os.WriteFile(groupFile(dir, g)+suffix, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := &inotifyFixture{dir: dir, events: make(chan string, 1024)}
	w, err := watchDirectory(dir, func(name string) { f.events <- name })
	if err != nil {
		t.Skipf("no inotify here: %v", err)
	}
	t.Cleanup(w.stop)
	return f
}

// write appends to one of a group's files, as a commit appends to its -wal.
func (f *inotifyFixture) write(t *testing.T, group, suffix string) {
	t.Helper()
	file, err := os.OpenFile(groupFile(f.dir, group)+suffix, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := file.Write([]byte("frame")); err != nil {
		t.Fatal(err)
	}
}

// seen reports whether an event naming name arrives within d, skipping
// others.
func (f *inotifyFixture) seen(name string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case got := <-f.events:
			if got == name {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// await waits (generously) for an event naming name.
func (f *inotifyFixture) await(t *testing.T, name string) {
	t.Helper()
	if !f.seen(name, 10*time.Second) {
		t.Fatalf("no event for %s", name)
	}
}

// quiet checks that no event names name for a while: long enough for the
// reader to have woken many times over.
func (f *inotifyFixture) quiet(t *testing.T, name string) {
	t.Helper()
	if f.seen(name, 200*time.Millisecond) {
		t.Fatalf("event for %s, which must not be reported", name)
	}
}

// TestInotifyReportsWritesAndNames checks what the directory watch
// reports: writes to any group's files, whoever follows them (changed
// filters), a group database renamed into place or deleted, since
// list_groups and resource lists change with them, and a -wal file
// appearing only once it is written, since connections create it.
func TestInotifyReportsWritesAndNames(t *testing.T) {
	f := newInotifyFixture(t)
	wal := filepath.Base(groupFile(f.dir, otherGroup)) + "-wal"
	f.write(t, otherGroup, "-wal")
	f.await(t, wal)
	f.write(t, firstGroup, "")
	f.await(t, filepath.Base(groupFile(f.dir, firstGroup)))

	const created = "grp_0000000000000000000000000000000c"
	tmp := filepath.Join(f.dir, ".building")
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, groupFile(f.dir, created)); err != nil {
		t.Fatal(err)
	}
	f.await(t, filepath.Base(groupFile(f.dir, created)))
	if err := os.Remove(groupFile(f.dir, otherGroup)); err != nil {
		t.Fatal(err)
	}
	f.await(t, filepath.Base(groupFile(f.dir, otherGroup)))

	createdWal := groupFile(f.dir, created) + "-wal"
	if err := os.WriteFile(createdWal, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.quiet(t, filepath.Base(createdWal))
	f.write(t, created, "-wal")
	f.await(t, filepath.Base(createdWal))
}

// TestInotifyStopAfterDirectoryGone stops a watch whose directory went
// away, so that its reader ended first, after another watch started: the
// second watch must keep reporting, which it did not while the ended
// reader closed its instance and stop removed watch 1 from whichever
// instance reused the number.
func TestInotifyStopAfterDirectoryGone(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := watchDirectory(gone, func(string) {})
	if err != nil {
		t.Skipf("no inotify here: %v", err)
	}
	os.Remove(gone)
	time.Sleep(100 * time.Millisecond) // lets the first reader see IN_IGNORED
	f := newInotifyFixture(t)
	first.stop()
	f.write(t, firstGroup, "-wal")
	if !f.seen(filepath.Base(groupFile(f.dir, firstGroup))+"-wal", 5*time.Second) {
		t.Error("after the ended watch was stopped, got no event from the other; want one")
	}
}

// TestInotifyStopAfterOverflow stops a watch whose reader is held up while
// the queue overflows, so that the kernel drops the IN_IGNORED that
// removing the watch raises: stop must still return.
func TestInotifyStopAfterOverflow(t *testing.T) {
	dir := t.TempDir()
	fa, _ := os.Create(groupFile(dir, firstGroup) + "-wal")
	fb, _ := os.Create(groupFile(dir, otherGroup) + "-wal")
	defer fa.Close()
	defer fb.Close()
	stall := make(chan struct{})
	first := true
	w, err := watchDirectory(dir, func(string) {
		if first {
			first = false
			<-stall // a reader held up (CPU starvation, a stopped process)
		}
	})
	if err != nil {
		t.Skipf("no inotify: %v", err)
	}
	fa.Write([]byte("x"))
	time.Sleep(50 * time.Millisecond) // the reader is now held in emit
	for range 20000 {                 // two files, so that events do not merge
		fa.Write([]byte("x"))
		fb.Write([]byte("x"))
	}
	stopped := make(chan struct{})
	go func() { w.stop(); close(stopped) }()
	time.Sleep(50 * time.Millisecond)
	close(stall)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return within 10 s of an overflowed queue")
	}
}
