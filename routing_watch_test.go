package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
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
	w := nativeWatcher(t, dir)
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
	w := &changeWatcher{subs: map[*watchSubscription]struct{}{}, settles: map[string]*watchSettle{}}
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
	if len(w.settles) != 0 {
		t.Errorf("settle schedules left after the last re-check: %d", len(w.settles))
	}
}

// TestWatcherCloseJoinsSettles checks that close stops the pending
// announcements and joins the settle timers: nothing is announced after it.
func TestWatcherCloseJoinsSettles(t *testing.T) {
	w := &changeWatcher{subs: map[*watchSubscription]struct{}{}, settles: map[string]*watchSettle{}}
	sub := w.subscribe()
	for i := range 20 {
		w.fileEvent(fmt.Sprintf("grp_%032x.sqlite3-wal", i))
	}
	w.close()
	sub.take()
	select {
	case <-sub.C:
	default:
	}
	w.fileEvent("grp_0123456789abcdef0123456789abcdef.sqlite3-wal")
	select {
	case <-sub.C:
		t.Error("a group was announced after close; want none")
	case <-time.After(2 * watchRecheck[len(watchRecheck)-1]):
	}
}

// TestWatcherOnMissingDirectory checks that a watcher that cannot watch
// still works, as a quiet one.
func TestWatcherOnMissingDirectory(t *testing.T) {
	w := newChangeWatcher(t.TempDir() + string(os.PathSeparator) + "missing")
	defer w.close()
	if w.native.Load() {
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
	w := nativeWatcher(t, f.st.dir)
	rec := &recorder{}
	reader := newTestStore(t, f.st.dir)
	m := newSubscriptions(reader, time.Hour, rec.notify)
	defer m.close()
	m.followWatch(w)
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

// TestWatcherRunsOnlyWhileSubscribed checks that the file-system watch
// starts with the first subscription and stops with the last, so that a
// process waiting on nothing is not woken by other processes' writes.
func TestWatcherRunsOnlyWhileSubscribed(t *testing.T) {
	w := nativeWatcher(t, t.TempDir())
	if w.watching() {
		t.Fatal("watching before any subscription; want no watch")
	}
	a := w.subscribe()
	b := w.subscribeTo([]string{"grp_0123456789abcdef0123456789abcdef"})
	if !w.watching() {
		t.Fatal("not watching with two subscriptions; want a watch")
	}
	a.close()
	if !w.watching() {
		t.Fatal("not watching with one subscription left; want a watch")
	}
	b.close()
	if w.watching() {
		t.Fatal("watching after the last subscription closed; want no watch")
	}
	c := w.subscribe()
	if !w.watching() {
		t.Fatal("not watching after subscribing again; want a watch")
	}
	w.close()
	c.close()
	if w.watching() || w.subscribe() == nil || w.watching() {
		t.Fatal("watching after close; want no watch")
	}
}

// TestWatcherDropsUnwantedGroups checks that an event of a group no
// subscription asked for schedules nothing and reaches no one, while one
// of a wanted group is announced to the subscriptions that want it.
func TestWatcherDropsUnwantedGroups(t *testing.T) {
	const wanted, other = "grp_0123456789abcdef0123456789abcdef", "grp_fedcba9876543210fedcba9876543210"
	w := &changeWatcher{subs: map[*watchSubscription]struct{}{}, settles: map[string]*watchSettle{}}
	sub := w.subscribeTo([]string{wanted})
	w.fileEvent(other + ".sqlite3-wal")
	w.mu.Lock()
	scheduled := len(w.settles)
	w.mu.Unlock()
	if scheduled != 0 {
		t.Fatalf("got %d settle schedules for an unwanted group; want 0", scheduled)
	}
	w.publish(other)
	if groups, all := sub.take(); len(groups) != 0 || all {
		t.Fatalf("take after an unwanted group's change = %v, %v; want nothing", groups, all)
	}
	w.fileEvent(wanted + ".sqlite3-wal")
	awaitGroup(t, sub, wanted)
	sub.watchGroups([]string{other})
	w.publish(wanted)
	if groups, _ := sub.take(); len(groups) != 0 {
		t.Fatalf("take after re-grouping away from %s = %v; want nothing", wanted, groups)
	}
}

// TestWatcherAnnouncesUnderSustainedWrites checks that a group written
// without pause is still announced (the quiet period runs from the first
// event, so a stream of events closer than it cannot starve consumers), but
// no more often than watchQuietPeriod allows, give or take a re-check on a
// slow machine.
func TestWatcherAnnouncesUnderSustainedWrites(t *testing.T) {
	const id = "grp_0123456789abcdef0123456789abcdef"
	w := &changeWatcher{subs: map[*watchSubscription]struct{}{}, settles: map[string]*watchSettle{}}
	sub := w.subscribe()
	const stream = 500 * time.Millisecond
	stop := make(chan struct{})
	go func() {
		end := time.After(stream)
		for {
			select {
			case <-end:
				close(stop)
				return
			default:
				w.fileEvent(id + ".sqlite3-wal")
				time.Sleep(watchQuietPeriod / 10)
			}
		}
	}()
	announced := 0
	for done := false; !done; {
		select {
		case <-sub.C:
			if groups, _ := sub.take(); slices.Contains(groups, id) {
				announced++
			}
		case <-stop:
			done = true
		}
	}
	if most := int(stream/watchQuietPeriod) + 10; announced < 1 || announced > most {
		t.Errorf("got %d announcements in %v of writes; want 1 to %d", announced, stream, most)
	}
}

// inotifyDescriptors counts the inotify instances process pid holds, or
// skips the test where /proc does not say.
func inotifyDescriptors(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && link == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestE2EServerWatchesOnlyWhileSubscribed checks, on the built binary, that
// a server process holds no inotify instance while it is subscribed to
// nothing (a busy group's senders must not be woken by each other's
// writes), opens one when join_group subscribes it to its wakeups, and
// drops it when leave_group ends the last subscription.
func TestE2EServerWatchesOnlyWhileSubscribed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inotify is Linux's")
	}
	dir := t.TempDir()
	p := startSession(t, "p", dir, "CROSSTALK_FILE_EVENTS=on")
	pid := p.cmd.Process.Pid
	gid := p.createGroup("ctx")
	if n := inotifyDescriptors(t, pid); n != 0 {
		t.Fatalf("inotify instances before any subscription: %d; want 0", n)
	}
	p.join(gid, "ctx", "carol")
	waitUntil(t, "an inotify instance after join_group", func() bool { return inotifyDescriptors(t, pid) == 1 })
	p.ok("leave_group", map[string]any{"group_id": gid, "context_id": "ctx", "name": "carol"}, nil)
	waitUntil(t, "the inotify instance closed after leave_group", func() bool { return inotifyDescriptors(t, pid) == 0 })
}

// subscribe returns a new subscription to changes of every group, starting
// the watch if it is the first; close it when done.
func (w *changeWatcher) subscribe() *watchSubscription {
	return w.subscribeTo(nil)
}

// watching reports whether the file-system watch is running.
func (w *changeWatcher) watching() bool {
	w.run.Lock()
	defer w.run.Unlock()
	return w.watch != nil
}

// TestWatchPacer shows the event reader's pause doubling while events are
// already queued at each read, up to watchCoalesceMax, and starting over
// after a read that had to wait.
func TestWatchPacer(t *testing.T) {
	busy, quiet := time.Duration(0), time.Second
	var p watchPacer
	for _, c := range []struct {
		waited time.Duration
		want   time.Duration
	}{
		{quiet, watchCoalesce},
		{busy, 2 * watchCoalesce},
		{busy, 4 * watchCoalesce},
		{busy, 8 * watchCoalesce},
		{busy, watchCoalesceMax},
		{busy, watchCoalesceMax},
		{watchCoalesceMax / 2, watchCoalesceMax},
		{quiet, watchCoalesce},
	} {
		p.sleep(c.waited)
		if p.pause != c.want {
			t.Errorf("after a read of %v: pause %v; want %v", c.waited, p.pause, c.want)
		}
	}
}

// nativeWatcher returns a change watcher of dir, closed when the test ends,
// and skips the test where file-system events are not available.
func nativeWatcher(t *testing.T, dir string) *changeWatcher {
	t.Helper()
	w := newChangeWatcher(dir)
	t.Cleanup(w.close)
	if !w.native.Load() {
		t.Skip("no file-system events on this platform")
	}
	return w
}

// TestWatchStartFailureFallsBackToPolling has the watch fail to start after
// the probe succeeded, as it does once inotify's instance or watch limit is
// reached: its directory is gone. The log says "polling only", so the
// consumers must poll at their interval again, not at watchSafetyPoll, and
// see a send within well under watchSafetyPoll.
func TestWatchStartFailureFallsBackToPolling(t *testing.T) {
	for _, consumer := range []string{"wait_for_messages", "subscription poller", "wait"} {
		t.Run(consumer, func(t *testing.T) {
			gone := t.TempDir() + string(os.PathSeparator) + "gone"
			if err := os.Mkdir(gone, 0o755); err != nil {
				t.Fatal(err)
			}
			w := nativeWatcher(t, gone)
			if err := os.Remove(gone); err != nil {
				t.Fatal(err)
			}
			var answered func() bool
			ws := newWaitSession(t, 50*time.Millisecond)
			if consumer == "wait_for_messages" {
				ws.s.changes = w
				ws.startWait(t, 8, map[string]any{"timeout_seconds": 30}, nil)
				answered = func() bool { return len(ws.requestLines(8, "")) > 0 }
			} else if consumer == "wait" {
				st, stop, done := newTestStore(t, ws.dir), make(chan os.Signal), make(chan struct{})
				var woken atomic.Bool
				go func() {
					defer close(done)
					n, err := waitForWakeup(st, w, waitOptions{contextID: "ctx-b", timeout: 30 * time.Second, safetyPoll: watchSafetyPoll, stop: stop})
					woken.Store(err == nil && n != nil)
				}()
				t.Cleanup(func() { close(stop); <-done })
				answered = woken.Load
			} else {
				rec := &recorder{}
				m := newSubscriptions(newTestStore(t, ws.dir), 50*time.Millisecond, rec.notify)
				t.Cleanup(m.close)
				m.followWatch(w)
				// The group's resource: the session's own poller would take
				// bob's wake events.
				if err := m.subscribe(groupURI(ws.gid)); err != nil {
					t.Fatal(err)
				}
				answered = func() bool {
					rec.mu.Lock()
					defer rec.mu.Unlock()
					return len(rec.got) > 0
				}
			}
			// The consumer has tried to start the watch, and made the check
			// that the failure asked for, well before the send.
			time.Sleep(300 * time.Millisecond)
			if answered() {
				t.Fatal("answered before the send")
			}
			other := newServer(newTestStore(t, ws.dir), &strings.Builder{}, newServerConfig(version, time.Hour))
			t.Cleanup(other.subs.close)
			mustSend(t, other, ws.gid, "ctx-a", "alice", "@bob wake up", nil)
			sent := time.Now()
			deadline := time.Now().Add(watchSafetyPoll / 2)
			for !answered() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if !answered() {
				t.Errorf("nothing after %v; want the send seen at the consumer's poll interval, not the %v safety poll", time.Since(sent), watchSafetyPoll)
			}
		})
	}
}
