package main

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// changeWatcher tells the parts of this process that wait on groups (the
// subscription poller, `wait`, wait_for_messages) which groups in a
// directory may have changed, from inotify or kqueue, since writers are
// often other processes. Events only say "look again": consumers still
// read the database, and poll more slowly where events flow (native),
// never not at all, since a network file system may raise none.
//
// The watch runs only while a subscription names a group: every write to
// the directory wakes a watching process, so a server that waits on
// nothing (most of a busy group's senders) must not watch.
type changeWatcher struct {
	dir    string
	native atomic.Bool // events are available here (the watch may still be stopped), until a watch fails to start

	// run serializes starting and stopping the watch; mu is never held
	// across them, as stopping waits for the event goroutine, which takes mu.
	run    sync.Mutex
	watch  fileWatch      // non-nil while the watch runs
	closed bool           // written under run and mu: changed arms nothing after
	probed sync.WaitGroup // runs the probe's release (probeWatch); close joins it

	// mu guards subs and settles, which the event goroutine, the settle
	// timers and consumers share.
	mu      sync.Mutex
	subs    map[*watchSubscription]struct{}
	settles map[string]*watchSettle
	// settling counts the settle timers armed and not yet run or stopped;
	// close joins them, so that none publishes after it.
	settling sync.WaitGroup
}

// fileWatch is a running watch of a groups directory (inotifyWatch,
// kqueueWatch), reporting every group's files until stop ends it and waits
// for its goroutine; changed drops the groups no subscription wants.
type fileWatch interface{ stop() }

// watchSubscription collects the groups that may have changed since its
// consumer last looked. C receives a value whenever there is something to
// take; it is buffered, so a burst of events wakes the consumer once.
type watchSubscription struct {
	C chan struct{}
	w *changeWatcher

	// want is the set of groups the consumer cares about, nil for every
	// group; it and the changes to take are guarded by w.mu.
	want    map[string]bool
	changed map[string]bool
	all     bool
}

// watchSettle is one group's announcement schedule: step 0 waits out
// watchQuietPeriod, step i > 0 waits for re-check i.
type watchSettle struct {
	t    *time.Timer
	step int
}

// Event settling: an event can arrive before its commit is visible to
// readers (the wal-index update raises no event), so a group is announced
// watchQuietPeriod after its first event (not its last, so that a group
// written without pause is still announced) and again after each
// watchRecheck delay, which covers a slow fsync. An event during the
// re-checks starts the schedule again.
const watchQuietPeriod = 3 * time.Millisecond

var watchRecheck = []time.Duration{30 * time.Millisecond, 150 * time.Millisecond}

// watchCoalesce is how long the event reader first sleeps after a read
// that returned events, so that the kernel merges the writes meanwhile into
// one event (inotify) or one pending event (kqueue's EV_CLEAR); being
// shorter than watchQuietPeriod, it delays no announcement. While events
// arrive during every pause it doubles up to watchCoalesceMax: with eight
// processes writing one group, each woke 500 times a second and took the
// CPU from the process holding the write lock.
const (
	watchCoalesce    = 2 * time.Millisecond
	watchCoalesceMax = 16 * time.Millisecond
)

// watchPacer paces an event reader (watchCoalesce).
type watchPacer struct{ pause time.Duration }

// sleep pauses after a read that took waited: a read that found its events
// already queued means the directory is busy, so the pause doubles; one
// that had to wait for them starts again from watchCoalesce.
func (p *watchPacer) sleep(waited time.Duration) {
	switch {
	case p.pause == 0 || waited > p.pause:
		p.pause = watchCoalesce
	case waited < time.Millisecond:
		p.pause = min(2*p.pause, watchCoalesceMax)
	}
	time.Sleep(p.pause)
}

// newChangeWatcher returns a watcher of dir that watches once something
// subscribes. It never fails: where dir cannot be watched (probeWatch) it
// is a watcher with native false whose subscriptions only hear publish.
func newChangeWatcher(dir string) *changeWatcher {
	w := &changeWatcher{dir: dir, subs: map[*watchSubscription]struct{}{}, settles: map[string]*watchSettle{}}
	release, err := probeWatch(dir)
	if err != nil {
		logf("watch %s for changes: %v; polling only", dir, err)
		return w
	}
	w.native.Store(true)
	// The server's first answer must not wait for the probe's release.
	w.probed.Go(release)
	return w
}

// close stops the file-system watch for good; subscriptions go quiet.
func (w *changeWatcher) close() {
	w.reconfigure(func() { w.closed = true })
	w.probed.Wait()
	w.settling.Wait()
}

// reconfigure runs change, which edits w.subs or w.closed under w.mu, then
// starts the watch while a subscription wants a group and stops it when
// none does or the watcher is closed, all under w.run. Starting announces
// every group on the settle schedule, since a commit written just before
// the watch began raised no event. A watch that fails to start (an inotify
// limit reached since the probe) is logged, every subscription told once to
// look at everything, and native cleared: consumers poll at their own pace.
func (w *changeWatcher) reconfigure(change func()) {
	w.run.Lock()
	defer w.run.Unlock()
	w.mu.Lock()
	change()
	wanted := false
	for s := range w.subs {
		wanted = wanted || s.want == nil || len(s.want) > 0
	}
	w.mu.Unlock()
	if !wanted || !w.native.Load() || w.closed {
		w.stopLocked()
		return
	}
	if w.watch != nil {
		return
	}
	watch, err := watchDirectory(w.dir, w.fileEvent)
	if err != nil {
		logf("watch %s for changes: %v; polling only", w.dir, err)
		w.native.Store(false)
		w.publish("")
		return
	}
	w.watch = watch
	w.changed("")
}

// stopLocked stops the watch and its pending announcements; w.run is held.
func (w *changeWatcher) stopLocked() {
	if w.watch != nil {
		w.watch.stop()
		w.watch = nil
	}
	w.mu.Lock()
	for _, s := range w.settles {
		if s.t.Stop() {
			w.settling.Done()
		}
	}
	clear(w.settles)
	w.mu.Unlock()
}

// subscribeTo returns a new subscription to changes of the groups named
// (every group, when groups is nil); close it when done.
func (w *changeWatcher) subscribeTo(groups []string) *watchSubscription {
	s := &watchSubscription{C: make(chan struct{}, 1), w: w, changed: map[string]bool{}}
	s.watchGroups(groups)
	return s
}

// watchGroups replaces the groups the subscription cares about (every
// group, when groups is nil).
func (s *watchSubscription) watchGroups(groups []string) {
	s.w.reconfigure(func() {
		s.want = setOf(groups) // nil: every group
		s.w.subs[s] = struct{}{}
	})
}

// close ends the subscription; the last one to go stops the watch.
func (s *watchSubscription) close() {
	s.w.reconfigure(func() { delete(s.w.subs, s) })
}

// take returns and clears what changed since the last take: group ids, or
// all when anything may have changed (an event queue overflowed).
func (s *watchSubscription) take() (groups []string, all bool) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	groups, all = slices.Collect(maps.Keys(s.changed)), s.all
	clear(s.changed)
	s.all = false
	return groups, all
}

// publish tells every subscription that cares about group id that it may
// have changed; an empty id (every group) reaches them all.
func (w *changeWatcher) publish(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs {
		if id == "" {
			s.all = true
		} else if s.want == nil || s.want[id] {
			s.changed[id] = true
		} else {
			continue
		}
		select {
		case s.C <- struct{}{}:
		default:
		}
	}
}

// wantedLocked reports whether any subscription cares about group id; w.mu
// is held.
func (w *changeWatcher) wantedLocked(id string) bool {
	for s := range w.subs {
		if s.want == nil || s.want[id] {
			return true
		}
	}
	return false
}

// fileEvent receives one file-system event: the name of the file in dir
// that changed, or "" when events were lost.
func (w *changeWatcher) fileEvent(name string) {
	if id, ok := groupOfFile(name); ok || name == "" {
		w.changed(id)
	}
}

// changed schedules the announcement of group id (every group when id is
// empty) on its settle schedule unless no subscription wants it.
func (w *changeWatcher) changed(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || id != "" && !w.wantedLocked(id) {
		return
	}
	if s := w.settles[id]; s != nil {
		if s.step > 0 {
			s.step = 0
			w.armLocked(s, watchQuietPeriod)
		}
		return
	}
	s := &watchSettle{}
	w.settling.Add(1)
	s.t = time.AfterFunc(watchQuietPeriod, func() { w.settled(id, s) })
	w.settles[id] = s
}

// armLocked runs s's timer again in d; w.mu is held. Reset reports whether
// the timer was still armed, which w.settling then already counts.
func (w *changeWatcher) armLocked(s *watchSettle, d time.Duration) {
	if !s.t.Reset(d) {
		w.settling.Add(1)
	}
}

// settled announces group id when its schedule s falls due and arms the
// next step, or ends the schedule after the last re-check.
func (w *changeWatcher) settled(id string, s *watchSettle) {
	defer w.settling.Done()
	w.mu.Lock()
	if w.settles[id] != s {
		w.mu.Unlock()
		return
	}
	if s.step < len(watchRecheck) {
		prev := time.Duration(0)
		if s.step > 0 {
			prev = watchRecheck[s.step-1]
		}
		w.armLocked(s, watchRecheck[s.step]-prev)
		s.step++
	} else {
		delete(w.settles, id)
	}
	w.mu.Unlock()
	w.publish(id)
}

// groupOfFile maps the name of a file in the groups directory to its group
// id: the database or its -wal or -journal file. The -shm file is left out,
// since readers write to it too and must not wake every other reader.
func groupOfFile(name string) (string, bool) {
	db := strings.TrimSuffix(strings.TrimSuffix(name, "-wal"), "-journal")
	return groupIDOfFile(db)
}
