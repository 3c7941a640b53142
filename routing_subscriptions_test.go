package main

import (
	"database/sql"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder collects notifications and can be told to fail writes.
type recorder struct {
	mu   sync.Mutex
	fail bool
	got  []string
}

func (r *recorder) notify(method string, params object) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return errors.New("broken pipe")
	}
	r.got = append(r.got, method+" "+pyJSON(params))
	return nil
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

func (r *recorder) setFail(fail bool) {
	r.mu.Lock()
	r.fail = fail
	r.mu.Unlock()
}

func TestSubscriptionPolling(t *testing.T) {
	s, _ := newTestServer(t)
	rec := &recorder{}
	// Drive polls by hand: the monitor's own ticker is an hour.
	m := newSubscriptions(s.store, time.Hour, rec.notify)
	defer m.close()
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	mustJoin(t, s, g, "bob", "Bob")
	groupURI := groupURI(g)
	bobURI := wakeupURI(g, "bob")
	if err := m.subscribe(bobURI); !errors.Is(err, errWakeupNotAuthorized) {
		t.Fatalf("unauthorized wakeup subscribe: got %v; want %v", err, errWakeupNotAuthorized)
	}
	m.authorize(bobURI)
	for _, uri := range []string{groupURI, bobURI} {
		if err := m.subscribe(uri); err != nil {
			t.Fatal(err)
		}
	}
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("nothing changed: got %v", got)
	}

	mustSend(t, s, g, "alice", "Alice", "hey @bob", map[string]any{"priority": "high"})
	rec.setFail(true)
	m.poll(t.Context(), nil)
	rec.setFail(false)
	var notified *string
	if err := s.store.withGroup(g, func(db *sql.DB) error {
		return db.QueryRow("SELECT last_notified_at FROM wakeup_events WHERE context_id = 'bob'").Scan(&notified)
	}); err != nil {
		t.Fatalf("read bob's wakeup: %v", err)
	}
	if notified != nil {
		t.Errorf("a notification that failed to write was marked delivered at %s", *notified)
	}
	m.poll(t.Context(), nil)
	want := []string{
		`notifications/resources/updated {"uri": "` + groupURI + `", "priority": "normal", "relevance": "group_change"}`,
		`notifications/resources/updated {"uri": "` + bobURI + `", "priority": "high", "relevance": "mentioned"}`,
	}
	if got := rec.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("after a send:\ngot  %v\nwant %v", got, want)
	}
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("no reminder before 300 s: got %v", got)
	}

	// A reminder is due 300 s after the last notification.
	clockOf(s.store).skewBy(wakeupReminderInterval + time.Second)
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], bobURI) {
		t.Errorf("reminder: got %v; want one wakeup notification", got)
	}
	clockOf(s.store).skewBy(0)
	mustCall(t, s, "get_unread_messages", map[string]any{"group_id": g, "context_id": "bob", "name": "Bob"})
	clockOf(s.store).skewBy(2 * wakeupReminderInterval)
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("acknowledged by reading: got %v; want no reminder", got)
	}
	clockOf(s.store).skewBy(0)

	mustCall(t, s, "delete_group", map[string]any{"group_id": g, "context_id": "alice"})
	m.poll(t.Context(), nil)
	want = []string{
		`notifications/resources/updated {"uri": "` + groupURI + `", "relevance": "deleted"}`,
		`notifications/resources/updated {"uri": "` + bobURI + `", "relevance": "deleted"}`,
	}
	if got := rec.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("after delete:\ngot  %v\nwant %v", got, want)
	}
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("deleted subscriptions are dropped: got %v", got)
	}
}

// handPolledGroup returns a server with a group alice created and joined,
// and a subscription monitor polled by hand (its own ticker is an hour)
// whose notifications go to rec.
func handPolledGroup(t *testing.T) (*server, *recorder, *subscriptions, string) {
	t.Helper()
	s, _ := newTestServer(t)
	rec := &recorder{}
	m := newSubscriptions(s.store, time.Hour, rec.notify)
	t.Cleanup(m.close)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	return s, rec, m, g
}

// watchedGroup returns handPolledGroup's group with the monitor subscribed
// to it.
func watchedGroup(t *testing.T) (*server, *recorder, *subscriptions, string) {
	t.Helper()
	s, rec, m, g := handPolledGroup(t)
	if err := m.subscribe(groupURI(g)); err != nil {
		t.Fatal(err)
	}
	return s, rec, m, g
}

func TestGroupChangeNotificationRetriedAfterWriteFailure(t *testing.T) {
	s, rec, m, g := watchedGroup(t)
	mustSend(t, s, g, "alice", "Alice", "one", nil)
	rec.setFail(true)
	m.poll(t.Context(), nil)
	rec.setFail(false)
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 1 {
		t.Errorf("got %v; want the change notified once the write works", got)
	}
}

func TestBusyKeepsSubscription(t *testing.T) {
	s, rec, m, g := watchedGroup(t)
	s.store.forget(g) // the next poll opens the file anew, under the lock
	locker := openTestDB(t, s.store.groupPath(g), "rw")
	locker.SetMaxOpenConns(1)
	// An exclusive-mode write keeps readers of a WAL database out.
	for _, q := range []string{"PRAGMA locking_mode=EXCLUSIVE", "BEGIN EXCLUSIVE", "UPDATE group_state SET message_revision = message_revision + 1"} {
		if _, err := locker.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("while locked: got %v; want nothing", got)
	}
	if _, err := locker.Exec("COMMIT"); err != nil {
		t.Fatal(err)
	}
	locker.Close()
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], "group_change") {
		t.Errorf("after the lock: got %v; want the change", got)
	}
}

func TestCloseDoesNotWaitForABlockedWrite(t *testing.T) {
	s, _ := newTestServer(t)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	blocked := make(chan struct{})
	defer close(blocked)
	entered := make(chan struct{}, 1)
	m := newSubscriptions(s.store, 10*time.Millisecond, func(string, object) error {
		entered <- struct{}{}
		<-blocked // a client that no longer reads stdout
		return nil
	})
	if err := m.subscribe(groupURI(g)); err != nil {
		t.Fatal(err)
	}
	mustSend(t, s, g, "alice", "Alice", "change", nil)
	<-entered
	start := time.Now()
	m.close()
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("close took %v; want it bounded at about a second", elapsed)
	}
}

// TestPollSkipsUnchangedGroups checks that a poll does not open a group
// whose files have not changed, yet still sends a reminder that falls due
// without any write, and notices the next write.
func TestPollSkipsUnchangedGroups(t *testing.T) {
	s, m, rec, g := bobsPoller(t, true)
	bobURI := wakeupURI(g, "bob")
	mustSend(t, s, g, "alice", "Alice", "hey @bob", nil)
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 2 {
		t.Fatalf("after a send: got %v; want two notifications", got)
	}
	// Closing the last connection checkpoints the WAL into the database,
	// so the files are aged after that; the poll then finds nothing to do
	// and remembers the settled signature.
	s.store.forget(g)
	ageGroupFiles(t, s.store.dir, g)
	m.poll(t.Context(), nil)
	s.store.forget(g)
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("nothing changed: got %v", got)
	}
	s.store.mu.Lock()
	_, opened := s.store.handles[g]
	s.store.mu.Unlock()
	if opened {
		t.Error("the poll opened a group whose files had not changed")
	}

	clockOf(s.store).skewBy(wakeupReminderInterval + time.Second)
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], bobURI) {
		t.Errorf("reminder due without a write: got %v; want one wakeup notification", got)
	}
	clockOf(s.store).skewBy(0)

	ageGroupFiles(t, s.store.dir, g)
	m.poll(t.Context(), nil)
	rec.take()
	mustSend(t, s, g, "bob", "Bob", "thanks", nil)
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], "group_change") {
		t.Errorf("after a write: got %v; want one group_change notification", got)
	}
}

// TestPollerWatchesOnlyWhileSubscribed checks that a poller following a
// change watcher keeps no watch running until it has a subscription,
// watches only the subscribed groups, and stops the watch when the last
// subscription goes.
func TestPollerWatchesOnlyWhileSubscribed(t *testing.T) {
	f := newHookFixture(t, "bob-ctx")
	w := nativeWatcher(t, f.st.dir)
	m := newSubscriptions(newTestStore(t, f.st.dir), time.Hour, (&recorder{}).notify)
	defer m.close()
	m.followWatch(w)
	// Give the poller time to take the watcher: it must not start a watch
	// for an empty set of subscriptions.
	time.Sleep(50 * time.Millisecond)
	if w.watching() {
		t.Fatal("watching with no subscription; want no watch")
	}
	uri := wakeupURI(f.groupID, "bob-ctx")
	m.authorize(uri)
	if err := m.subscribe(uri); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a watch for the subscribed group", func() bool {
		if !w.watching() {
			return false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for s := range w.subs {
			return len(s.want) == 1 && s.want[f.groupID]
		}
		return false
	})
	m.unsubscribe(uri)
	waitUntil(t, "the watch stopped after the last unsubscribe", func() bool { return !w.watching() })
}

// TestWakeupRenotifyGap shows wakeupRenotifyGap: a member notified once is
// not notified again for each new wake event while it has not read, is
// notified again once the gap has passed, and at once after it reads.
func TestWakeupRenotifyGap(t *testing.T) {
	s, m, rec, g := bobsPoller(t, false)
	clock := time.Now()
	clockOf(s.store).fix(clock)
	step := func(what string, send bool, advance time.Duration, want int) {
		t.Helper()
		if send {
			mustSend(t, s, g, "alice", "Alice", "@bob "+what, nil)
		}
		clock = clock.Add(advance)
		clockOf(s.store).fix(clock)
		m.poll(t.Context(), nil)
		if got := rec.take(); len(got) != want {
			t.Errorf("%s: got %d notifications %v; want %d", what, len(got), got, want)
		}
	}
	step("first mention", true, 0, 1)
	step("second mention before the gap", true, 100*time.Millisecond, 0)
	if d, ok := m.nextDue(); !ok || d <= 0 || d > wakeupRenotifyGap {
		t.Errorf("next renotify: got %v, %v; want within %v", d, ok, wakeupRenotifyGap)
	}
	step("gap passed", false, wakeupRenotifyGap, 1)
	step("third mention before the gap", true, 0, 0)
	mustCall(t, s, "get_unread_messages", map[string]any{"group_id": g, "context_id": "bob", "name": "Bob"})
	step("fourth mention after reading", true, 0, 1)
	if _, ok := m.nextDue(); !ok {
		t.Errorf("next renotify after a notification: got none")
	}
}

// bobsPoller returns handPolledGroup's group with bob joined too, and the
// monitor subscribed to bob's wakeups, and to the group itself when group
// is set.
func bobsPoller(t *testing.T, group bool) (*server, *subscriptions, *recorder, string) {
	t.Helper()
	s, rec, m, g := handPolledGroup(t)
	mustJoin(t, s, g, "bob", "Bob")
	uris := []string{wakeupURI(g, "bob")}
	if group {
		uris = append([]string{groupURI(g)}, uris...)
	}
	m.authorize(uris[len(uris)-1])
	for _, uri := range uris {
		if err := m.subscribe(uri); err != nil {
			t.Fatal(err)
		}
	}
	return s, m, rec, g
}

// TestNextDueSkipsPassedTimes shows that a subscription whose due time has
// passed without a check clearing it (here a member the tokens file no
// longer lets this session speak for) does not hide the renotify time of
// another: the poller's timer must still fire for carol.
func TestNextDueSkipsPassedTimes(t *testing.T) {
	s, m, rec, g := bobsPoller(t, false)
	mustJoin(t, s, g, "carol", "Carol")
	carol := wakeupURI(g, "carol")
	m.authorize(carol)
	if err := m.subscribe(carol); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	clockOf(s.store).fix(clock)
	var refuseBob atomic.Bool
	m.speaksFor = func(c string) *domainError {
		if c == "bob" && refuseBob.Load() {
			return authorizationErrorf("not bob")
		}
		return nil
	}
	mustSend(t, s, g, "alice", "Alice", "@bob one", nil)
	m.poll(t.Context(), nil)
	refuseBob.Store(true)
	clock = clock.Add(2 * wakeupRenotifyGap) // bob's renotify time passes unchecked
	clockOf(s.store).fix(clock)
	mustSend(t, s, g, "alice", "Alice", "@carol two", nil)
	m.poll(t.Context(), nil)
	if got := rec.take(); len(got) != 2 {
		t.Fatalf("got %d notifications %v; want bob's and carol's", len(got), got)
	}
	if d, ok := m.nextDue(); !ok || d <= 0 || d > wakeupRenotifyGap {
		t.Errorf("next due with bob's time passed: got %v, %v; want carol's renotify within %v", d, ok, wakeupRenotifyGap)
	}
}

// TestGroupWithoutStateMarker follows the original where a group file
// lacks its group_state row: join_group (whose wakeup subscription needs no
// revision) succeeds, and subscribing to the group's resource is refused
// with the original's "Invalid params" text. The port failed the join as a
// storage error after storing it, and answered the subscribe "Internal
// server error".
func TestGroupWithoutStateMarker(t *testing.T) {
	s, _ := newTestServer(t)
	initializeSession(t, s)
	g := mustCreateGroup(t, s, "alice")
	if _, err := openTestDB(t, s.store.groupPath(g), "rw").Exec("DELETE FROM group_state"); err != nil {
		t.Fatal(err)
	}
	if out, isErr := callTool(t, s, "join_group", map[string]any{"group_id": g, "context_id": "bob", "name": "Bob"}); isErr {
		t.Errorf("join_group: got %v; want joined", out)
	}
	got := exchangeLine(t, s, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"`+groupURI(g)+`"}}`)
	if want := `"message": "Invalid params: Group state marker is missing."`; !strings.Contains(got, want) {
		t.Errorf("subscribe: got %s; want %s", got, want)
	}
}
