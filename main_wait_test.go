package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWaitReturnsOnSend checks that a waiter blocked on a member returns
// the wake event of a message sent after it started, recorded as delivered
// by wait, and that the same event does not wake a second waiter.
func TestWaitReturnsOnSend(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	w := newChangeWatcher(f.st.dir)
	defer w.close()
	opts := waitOptions{contextID: "sess-1", timeout: 30 * time.Second, safetyPoll: time.Hour}
	got := make(chan *wakeNotice, 1)
	go func() {
		n, err := waitForWakeup(newTestStore(t, f.st.dir), w, opts)
		if err != nil {
			t.Error(err)
		}
		got <- n
	}()
	time.Sleep(50 * time.Millisecond) // let the waiter subscribe; the first check also covers a send before it
	sentAt := time.Now()
	out := f.sendAs(t, "@bob are you there?")
	var n *wakeNotice
	select {
	case n = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("waiter did not return")
	}
	t.Logf("send to wait return: %v (native events: %v)", time.Since(sentAt), w.native)
	if n == nil || n.messageID != out.messageID || n.sender != "alice" || n.text != "@bob are you there?" || n.relevance != "mentioned" {
		t.Fatalf("got %+v; want message %d from alice", n, out.messageID)
	}
	ds, err := deliveriesOf(f.st, f.groupID, "sess-1")
	if err != nil || len(ds) != 1 || ds[0].state() != "delivered" || ds[0].deliveredVia != viaWait {
		t.Errorf("deliveries %+v (%v); want delivered by wait, unread", ds, err)
	}
	opts.timeout = 200 * time.Millisecond
	if again, err := waitForWakeup(f.st, w, opts); err != nil || again != nil {
		t.Errorf("second wait got %+v (%v); want a timeout", again, err)
	}
	// The message itself is still unread: a hook or get_unread_messages
	// delivers it.
	if msgs, err := f.st.unreadMessages(f.groupID, "sess-1", "bob"); err != nil || len(msgs) != 1 {
		t.Errorf("unread after wait: %d (%v); want 1", len(msgs), err)
	}
}

// TestWaitClaimsOnce checks that of several waiters of one member exactly
// one is woken by a wake event.
func TestWaitClaimsOnce(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	w := newChangeWatcher(f.st.dir)
	defer w.close()
	f.sendAs(t, "@bob once")
	var mu sync.Mutex
	woken := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := newTestStore(t, f.st.dir)
			n, err := waitForWakeup(st, w, waitOptions{contextID: "sess-1", timeout: time.Second, safetyPoll: 100 * time.Millisecond})
			if err != nil {
				t.Error(err)
			}
			if n != nil {
				mu.Lock()
				woken++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if woken != 1 {
		t.Errorf("%d waiters woken; want 1", woken)
	}
}

// TestWaitCLI checks the asyncRewake contract: exit 2 with the message on
// stderr when woken, the session id read from the hook payload; exit 0
// and silence at the timeout; nothing on stdout either way.
func TestWaitCLI(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	f.sendAs(t, "@bob ping")
	var stdout, stderr bytes.Buffer
	payload := strings.NewReader(`{"session_id": "sess-1", "hook_event_name": "Stop"}`)
	if code := runWait([]string{"--timeout", "20s"}, payload, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "@bob ping") ||
		!strings.Contains(stderr.String(), "get_unread_messages") || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 2, nothing and the message", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	if code := runWait([]string{"--context-id", "sess-1", "--timeout", "100ms"}, strings.NewReader(""), io.Discard, &stderr); code != 0 || stderr.Len() != 0 {
		t.Errorf("after delivery: exit %d, stderr %q; want 0 and silence", code, stderr.String())
	}
	stderr.Reset()
	if code := runWait([]string{"--timeout", "100ms"}, strings.NewReader("{}"), io.Discard, &stderr); code != 0 || !strings.Contains(stderr.String(), "cannot tell which member") {
		t.Errorf("no identity: exit %d, stderr %q; want 0 and why", code, stderr.String())
	}
}

// TestStatusShowsDeliveryStates checks the summary after a wait and a hook.
func TestStatusShowsDeliveryStates(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	f.sendAs(t, "@bob first")
	if code := runWait([]string{"--context-id", "sess-1", "--timeout", "10s"}, strings.NewReader(""), io.Discard, &bytes.Buffer{}); code != 2 {
		t.Fatalf("wait exit %d; want 2", code)
	}
	f.sendAs(t, "@bob second")
	text, err := memberStatus(f.st, statusOptions{contextID: "sess-1", events: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1 group, 2 unread messages, 2 pending wakeups", `"team" as "bob"`,
		"message 1 (mentioned, normal) delivered:", "by wait, read -", "message 2 (mentioned, normal) created:"} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	runHookCLI(t, []byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`), "--client", "claude-code")
	text, _ = memberStatus(f.st, statusOptions{contextID: "sess-1", events: 5})
	if !strings.Contains(text, "0 pending wakeups") || strings.Count(text, "by hook, read 20") != 2 {
		t.Errorf("after the hook:\n%s\nwant both read, delivered by hook", text)
	}
}

// claimAnyWakeup claims the member's first claimable wake event in the
// groups named by only (every group when only is nil).
func claimAnyWakeup(st *store, contextID string, only map[string]bool) (*wakeNotice, error) {
	groups, err := st.memberships(contextID)
	if err != nil {
		return nil, err
	}
	if only != nil {
		groups = slices.DeleteFunc(groups, func(g membership) bool { return !only[g.groupID] })
	}
	return claimFirstWakeup(st, waitOptions{contextID: contextID}, groups)
}
