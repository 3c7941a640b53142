package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// subscriberCount reports how many streams are registered; only tests need
// to know.
func (h *eventHub) subscriberCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func TestPollerPublishesChanges(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := seedBasic(fx, now)
	obs := newTestObserver(t, fx.dir, time.Second)
	obs.pollOnce()
	sub := obs.hub.subscribe()
	defer obs.hub.unsubscribe(sub)
	obs.pollOnce()
	if len(sub) != 0 {
		t.Fatalf("an unchanged directory published %d events; want 0", len(sub))
	}
	next := func() string {
		select {
		case ev := <-sub:
			return strings.TrimSpace(string(ev))
		default:
			return ""
		}
	}
	fx.messages(id, fixtureMessage{Sender: "writer", SenderName: "Writer", Content: "a", At: now}, fixtureMessage{Sender: "writer", SenderName: "Writer", Content: "b", At: now})
	obs.pollOnce()
	got := []string{next(), next()}
	want := []string{"event: message.created\ndata: {\"group_id\":\"" + id + "\",\"message_id\":4}", "event: member.changed\ndata: {\"group_id\":\"" + id + "\"}"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q; want %q", got, want)
	}
	fx.wakeup(id, 4, "reader", now, time.Time{})
	fx.exec(id+".sqlite3", func(tx *sql.Tx) error {
		_, err := tx.Exec("UPDATE group_state SET metadata_revision = metadata_revision + 1")
		return err
	})
	fx.calls(fixtureCall{At: now, Tool: "get_users", Duration: 1})
	obs.pollOnce()
	got = []string{next(), next(), next(), next()}
	want = []string{"event: wakeup.changed\ndata: {\"group_id\":\"" + id + "\"}", "event: group.changed\ndata: {\"group_id\":\"" + id + "\"}", "event: tool_call.completed\ndata: {\"tool_call_id\":4}", ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q; want %q", got, want)
	}
	added := fx.group("Newcomer", "", now)
	obs.pollOnce()
	if got, want := next(), "event: group.changed\ndata: {\"group_id\":\""+added+"\"}"; got != want {
		t.Errorf("got %q for a new group; want %q", got, want)
	}
}

func TestEventHub(t *testing.T) {
	hub := &eventHub{subs: map[chan []byte]struct{}{}}
	slow := hub.subscribe()
	fast := hub.subscribe()
	for i := 0; i <= subscriberBuffer; i++ {
		hub.publish("message.created", map[string]int{"message_id": i})
		<-fast
	}
	if n := hub.subscriberCount(); n != 1 {
		t.Errorf("got %d subscribers after overflow; want 1 (the slow one dropped)", n)
	}
	drained := 0
	for range slow {
		drained++
	}
	if drained != subscriberBuffer {
		t.Errorf("slow subscriber got %d queued events then close; want %d", drained, subscriberBuffer)
	}
	hub.close()
	if _, ok := <-fast; ok {
		t.Error("close left a subscriber open")
	}
	if _, ok := <-hub.subscribe(); ok {
		t.Error("subscribing after close returned an open stream")
	}
}

// serveObserver serves obs on a free loopback port until the test ends and
// returns its address; a serve error fails the test.
func serveObserver(t testing.TB, obs *observer) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- obs.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestEventsStream(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := seedBasic(fx, now)
	addr := serveObserver(t, newTestObserver(t, fx.dir, 50*time.Millisecond))
	resp, err := http.Get("http://" + addr + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("got Content-Type %q; want text/event-stream", ct)
	}
	r := bufio.NewReader(resp.Body)
	readEvent := func() (string, string) {
		var name, data string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("read stream: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && name != "":
				return name, data
			}
		}
	}
	name, data := readEvent()
	if want := `{"groups":{"` + id + `":{"latest_message_id":2,"member_fingerprint":"2","wakeup_fingerprint":"1"}},"latest_audit_id":3}`; name != "snapshot" || data != want {
		t.Errorf("got %s %s; want snapshot %s", name, data, want)
	}
	fx.messages(id, fixtureMessage{Sender: "reader", SenderName: "Reader", Content: "hello", At: now})
	name, data = readEvent()
	if want := `{"group_id":"` + id + `","message_id":3}`; name != "message.created" || data != want {
		t.Errorf("got %s %s; want message.created %s", name, data, want)
	}
}

// TestEventsHeadAnswersAtOnce asks for /events with HEAD, which has no body
// to stream: it gets the stream's headers, its answer ends, and the same
// keep-alive connection then serves the next request.
func TestEventsHeadAnswersAtOnce(t *testing.T) {
	fx := newObserveFixture(t)
	obs := newTestObserver(t, fx.dir, 50*time.Millisecond)
	addr := serveObserver(t, obs)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	resp, err := client.Head("http://" + addr + "/events")
	if err != nil {
		t.Fatalf("HEAD /events: %v", err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Errorf("got %d %q; want 200 text/event-stream", resp.StatusCode, ct)
	}
	if resp, err = client.Get("http://" + addr + "/"); err != nil {
		t.Fatalf("GET / on the HEAD's connection: %v", err)
	}
	resp.Body.Close()
	if n := obs.hub.subscriberCount(); n != 0 {
		t.Errorf("got %d event subscribers after HEAD; want 0", n)
	}
}

// TestPollerPastAnUnreadableAuditFile starts the dashboard on a directory
// whose audit file is not a database: the first poll still ends the
// baseline, so a group that appears afterwards is announced.
func TestPollerPastAnUnreadableAuditFile(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	fx.group("First", "", now)
	second := fx.group("Second", "", now)
	aside := filepath.Join(t.TempDir(), "second.sqlite3")
	if err := os.Rename(groupFile(fx.dir, second), aside); err != nil {
		t.Fatal(err)
	}
	catalog := filepath.Join(fx.dir, catalogFileName)
	os.Remove(catalog + "-wal")
	os.Remove(catalog + "-shm")
	if err := os.WriteFile(catalog, bytes.Repeat([]byte("not a database "), 512), 0o644); err != nil {
		t.Fatal(err)
	}
	obs := newTestObserver(t, fx.dir, time.Second)
	obs.pollOnce() // the baseline
	sub := obs.hub.subscribe()
	defer obs.hub.unsubscribe(sub)
	if err := os.Rename(aside, groupFile(fx.dir, second)); err != nil {
		t.Fatal(err)
	}
	obs.pollOnce()
	select {
	case ev := <-sub:
		if !strings.Contains(string(ev), "group.changed") {
			t.Errorf("got %q; want group.changed", ev)
		}
	default:
		t.Error("no event for a group that appeared after the baseline")
	}
}

// TestPollerAnnouncesDeletedAuditHistory: the poller announced a new audit
// row but not the end of the last one, so after "Delete audit history"
// every other open Overview and Tool analytics kept showing the deleted
// calls until an agent made another.
func TestPollerAnnouncesDeletedAuditHistory(t *testing.T) {
	fx := newObserveFixture(t)
	seedBasic(fx, time.Now())
	obs := newTestObserver(t, fx.dir, time.Second)
	obs.pollOnce()
	sub := obs.hub.subscribe()
	defer obs.hub.unsubscribe(sub)
	fx.exec(catalogFileName, func(tx *sql.Tx) error {
		_, err := tx.Exec("DELETE FROM tool_calls")
		return err
	})
	obs.pollOnce()
	select {
	case ev := <-sub:
		if !strings.Contains(string(ev), "event: tool_call.completed") {
			t.Errorf("got %q; want tool_call.completed", ev)
		}
	default:
		t.Error("got no event for deleted audit history; want tool_call.completed")
	}
}
