package main

import (
	"context"
	"sync"
	"time"
)

// subscriptions watches the resources one MCP session subscribed to and
// pushes notifications/resources/updated when they change, polling SQLite
// because the writers are often other processes.
type subscriptions struct {
	store    *store
	interval time.Duration
	notify   func(method string, params object) error
	channels bool // set before the first subscribe: push channel events too
	// speaksFor is serverConfig.speaksFor, asked at each use of a wakeup
	// URI: a tokens reload may narrow it after join_group.
	speaksFor func(contextID string) *domainError

	mu         sync.Mutex
	subs       map[string]*subscription
	order      []string // subscribed URIs in subscription order
	authorized map[string]bool

	// attach hands the poller a change watcher (followWatch); regroup
	// tells it that the set of subscribed groups changed.
	attach  chan *changeWatcher
	regroup chan struct{}

	// stop cancels the poller's context; running joins it (close).
	stop    context.CancelFunc
	running sync.WaitGroup
}

// subscription is the state of one subscribed URI.
type subscription struct {
	wakeup    bool
	groupID   string
	contextID string
	revision  int64 // last notified message_revision of a group resource

	// seen is the group's file signature when a check last found nothing
	// left to do (zero, which proves nothing, before that). Until it changes
	// or dueAt passes the poller skips the group without opening it, so an
	// idle poll costs two stat calls a group and stays out of the handle cache.
	seen groupSignature
	// dueAt is when, on the store's clock, the poller looks again without a
	// write (zero: never): the next wakeup reminder or, while held (set by
	// a notification, with acks the store's acknowledgement count then),
	// the end of wakeupRenotifyGap.
	dueAt time.Time
	held  bool
	acks  int64
}

// wakeupRenotifyGap is the least time between two notifications of one
// wakeup subscription while nothing in this process has acknowledged a
// wake event since the first: a client that has not read learns nothing
// from a second one, and with eight agents sending into one group the
// writes marking them notified doubled the sends' p99.
const wakeupRenotifyGap = time.Second

// speaksForAnyone is the speaksFor of a session without per-agent tokens.
func speaksForAnyone(string) *domainError { return nil }

// newSubscriptions starts the poller of one session's subscriptions; close stops it.
func newSubscriptions(st *store, interval time.Duration, notify func(string, object) error) *subscriptions {
	m := &subscriptions{
		store: st, interval: interval, notify: notify, speaksFor: speaksForAnyone,
		subs: map[string]*subscription{}, authorized: map[string]bool{},
		attach: make(chan *changeWatcher, 1), regroup: make(chan struct{}, 1),
	}
	ctx, stop := context.WithCancel(context.Background())
	m.stop = stop
	m.running.Go(func() { m.run(ctx) })
	return m
}

// close stops the poller and joins it (joinWithin): nothing is written after the server ends.
func (m *subscriptions) close() {
	m.stop()
	joinWithin(time.Second, m.running.Wait)
}

// joinWithin waits at most d for join, run aside: no context cancels a write
// to a client that stopped reading stdout, and it must not block the exit.
func joinWithin(d time.Duration, join func()) {
	joined := make(chan struct{})
	go func() { join(); close(joined) }()
	select {
	case <-joined:
	case <-time.After(d):
	}
}

// watchSafetyPoll is the slowest the poller ticks while file events flow:
// events cannot see writes made on another machine sharing the directory.
const watchSafetyPoll = 2 * time.Second

// followWatch makes the poller check a group as soon as w reports it
// changed, besides its tick, which then slows to at least watchSafetyPoll.
// Without native events it changes nothing.
func (m *subscriptions) followWatch(w *changeWatcher) {
	if w == nil || !w.native.Load() {
		return
	}
	select {
	case m.attach <- w:
	default: // one is already on its way; the poller keeps the first
	}
}

// run is the poller: it checks the subscriptions at every tick, file
// event and dueAt until ctx is cancelled.
func (m *subscriptions) run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	f := &watchFollower{m: m, tick: t}
	defer func() {
		if f.sub != nil {
			f.sub.close()
		}
	}()
	// due fires at the earliest dueAt, should no write come first.
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	for {
		if d, ok := m.nextDue(); ok {
			due.Reset(d)
		}
		select {
		case <-ctx.Done():
			return
		case w := <-m.attach:
			if f.sub == nil {
				f.sub = w.subscribeTo([]string{})
				f.events = f.sub.C
				t.Reset(max(m.interval, watchSafetyPoll))
				f.regroup()
			}
		case <-m.regroup:
			f.regroup()
		case <-f.events:
			if groups, all := f.sub.take(); all {
				m.poll(ctx, nil)
			} else if groups != nil {
				m.poll(ctx, setOf(groups))
			}
		case <-t.C:
			m.poll(ctx, nil)
		case <-due.C:
			m.poll(ctx, nil)
		}
	}
}

// watchFollower is the poller's subscription to a change watcher, naming
// the subscribed groups. It belongs to the poller's goroutine.
type watchFollower struct {
	m      *subscriptions
	sub    *watchSubscription // nil until followWatch
	events <-chan struct{}    // sub.C, or nil (never ready) without sub
	groups map[string]bool    // the groups sub watches
	tick   *time.Ticker       // the poller's, slowed to watchSafetyPoll while events flow
}

// regroup points the watcher subscription at the subscribed groups. The
// groups it adds are announced as if they had changed: a write that landed
// between their subscribe and the watch raised no event here.
func (f *watchFollower) regroup() {
	if f.sub == nil {
		return
	}
	groups := f.m.groups()
	f.sub.watchGroups(groups)
	if !f.sub.w.native.Load() {
		f.tick.Reset(f.m.interval) // the watch failed to start: no event will come
	}
	for _, g := range groups {
		if !f.groups[g] {
			f.sub.w.changed(g)
		}
	}
	f.groups = setOf(groups)
}

// poll checks every subscription once, in subscription order: those of
// the groups in only, or all of them when only is nil.
func (m *subscriptions) poll(ctx context.Context, only map[string]bool) {
	m.mu.Lock()
	uris := append([]string(nil), m.order...)
	subs := mapSlice(uris, func(u string) subscription { return *m.subs[u] })
	m.mu.Unlock()
	for i, uri := range uris {
		if ctx.Err() != nil {
			return
		}
		if only != nil && !only[subs[i].groupID] {
			continue
		}
		m.check(uri, subs[i])
	}
}

// check polls one subscription. A busy database keeps the subscription for
// the next poll; a vanished group ends it with a "deleted" notification; a
// notification that could not be written is not recorded as delivered.
func (m *subscriptions) check(uri string, sub subscription) {
	// The signature is read before the group, so a write that lands during
	// the check changes it and is looked at by the next poll.
	sig, sigOK := readGroupSignature(m.store.groupPath(sub.groupID), time.Now())
	waiting := sub.dueAt.IsZero() || m.store.now().Before(sub.dueAt)
	if waiting && (sub.held && m.store.acks.Load() == sub.acks || sigOK && sig.unchangedSince(sub.seen)) {
		return // the poller looks again at dueAt
	}
	var err error
	if sub.wakeup && m.speaksFor(sub.contextID) != nil {
		return // held back until the tokens file lets this session speak for it again
	} else if sub.wakeup {
		var w *delivery
		acks := m.store.acks.Load()
		if w, err = m.store.dueWakeup(sub.groupID, sub.contextID); err == nil {
			if w == nil {
				m.settleWakeup(uri, sub, sig, sigOK)
			} else if m.notify("notifications/resources/updated", object{{"uri", uri}, {"priority", w.priority}, {"relevance", w.relevance}}) == nil {
				m.update(uri, func(cur *subscription) {
					cur.held, cur.dueAt, cur.acks = true, m.store.now().Add(wakeupRenotifyGap), acks
				})
				// A failed channel push leaves the event due, to be pushed
				// after the renotify gap rather than at the next reminder.
				if !m.channels || m.pushChannel(sub, w.id) == nil {
					if err := m.store.markWakeupNotified(sub.groupID, w.id); err != nil && !isBusy(err) {
						logf("mark wakeup %d of %s notified: %v", w.id, sub.groupID, err)
					}
				}
			}
			return
		}
	} else {
		var rev int64
		if rev, err = m.store.messageRevision(sub.groupID); err == nil {
			if rev == sub.revision || m.notify("notifications/resources/updated", object{{"uri", uri}, {"priority", "normal"}, {"relevance", "group_change"}}) == nil {
				m.update(uri, func(cur *subscription) {
					cur.revision = rev
					cur.seen = sig // zero when !sigOK
				})
			}
			return
		}
	}
	if isBusy(err) || m.store.groupExists(sub.groupID) {
		return
	}
	m.unsubscribe(uri)
	m.notify("notifications/resources/updated", object{{"uri", uri}, {"relevance", "deleted"}})
}

// settleWakeup records a check of wakeup subscription uri that found
// nothing due: it is no longer held, and later polls skip the group until
// its signature sig (when sigOK) changes or the next reminder is due.
func (m *subscriptions) settleWakeup(uri string, sub subscription, sig groupSignature, sigOK bool) {
	var remindAt time.Time
	var err error
	if sigOK {
		remindAt, err = m.store.nextWakeupReminder(sub.groupID, sub.contextID)
	}
	m.update(uri, func(cur *subscription) {
		cur.held, cur.dueAt = false, time.Time{}
		if sigOK && err == nil {
			cur.seen, cur.dueAt = sig, remindAt
		}
	})
}

// nextDue returns how long until the earliest dueAt still to come, and
// false when no subscription waits for one.
func (m *subscriptions) nextDue() (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.store.now()
	var next time.Time
	for _, sub := range m.subs {
		if at := sub.dueAt; at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next.Sub(now), !next.IsZero()
}

// update changes the state of subscription uri, if it is still subscribed.
func (m *subscriptions) update(uri string, change func(*subscription)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.subs[uri]; ok {
		change(cur)
	}
}
