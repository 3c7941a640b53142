package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// readAllAsBob marks every message of group id read for bob, as his
// get_unread_messages does: his unread rows and count go, and the member
// revision moves.
func readAllAsBob(fx *observeFixture, id string) {
	fx.exec(id+".sqlite3", func(tx *sql.Tx) error {
		_, err := tx.Exec("DELETE FROM member_unread_messages WHERE context_id = 'bob'; " +
			"UPDATE group_members SET unread_count = 0 WHERE context_id = 'bob'; UPDATE group_state SET member_revision = member_revision + 1")
		return err
	})
}

// TestOpenChatReceiptsFollowReads: a member reading its mail bumps only the
// member revision, and the open chat refreshed its side panel ("0 unread")
// but left every message's receipt saying the member had not read it.
func TestOpenChatReceiptsFollowReads(t *testing.T) {
	c := launchBrowser(t)
	fx := newObserveFixture(t)
	now := time.Now().UTC()
	id := fx.group("Receipts", "", now.Add(-time.Hour), fixtureMember{"ann", "Ann"}, fixtureMember{"bob", "Bob"})
	fx.messages(id, fixtureMessage{Sender: "ann", SenderName: "Ann", Content: "hello", At: now.Add(-time.Minute)})
	obs := newObserver(fx.dir, 100*time.Millisecond, time.Now, time.Local)
	c.open(t, "http://"+serveObserver(t, obs)+"/?view=chats&group_id="+id, "chats")
	receipt := "document.querySelector('#message-list .receipts').textContent"
	c.waitFor(t, receipt+".includes('Bob unread')", 10*time.Second)

	readAllAsBob(fx, id)
	c.waitFor(t, "document.querySelector('.chat-side').textContent.includes('0 unread') && !document.querySelector('.chat-side .has-unread')", 10*time.Second)
	// The side panel and the receipts come in one fragment; allow a frame.
	c.waitFor(t, receipt+" === 'receipts: Bob read'", 2*time.Second)
}

// TestStorageActionAfterRestart: the page reconnects by itself to an
// observer restarted on its port, but kept the old process's CSRF token, so
// both Storage actions were refused as forged until the user reloaded.
func TestStorageActionAfterRestart(t *testing.T) {
	c := launchBrowser(t)
	fx := newObserveFixture(t)
	seedBasic(fx, time.Now())
	first, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := first.Addr().String()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- newObserver(fx.dir, 100*time.Millisecond, time.Now, time.Local).serve(ctx, first) }()
	c.open(t, "http://"+addr+"/?view=storage", "storage")
	stop()
	<-served
	c.waitFor(t, "document.getElementById('live-status').dataset.state !== 'open'", 10*time.Second)
	second, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	obs := newObserver(fx.dir, 100*time.Millisecond, time.Now, time.Local)
	ctx, stop = context.WithCancel(context.Background())
	go func() { served <- obs.serve(ctx, second) }()
	t.Cleanup(func() { stop(); <-served })
	c.waitFor(t, "document.getElementById('live-status').dataset.state === 'open'", 15*time.Second)
	c.eval(t, "document.querySelector('[data-post=\"/api/storage/reclaim\"]').click()", nil)
	status := "(document.getElementById('maintenance-status') || {}).textContent || ''"
	c.waitFor(t, status+" !== ''", 10*time.Second)
	var got string
	c.eval(t, status, &got)
	if want := "Reclaimed available audit free pages."; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
}

// TestLiveAppendDuringSlowFetch: a message.created event that came while
// the open chat was still fetching earlier messages was dropped, so that
// message stayed missing until another one arrived.
func TestLiveAppendDuringSlowFetch(t *testing.T) {
	c := launchBrowser(t)
	fx := newObserveFixture(t)
	now := time.Now().UTC()
	id := fx.group("Burst", "", now.Add(-time.Hour), fixtureMember{"ann", "Ann"}, fixtureMember{"bob", "Bob"})
	first := func(content string) int64 {
		return fx.messages(id, fixtureMessage{Sender: "ann", SenderName: "Ann", Content: content, At: time.Now()})[0]
	}
	first("one")
	obs := newObserver(fx.dir, time.Hour, time.Now, time.Local) // polled by hand below
	obs.pollOnce()
	fetching := make(chan struct{}, 16)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fragments/message" {
			fetching <- struct{}{}
			time.Sleep(time.Second)
		}
		obs.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(slow)
	t.Cleanup(func() { obs.hub.close(); srv.Close() })
	c.open(t, srv.URL+"/?view=chats&group_id="+id, "chats")
	first("two")
	obs.pollOnce()
	select {
	case <-fetching:
	case <-time.After(5 * time.Second):
		t.Fatal("the new message was never fetched")
	}
	third := first("three")
	obs.pollOnce() // while "two" is still being fetched
	c.waitFor(t, fmt.Sprintf("document.querySelector('#message-list .message[data-message-id=\"%d\"]') !== null", third), 5*time.Second)
}

// TestOpenChatCatchesUpAfterADroppedStream: the hub drops a stream that
// lags (a burst of events at scale), and the browser reconnects for a
// snapshot, which replays nothing; the open chat took only new messages
// from it, so a read meanwhile left its side panel stale until reloaded.
func TestOpenChatCatchesUpAfterADroppedStream(t *testing.T) {
	c := launchBrowser(t)
	fx := newObserveFixture(t)
	now := time.Now().UTC()
	id := fx.group("Dropped", "", now.Add(-time.Hour), fixtureMember{"ann", "Ann"}, fixtureMember{"bob", "Bob"})
	fx.messages(id, fixtureMessage{Sender: "ann", SenderName: "Ann", Content: "hello", At: now.Add(-time.Minute)})
	obs := newObserver(fx.dir, time.Hour, time.Now, time.Local) // polled once, at start: the read's event is lost
	c.open(t, "http://"+serveObserver(t, obs)+"/?view=chats&group_id="+id, "chats")
	c.waitFor(t, "document.querySelector('.chat-side .has-unread') !== null", 10*time.Second)
	c.waitFor(t, "document.getElementById('live-status').dataset.state === 'open'", 10*time.Second)
	readAllAsBob(fx, id)
	obs.hub.mu.Lock() // drop every stream, as publish drops a lagging one
	for s := range obs.hub.subs {
		delete(obs.hub.subs, s)
		close(s)
	}
	obs.hub.mu.Unlock()
	c.waitFor(t, "document.querySelector('.chat-side').textContent.includes('0 unread') && !document.querySelector('.chat-side .has-unread')", 10*time.Second)
}

// TestLiveRefreshWaitsForAChartReader: a live refresh replaced the analytics
// panel while the user read a chart, by keyboard or by hovering a mark,
// taking the focus and the tooltip with it; with agents at work, analytics
// refreshes a few times a second, so no tooltip stayed up. A refresh now
// waits, also one whose answer arrives while the user reads, and runs once
// the user is done: focus gone, pointer off the chart or off the page.
func TestLiveRefreshWaitsForAChartReader(t *testing.T) {
	c := launchBrowser(t)
	fx := newObserveFixture(t)
	seedShowcase(fx, time.Now())
	obs := newObserver(fx.dir, time.Hour, time.Now, time.Local) // polled once: the refreshes are the stream's snapshots
	obs.pollOnce()
	fetching := make(chan struct{}, 16)
	var mu sync.Mutex
	held := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fragments/analytics" {
			mu.Lock()
			gate := held
			mu.Unlock()
			fetching <- struct{}{}
			<-gate
		}
		obs.ServeHTTP(w, r)
	}))
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-held:
		default:
			close(held)
		}
	}
	t.Cleanup(func() { release(); obs.hub.close(); srv.Close() })
	awaitFetch := func(t *testing.T, what string) {
		t.Helper()
		select {
		case <-fetching:
		case <-time.After(10 * time.Second):
			t.Fatalf("no analytics refresh %s", what)
		}
	}
	for _, tc := range []struct {
		name, engage, leave string
		away                float64 // where the pointer goes when done
	}{
		{"keyboard focus", "document.querySelector('svg.chart-line').focus()", "document.activeElement.blur(); window.crosstalkTips.hide(true)", 0},
		{"mouse hover", "", "", 1},
		{"mouse leaves the page", "", "", -10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			held = make(chan struct{})
			mu.Unlock()
			c.open(t, srv.URL+"/?view=analytics", "analytics")
			awaitFetch(t, "after the stream opened")
			if tc.engage != "" {
				c.eval(t, tc.engage, nil)
			} else {
				x, y := c.center(t, ".point.mark")
				c.call(t, false, "Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": x, "y": y}, nil)
			}
			c.eval(t, "document.querySelector('svg.chart-line').dataset.read = 'yes'", nil)
			before := tipText(t, c)
			release()
			c.waitFor(t, "performance.getEntriesByType('resource').some(e => e.name.includes('/fragments/analytics') && e.responseEnd > 0)", 10*time.Second)
			c.eval(t, "new Promise(done => setTimeout(() => done(true), 200))", nil) // the answer's handler runs after its body
			var kept bool
			c.eval(t, "document.querySelector('svg.chart-line').dataset.read === 'yes'", &kept)
			if after := tipText(t, c); !kept || !strings.Contains(before, " calls") || after != before {
				t.Errorf("while reading: chart kept %v, tooltip %q then %q; want the chart and its tooltip kept", kept, before, after)
			}
			if tc.leave != "" {
				c.eval(t, tc.leave, nil)
			} else {
				c.call(t, false, "Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": tc.away, "y": tc.away}, nil)
			}
			awaitFetch(t, "once the user was done")
			c.waitFor(t, "document.querySelector('svg.chart-line') && document.querySelector('svg.chart-line').dataset.read === undefined", 10*time.Second)
		})
	}
}
