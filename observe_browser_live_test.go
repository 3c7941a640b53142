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

// TestLiveRefreshKeepsAFocusedChart: a live refresh already fetching when
// the user focused a chart replaced the panel when its answer came, taking
// the chart's keyboard focus and tooltip with it.
func TestLiveRefreshKeepsAFocusedChart(t *testing.T) {
	c := launchBrowser(t)
	fx := newObserveFixture(t)
	seedShowcase(fx, time.Now())
	obs := newObserver(fx.dir, time.Hour, time.Now, time.Local) // polled once: the only refresh is the stream's snapshot
	obs.pollOnce()
	fetching, held := make(chan struct{}, 16), make(chan struct{})
	release := sync.OnceFunc(func() { close(held) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fragments/analytics" {
			fetching <- struct{}{}
			<-held
		}
		obs.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { release(); obs.hub.close(); srv.Close() })
	c.open(t, srv.URL+"/?view=analytics", "analytics")
	select {
	case <-fetching:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's snapshot never refreshed the analytics view")
	}
	c.eval(t, "document.querySelector('svg.chart-line').focus()", nil)
	before := tipText(t, c)
	release()
	c.waitFor(t, "performance.getEntriesByType('resource').some(e => e.name.includes('/fragments/analytics') && e.responseEnd > 0)", 10*time.Second)
	c.eval(t, "new Promise(done => setTimeout(() => done(true), 200))", nil) // the answer's handler runs after its body
	var focused bool
	c.eval(t, "document.activeElement === document.querySelector('svg.chart-line')", &focused)
	if after := tipText(t, c); !focused || !strings.Contains(before, " calls") || after != before {
		t.Errorf("after the refresh: chart focused %v, tooltip %q then %q; want the focused chart and its tooltip kept", focused, before, after)
	}
}
