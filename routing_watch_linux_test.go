package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// inotifyFixture is an inotifyWatch of a directory holding two groups'
// database and -wal files, written by hand: the watch only sees names and
// writes, so no SQLite is needed to drive it.
type inotifyFixture struct {
	dir    string
	iw     *inotifyWatch
	events chan string
}

const (
	followedGroup = "grp_0000000000000000000000000000000a"
	otherGroup    = "grp_0000000000000000000000000000000b"
)

func newInotifyFixture(t *testing.T) *inotifyFixture {
	t.Helper()
	dir := t.TempDir()
	for _, g := range []string{followedGroup, otherGroup} {
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
	f.iw = w.(*inotifyWatch)
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
		t.Fatalf("event for %s, which is not followed", name)
	}
}

// watchMasks returns the masks of the watches of the fixture's inotify
// descriptor, by inode, from /proc/self/fdinfo.
func (f *inotifyFixture) watchMasks(t *testing.T) map[uint64]uint32 {
	t.Helper()
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", f.iw.fd))
	if err != nil {
		t.Skipf("no fdinfo here: %v", err)
	}
	masks := map[uint64]uint32{}
	for _, line := range strings.Split(string(info), "\n") {
		var wd int
		var ino uint64
		var sdev, mask uint32
		if n, _ := fmt.Sscanf(line, "inotify wd:%d ino:%x sdev:%x mask:%x", &wd, &ino, &sdev, &mask); n == 4 {
			masks[ino] = mask
		}
	}
	return masks
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

// TestInotifyFollowsNamedGroups shows what a narrowed watch costs and
// reports: the directory watch stops taking writes, the followed group's
// files get one-shot watches of their own, its writes are reported, a
// write while its watch is disarmed is reported after the pause, another
// group's writes raise no event at all, and widening to every group
// brings them back.
func TestInotifyFollowsNamedGroups(t *testing.T) {
	f := newInotifyFixture(t)
	wal := filepath.Base(groupFile(f.dir, followedGroup)) + "-wal"
	f.write(t, otherGroup, "-wal")
	f.await(t, filepath.Base(groupFile(f.dir, otherGroup))+"-wal")

	f.iw.followGroups([]string{followedGroup})
	masks := f.watchMasks(t)
	if m := masks[inode(t, f.dir)]; m&syscall.IN_MODIFY != 0 {
		t.Errorf("directory watch mask %#x still takes IN_MODIFY", m)
	}
	for _, suffix := range []string{"", "-wal"} {
		if m := masks[inode(t, groupFile(f.dir, followedGroup)+suffix)]; m&inotifyFileMask != inotifyFileMask {
			t.Errorf("watch of %s%s: mask %#x; want %#x", followedGroup, suffix, m, inotifyFileMask)
		}
	}
	if _, ok := masks[inode(t, groupFile(f.dir, otherGroup)+"-wal")]; ok {
		t.Error("the other group's -wal file is watched")
	}

	f.write(t, followedGroup, "-wal")
	f.await(t, wal)
	// Written at once, while the reader pauses and the fired watch is not
	// re-armed: reported when it is.
	f.write(t, followedGroup, "-wal")
	f.await(t, wal)
	f.write(t, otherGroup, "-wal")
	f.quiet(t, filepath.Base(groupFile(f.dir, otherGroup))+"-wal")

	// SQLite deletes the -wal file when the last connection closes and
	// creates it again at the next open; the new file is followed too.
	if err := os.Remove(groupFile(f.dir, followedGroup) + "-wal"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(groupFile(f.dir, followedGroup)+"-wal", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the recreated -wal file watched", func() bool {
		_, ok := f.watchMasks(t)[inode(t, groupFile(f.dir, followedGroup)+"-wal")]
		return ok
	})
	f.write(t, followedGroup, "-wal")
	f.await(t, wal)

	f.iw.followGroups(nil)
	if m := f.watchMasks(t)[inode(t, f.dir)]; m&syscall.IN_MODIFY == 0 {
		t.Errorf("directory watch mask %#x after follow(nil); want IN_MODIFY", m)
	}
	f.write(t, otherGroup, "-wal")
	f.await(t, filepath.Base(groupFile(f.dir, otherGroup))+"-wal")
}

// TestInotifyReportsGroupsAppearing checks that a narrowed watch still
// reports a group database renamed into place or deleted, whoever it
// belongs to: list_groups and resource lists change with them.
func TestInotifyReportsGroupsAppearing(t *testing.T) {
	f := newInotifyFixture(t)
	f.iw.followGroups([]string{followedGroup})
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
}

// TestWatcherFollowsItsSubscriptions checks that the change watcher points
// its inotify watch at the union of what its subscriptions want: narrowed
// to named groups, widened to every group while one subscription wants
// them all, and narrowed again when that one ends or a group is dropped.
func TestWatcherFollowsItsSubscriptions(t *testing.T) {
	dir := t.TempDir()
	w := nativeWatcher(t, dir)
	followed := func() (all bool, groups []string) {
		w.run.Lock()
		defer w.run.Unlock()
		iw := w.watch.(*inotifyWatch)
		iw.mu.Lock()
		defer iw.mu.Unlock()
		for db := range iw.groups {
			groups = append(groups, strings.TrimSuffix(db, ".sqlite3"))
		}
		return iw.groups == nil, groups
	}
	check := func(step string, wantAll bool, want ...string) {
		t.Helper()
		all, groups := followed()
		if all != wantAll || !wantAll && strings.Join(groups, ",") != strings.Join(want, ",") {
			t.Errorf("%s: following all %v, groups %v; want all %v, groups %v", step, all, groups, wantAll, want)
		}
	}
	a := w.subscribeTo([]string{followedGroup})
	defer a.close()
	check("one subscription to one group", false, followedGroup)
	b := w.subscribeTo(nil)
	check("and one to every group", true)
	b.close()
	check("after the one to every group ended", false, followedGroup)
	a.watchGroups([]string{otherGroup})
	check("after the subscription moved to another group", false, otherGroup)
}

// TestInotifyFallsBackToTheDirectory checks that a file watch that cannot
// be added (the kernel's watch limit, ENOSPC, in production) sends the watch
// back to taking every write of the directory, so that no group's writes
// are left to the safety poll: here a followed group's -wal reappears as a
// symbolic link to itself, which inotify_add_watch refuses with ELOOP, and
// the next writes, to either group, are still reported.
func TestInotifyFallsBackToTheDirectory(t *testing.T) {
	f := newInotifyFixture(t)
	f.iw.followGroups([]string{followedGroup})
	if m := f.watchMasks(t)[inode(t, f.dir)]; m&syscall.IN_MODIFY != 0 {
		t.Fatalf("directory watch mask %#x while following one group", m)
	}
	wal := groupFile(f.dir, followedGroup) + "-wal"
	if err := os.Remove(wal); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(wal), wal); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the directory watch taking writes again", func() bool {
		return f.watchMasks(t)[inode(t, f.dir)]&syscall.IN_MODIFY != 0
	})
	f.write(t, followedGroup, "")
	f.await(t, filepath.Base(groupFile(f.dir, followedGroup)))
	f.write(t, otherGroup, "-wal")
	f.await(t, filepath.Base(groupFile(f.dir, otherGroup))+"-wal")
}

// TestInotifyFollowsManyGroupsByTheDirectory checks that a watch asked to
// follow more than inotifyMaxFollowed groups takes every write of the
// directory instead of spending two of the user's inotify watches on each.
func TestInotifyFollowsManyGroupsByTheDirectory(t *testing.T) {
	f := newInotifyFixture(t)
	groups := []string{followedGroup}
	for i := range inotifyMaxFollowed {
		groups = append(groups, fmt.Sprintf("grp_%032x", 0x100+i))
	}
	f.iw.followGroups(groups[:inotifyMaxFollowed])
	if m := f.watchMasks(t)[inode(t, f.dir)]; m&syscall.IN_MODIFY != 0 {
		t.Fatalf("directory watch mask %#x while following %d groups; want no IN_MODIFY", m, inotifyMaxFollowed)
	}
	f.iw.followGroups(groups)
	masks := f.watchMasks(t)
	if m := masks[inode(t, f.dir)]; m&syscall.IN_MODIFY == 0 {
		t.Errorf("directory watch mask %#x while following %d groups; want IN_MODIFY", m, len(groups))
	}
	if len(masks) != 1 {
		t.Errorf("%d watches while following %d groups; want only the directory's", len(masks), len(groups))
	}
	f.write(t, otherGroup, "-wal")
	f.await(t, filepath.Base(groupFile(f.dir, otherGroup))+"-wal")
}
