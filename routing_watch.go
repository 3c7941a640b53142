package main

import (
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// changeWatcher tells the parts of this process that wait on groups (the
// subscription poller, `wait`, wait_for_messages, the dashboard's poll loop)
// which groups in a directory may have changed, from file-system events on
// the directory: inotify on Linux, kqueue on macOS and the BSDs. Writers are
// often other processes, Python or Go, so an in-process signal would not
// do; the events only say "look again", and every consumer still reads the
// database to see what changed. Where no events are available (Windows, a
// network file system whose writes happen on another machine) consumers keep
// polling: native reports whether events flow, and callers poll more slowly
// when they do, never not at all.
type changeWatcher struct {
	dir    string
	native bool
	stop   func()

	// quiet and recheck are the settling schedule (see watchQuietPeriod);
	// newChangeWatcher sets the defaults.
	quiet   time.Duration
	recheck []time.Duration

	// mu guards subs and settling, which the event goroutine, the settling
	// timers and consumers share.
	mu       sync.Mutex
	subs     map[*watchSubscription]struct{}
	settling map[string]*watchSettle
}

// watchSettle is one group's settling: the timer of its next announcement
// and how many re-checks it has armed since the group's last event.
type watchSettle struct {
	timer *time.Timer
	step  int
}

// watchSubscription collects the groups that may have changed since its
// consumer last looked. C receives a value whenever there is something to
// take; it is buffered, so a burst of events wakes the consumer once.
type watchSubscription struct {
	C <-chan struct{}
	c chan struct{}
	w *changeWatcher

	mu     sync.Mutex
	groups map[string]bool
	all    bool
}

// Event settling: an event can arrive before the commit it belongs to is
// visible to readers (the WAL frame is written before the fsync and the
// wal-index update), so a group is announced once the directory has been
// quiet for watchQuietPeriod and then again after each watchRecheck delay,
// which covers a slow fsync; an event during the re-checks starts the
// settling over. The re-checks cost one read per consumer.
const watchQuietPeriod = 3 * time.Millisecond

var watchRecheck = []time.Duration{30 * time.Millisecond, 150 * time.Millisecond}

// fileEventsEnabled reads CROSSTALK_FILE_EVENTS: file events are on unless
// it says 0, off, false or no. Turning them off restores the original's
// pure polling at CROSSTALK_POLL_INTERVAL_SECONDS, which a groups directory
// on a network file system written from several machines may want.
func fileEventsEnabled(value string) bool {
	switch strings.ToLower(pyStrip(value)) {
	case "0", "off", "false", "no":
		return false
	}
	return true
}

// newChangeWatcher starts watching dir. It never fails: without events it
// is a watcher with native false whose subscriptions only hear publish.
func newChangeWatcher(dir string) *changeWatcher {
	w := &changeWatcher{dir: dir, quiet: watchQuietPeriod, recheck: watchRecheck,
		subs: map[*watchSubscription]struct{}{}, settling: map[string]*watchSettle{}}
	stop, err := watchDirectory(dir, w.fileEvent)
	if err != nil {
		logf("watch %s for changes: %v; polling only", dir, err)
		return w
	}
	w.native, w.stop = true, stop
	return w
}

// close stops the file-system watch; subscriptions stay valid but quiet.
func (w *changeWatcher) close() {
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
	w.mu.Lock()
	for _, g := range w.settling {
		g.timer.Stop()
	}
	w.settling = map[string]*watchSettle{}
	w.mu.Unlock()
}

// subscribe returns a new subscription; close it when done.
func (w *changeWatcher) subscribe() *watchSubscription {
	c := make(chan struct{}, 1)
	s := &watchSubscription{C: c, c: c, w: w, groups: map[string]bool{}}
	w.mu.Lock()
	w.subs[s] = struct{}{}
	w.mu.Unlock()
	return s
}

// close ends the subscription.
func (s *watchSubscription) close() {
	s.w.mu.Lock()
	delete(s.w.subs, s)
	s.w.mu.Unlock()
}

// take returns and clears what changed since the last take: group ids, or
// all when anything may have changed (an event queue overflowed).
func (s *watchSubscription) take() (groups []string, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for g := range s.groups {
		groups = append(groups, g)
	}
	all = s.all
	s.groups, s.all = map[string]bool{}, false
	return groups, all
}

// publish tells every subscription that group id (every group, when id is
// empty) may have changed.
func (w *changeWatcher) publish(id string) {
	w.mu.Lock()
	subs := make([]*watchSubscription, 0, len(w.subs))
	for s := range w.subs {
		subs = append(subs, s)
	}
	w.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		if id == "" {
			s.all = true
		} else {
			s.groups[id] = true
		}
		s.mu.Unlock()
		select {
		case s.c <- struct{}{}:
		default:
		}
	}
}

// fileEvent receives one file-system event: the name of the file in dir
// that changed, or "" when events were lost. It settles the group's events
// before announcing it (see watchQuietPeriod).
func (w *changeWatcher) fileEvent(name string) {
	id := ""
	if name != "" {
		var ok bool
		if id, ok = groupOfFile(name); !ok {
			return
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.settling[id]; g != nil {
		// A new event starts the settling over: its commit may be the one
		// not yet visible, so it gets every re-check too.
		g.step = 0
		g.timer.Reset(w.quiet)
		return
	}
	g := &watchSettle{}
	g.timer = time.AfterFunc(w.quiet, func() { w.settled(id, g) })
	w.settling[id] = g
}

// settled runs when group id's settling timer g fires: it arms the next
// re-check or, after the last, forgets the group, and then announces it.
// Both happen under w.mu before the announcement, so that an event arriving
// meanwhile either restarts this settling or starts a new one, and is never
// left with a single announcement and no re-check.
func (w *changeWatcher) settled(id string, g *watchSettle) {
	w.mu.Lock()
	if w.settling[id] != g {
		// close stopped the watch after the timer fired.
		w.mu.Unlock()
		return
	}
	if g.step < len(w.recheck) {
		prev := time.Duration(0)
		if g.step > 0 {
			prev = w.recheck[g.step-1]
		}
		g.timer.Reset(w.recheck[g.step] - prev)
		g.step++
	} else {
		delete(w.settling, id)
	}
	w.mu.Unlock()
	w.publish(id)
}

// groupOfFile maps a file of the groups directory to its group id: the
// database itself or SQLite's -wal and -journal files beside it. The -shm
// file is left out: readers write to it too, and a reader must not wake
// every other reader.
func groupOfFile(name string) (string, bool) {
	base := filepath.Base(name)
	for _, suffix := range []string{"-wal", "-journal"} {
		base = strings.TrimSuffix(base, suffix)
	}
	id, ok := strings.CutSuffix(base, ".sqlite3")
	if !ok || validateGroupID(id) != nil {
		return "", false
	}
	return id, true
}
