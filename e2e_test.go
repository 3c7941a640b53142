package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// wakeupSnapshot is the resources/read body of a wakeup URI.
type wakeupSnapshot struct {
	GroupID   string `json:"group_id"`
	ContextID string `json:"context_id"`
	Wakeups   []struct {
		EventID        int64   `json:"event_id"`
		MessageID      int64   `json:"message_id"`
		Relevance      string  `json:"relevance"`
		Priority       string  `json:"priority"`
		AcknowledgedAt *string `json:"acknowledged_at"`
		LastNotifiedAt *string `json:"last_notified_at"`
	} `json:"wakeups"`
}

func (p *mcpProcess) readWakeups(uri string) wakeupSnapshot {
	p.tb.Helper()
	var r struct {
		Contents []struct {
			URI  string `json:"uri"`
			Text string `json:"text"`
		} `json:"contents"`
	}
	p.result("resources/read", map[string]any{"uri": uri}, &r)
	if len(r.Contents) != 1 {
		p.tb.Fatalf("resources/read %s: got %d contents; want 1", uri, len(r.Contents))
	}
	var snap wakeupSnapshot
	if err := json.Unmarshal([]byte(r.Contents[0].Text), &snap); err != nil {
		p.tb.Fatalf("resources/read %s: decode %q: %v", uri, r.Contents[0].Text, err)
	}
	return snap
}

// messagesReply is the result of the message-reading tools.
type messagesReply struct {
	Messages []struct {
		ID        int64  `json:"id"`
		ContextID string `json:"context_id"`
		Message   string `json:"message"`
	} `json:"messages"`
}

const pollEnv = "CROSSTALK_POLL_INTERVAL_SECONDS=0.1"

// specRetryWindow is how long SPEC.md says a busy operation is retried. It
// is written out, not taken from the store, so a changed window fails.
const specRetryWindow = 3 * time.Second

// TestE2ESubscriptionSeesOtherProcess checks that a write by one server
// process wakes a subscriber in another: the group signal and the mentioned
// member's wakeup arrive, the wake event is recorded as notified (so it is
// not repeated) and is acknowledged by reading.
func TestE2ESubscriptionSeesOtherProcess(t *testing.T) {
	dir := t.TempDir()
	a := startSession(t, "A", dir, pollEnv)
	b := startSession(t, "B", dir, pollEnv)

	gid := b.createGroup("ctx-b")
	b.join(gid, "ctx-b", "bob")
	wakeURI := a.join(gid, "ctx-a", "alice")
	if want := "crosstalk://groups/" + gid + "/wakeups/ctx-a"; wakeURI != want {
		t.Fatalf("wakeup_resource_uri: got %q; want %q", wakeURI, want)
	}
	groupURI := "crosstalk://groups/" + gid + "/messages"
	a.result("resources/subscribe", map[string]any{"uri": groupURI}, nil)

	var sent struct {
		MessageID     int64    `json:"message_id"`
		RoutingReason string   `json:"routing_reason"`
		WakeupTargets []string `json:"wakeup_targets"`
	}
	b.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-b", "name": "bob",
		"message": "@ctx-a please review", "priority": "high"}, &sent)
	if sent.RoutingReason != "mentioned" || len(sent.WakeupTargets) != 1 || sent.WakeupTargets[0] != "ctx-a" {
		t.Fatalf("send_message routing: got %q %v; want mentioned [ctx-a]", sent.RoutingReason, sent.WakeupTargets)
	}

	a.waitNotification(groupURI, func(n notification) bool { return n.Relevance == "group_change" })
	wake := a.waitNotification(wakeURI, func(notification) bool { return true })
	if wake.Priority != "high" || wake.Relevance != "mentioned" {
		t.Errorf("wakeup notification: got priority %q relevance %q; want high mentioned", wake.Priority, wake.Relevance)
	}
	waitUntil(t, "last_notified_at on the wake event", func() bool {
		snap := a.readWakeups(wakeURI)
		return len(snap.Wakeups) == 1 && snap.Wakeups[0].LastNotifiedAt != nil
	})

	var unread messagesReply
	a.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}, &unread)
	if len(unread.Messages) != 1 || unread.Messages[0].ID != sent.MessageID {
		t.Fatalf("get_unread_messages: got %+v; want message %d only", unread.Messages, sent.MessageID)
	}
	snap := a.readWakeups(wakeURI)
	if len(snap.Wakeups) != 1 {
		t.Fatalf("wake events after reading: got %d; want 1", len(snap.Wakeups))
	}
	ev := snap.Wakeups[0]
	if ev.AcknowledgedAt == nil || ev.MessageID != sent.MessageID || ev.Relevance != "mentioned" || ev.Priority != "high" {
		t.Errorf("wake event after reading: got %+v (acknowledged_at %v); want acknowledged, message %d, mentioned, high",
			ev, ev.AcknowledgedAt, sent.MessageID)
	}

	// Ten poll intervals: an unrecorded or unacknowledged event would be
	// notified again on the next poll.
	time.Sleep(time.Second)
	if got := a.notifications(wakeURI); len(got) != 1 {
		t.Errorf("wakeup notifications after acknowledging: got %+v; want exactly one", got)
	}
	if got := a.notifications(groupURI); len(got) != 1 {
		t.Errorf("group notifications: got %+v; want exactly one for one message", got)
	}
	if got := b.notifications(wakeupURI(gid, "ctx-b")); len(got) != 0 {
		t.Errorf("sender's wakeup notifications: got %+v; want none", got)
	}
}

// openGroupDB opens a group database file from the test process with the
// store's own DSN, for checks and for holding locks against the server.
func openGroupDB(tb testing.TB, dir, gid string) *sql.DB {
	tb.Helper()
	return openTestDB(tb, filepath.Join(dir, gid+".sqlite3"), "rw")
}

// TestE2EConcurrentSendersLoseNothing has 8 processes, each its own member,
// send 100 pipelined messages each into one group at once, then checks that
// every message, unread row and counter is there and the files are sound.
func TestE2EConcurrentSendersLoseNothing(t *testing.T) {
	const processes, perProcess = 8, 100
	dir := t.TempDir()
	procs := make([]*mcpProcess, processes)
	for i := range procs {
		procs[i] = startSession(t, fmt.Sprintf("P%d", i), dir)
	}
	gid := procs[0].createGroup("ctx-0")
	for i, p := range procs {
		p.join(gid, fmt.Sprintf("ctx-%d", i), fmt.Sprintf("member-%d", i))
	}

	start := make(chan struct{})
	type batch struct {
		chans []chan *rpcMessage
		err   error
	}
	batches := make([]chan batch, processes)
	for i, p := range procs {
		reqs := make([]rpcRequest, perProcess)
		for j := range reqs {
			reqs[j] = toolRequest("send_message", map[string]any{"group_id": gid, "context_id": fmt.Sprintf("ctx-%d", i),
				"name": fmt.Sprintf("member-%d", i), "message": fmt.Sprintf("message %d from process %d", j, i)})
		}
		batches[i] = make(chan batch, 1)
		go func(p *mcpProcess, out chan<- batch) {
			<-start
			chans, err := p.send(reqs...)
			out <- batch{chans, err}
		}(p, batches[i])
	}
	close(start)

	ids := map[int64]bool{}
	for i, p := range procs {
		b := <-batches[i]
		if b.err != nil {
			t.Fatalf("%s: write batch: %v", p.name, b.err)
		}
		succeeded, lastID := 0, int64(0)
		for j, ch := range b.chans {
			msg, err := p.await(ch, 2*e2eTimeout)
			if err != nil {
				t.Fatalf("%s send %d: %v", p.name, j, err)
			}
			reply, err := parseToolReply(msg)
			if err != nil || reply.isError {
				t.Errorf("%s send %d: got %q (%v); want success", p.name, j, reply.text, err)
				continue
			}
			var r struct {
				MessageID int64 `json:"message_id"`
			}
			if err := json.Unmarshal([]byte(reply.text), &r); err != nil || ids[r.MessageID] {
				t.Errorf("%s send %d: got message_id in %q (duplicate %v); want a new id", p.name, j, reply.text, ids[r.MessageID])
			}
			// One process's sends are stored in the order it wrote them,
			// whether or not they were committed together.
			if r.MessageID <= lastID {
				t.Errorf("%s send %d: got message_id %d after %d; want ids in request order", p.name, j, r.MessageID, lastID)
			}
			ids[r.MessageID], lastID = true, r.MessageID
			succeeded++
		}
		if succeeded != perProcess {
			t.Errorf("%s: got %d successful sends; want %d", p.name, succeeded, perProcess)
		}
	}
	for _, p := range procs {
		if code, err := p.close(); err != nil || code != 0 {
			t.Errorf("%s exit: got %d (%v); want 0; stderr: %s", p.name, code, err, p.stderr.String())
		}
	}

	db := openGroupDB(t, dir, gid)
	total := int64(processes * perProcess)
	if got := queryInt(t, db, "SELECT COUNT(*) FROM messages"); got != total {
		t.Errorf("messages: got %d; want %d", got, total)
	}
	for i := range processes {
		ctx := fmt.Sprintf("ctx-%d", i)
		othersSent := total - perProcess
		if got := queryInt(t, db, "SELECT COUNT(*) FROM messages WHERE sender_context_id = ?", ctx); got != perProcess {
			t.Errorf("%s sent: got %d; want %d", ctx, got, perProcess)
		}
		if got := queryInt(t, db, "SELECT unread_count FROM group_members WHERE context_id = ?", ctx); got != othersSent {
			t.Errorf("%s unread_count: got %d; want %d", ctx, got, othersSent)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM member_unread_messages u JOIN messages m ON m.id = u.message_id "+
			"WHERE u.context_id = ? AND m.sender_context_id != ?", ctx, ctx); got != othersSent {
			t.Errorf("%s unread rows for others' messages: got %d; want %d", ctx, got, othersSent)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM member_unread_messages WHERE context_id = ?", ctx); got != othersSent {
			t.Errorf("%s unread rows: got %d; want %d", ctx, got, othersSent)
		}
		if got, want := queryInt(t, db, "SELECT latest_message_id FROM group_members WHERE context_id = ?", ctx),
			queryInt(t, db, "SELECT MAX(id) FROM messages WHERE sender_context_id = ?", ctx); got != want {
			t.Errorf("%s latest_message_id: got %d; want %d", ctx, got, want)
		}
	}
	if got := queryInt(t, db, "SELECT message_revision FROM group_state"); got != total {
		t.Errorf("message_revision: got %d; want %d", got, total)
	}
	var check string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Errorf("PRAGMA integrity_check: got %q (%v); want ok", check, err)
	}
	if _, err := db.Exec("INSERT INTO message_search(message_search) VALUES('integrity-check')"); err != nil {
		t.Errorf("FTS integrity-check: got %v; want nil", err)
	}
}

// TestE2EDeletedGroupStaysDeleted checks that a group deleted by its creator
// in one process is not found, and not recreated, by another process that
// still holds a cached handle and subscriptions on it.
func TestE2EDeletedGroupStaysDeleted(t *testing.T) {
	dir := t.TempDir()
	a := startSession(t, "A", dir, pollEnv)
	b := startSession(t, "B", dir, pollEnv)
	gid := b.createGroup("ctx-b")
	a.join(gid, "ctx-a", "alice")
	groupURI := "crosstalk://groups/" + gid + "/messages"
	a.result("resources/subscribe", map[string]any{"uri": groupURI}, nil)
	a.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": "hello"}, nil)
	a.ok("get_users", map[string]any{"group_id": gid}, nil)
	a.waitNotification(groupURI, func(n notification) bool { return n.Relevance == "group_change" })

	b.ok("delete_group", map[string]any{"group_id": gid, "context_id": "ctx-b"}, nil)

	notFound := "Group does not exist: " + gid + ". Create it first or check the group_id."
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"get_users", map[string]any{"group_id": gid}},
		{"send_message", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": "still there?"}},
		{"join_group", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			reply := a.tool(tc.tool, tc.args)
			if !reply.isError || reply.errorText() != notFound {
				t.Errorf("got %s (isError %v); want error %q", reply.text, reply.isError, notFound)
			}
		})
	}
	a.waitNotification(groupURI, func(n notification) bool { return n.Relevance == "deleted" })

	var list struct {
		Groups []struct {
			GroupID string `json:"group_id"`
		} `json:"groups"`
	}
	a.ok("list_groups", nil, &list)
	for _, g := range list.Groups {
		if g.GroupID == gid {
			t.Errorf("list_groups: got %s listed; want it gone", gid)
		}
	}
	// Several poll intervals, so that a poller reopening the file would
	// have done so.
	time.Sleep(time.Second)
	for _, suffix := range []string{".sqlite3", ".sqlite3-wal", ".sqlite3-shm"} {
		if _, err := os.Stat(filepath.Join(dir, gid+suffix)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat %s%s after delete: got %v; want not exist", gid, suffix, err)
		}
	}
}

// TestE2EBusyGroup holds a group's write lock from the test process while
// the server sends a message: a short hold is retried into success, one
// beyond the 3 s retry window is answered with the busy error.
func TestE2EBusyGroup(t *testing.T) {
	dir := t.TempDir()
	p := startSession(t, "P", dir)
	gid := p.createGroup("ctx-p")
	p.join(gid, "ctx-p", "pat")
	db := openGroupDB(t, dir, gid)
	db.SetMaxOpenConns(1)
	send := func(text string) (chan *rpcMessage, time.Time) {
		chans, err := p.send(toolRequest("send_message", map[string]any{"group_id": gid, "context_id": "ctx-p", "name": "pat", "message": text}))
		if err != nil {
			t.Fatalf("write send_message: %v", err)
		}
		return chans[0], time.Now()
	}
	t.Run("200ms", func(t *testing.T) {
		release := holdWriteLock(t, filepath.Join(dir, gid+".sqlite3"))
		ch, _ := send("after a short lock")
		time.Sleep(200 * time.Millisecond)
		select {
		case msg := <-ch:
			t.Fatalf("got answer %.200s while the group was locked; want none until it is released", msg.Result)
		default:
		}
		release()
		msg, err := p.await(ch, e2eTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if reply, err := parseToolReply(msg); err != nil || reply.isError {
			t.Fatalf("send_message after a 200 ms lock: got %q (%v); want success", reply.text, err)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM messages WHERE content = 'after a short lock'"); got != 1 {
			t.Errorf("stored messages: got %d; want 1", got)
		}
	})

	t.Run("beyond retry window", func(t *testing.T) {
		release := holdWriteLock(t, filepath.Join(dir, gid+".sqlite3"))
		ch, sentAt := send("after a long lock")
		// The lock is released 5 s after the retry window at the latest:
		// a server that retried much longer would then succeed.
		msg, err := p.await(ch, specRetryWindow+5*time.Second)
		elapsed := time.Since(sentAt)
		release()
		if err != nil {
			msg, err = p.await(ch, e2eTimeout)
		}
		if err != nil {
			t.Fatal(err)
		}
		reply, err := parseToolReply(msg)
		want := "Cannot complete operation because the group is busy. Please try again in a moment."
		if err != nil || !reply.isError || reply.errorText() != want {
			t.Fatalf("send_message under a held lock: got %q (%v); want error %q", reply.text, err, want)
		}
		if elapsed < specRetryWindow {
			t.Errorf("busy answer after %v; want it only after the %v retry window", elapsed, specRetryWindow)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM messages WHERE content = 'after a long lock'"); got != 0 {
			t.Errorf("stored messages of the failed send: got %d; want 0", got)
		}
		p.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-p", "name": "pat", "message": "after release"}, nil)
	})
}

// bigMessage returns a message of exactly n bytes of valid UTF-8 that mixes
// ASCII, JSON-escaped and multi-byte characters, so that a round trip
// exercises every escaping path.
func bigMessage(n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := 0; ; i++ {
		piece := fmt.Sprintf("line %d: \"quoted\" \\ tab\t é ☃ 🙂 <&>\n", i)
		if b.Len()+len(piece) > n {
			break
		}
		b.WriteString(piece)
	}
	b.WriteString(strings.Repeat("x", n-b.Len()))
	return b.String()
}

// TestE2ELargeMessage sends a 16 MiB message as one JSON-RPC line and reads
// it back unchanged.
func TestE2ELargeMessage(t *testing.T) {
	dir := t.TempDir()
	p := startSession(t, "P", dir)
	gid := p.createGroup("ctx-p")
	p.join(gid, "ctx-p", "pat")
	text := bigMessage(16 << 20)
	if len(text) != 16<<20 || !utf8.ValidString(text) {
		t.Fatalf("test message: got %d bytes (valid UTF-8 %v); want %d", len(text), utf8.ValidString(text), 16<<20)
	}
	var sent struct {
		MessageID int64 `json:"message_id"`
	}
	p.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-p", "name": "pat", "message": text}, &sent)
	var all messagesReply
	p.ok("get_all_messages", map[string]any{"group_id": gid, "context_id": "ctx-p", "name": "pat"}, &all)
	if len(all.Messages) != 1 || all.Messages[0].ID != sent.MessageID {
		t.Fatalf("get_all_messages: got %d messages; want message %d only", len(all.Messages), sent.MessageID)
	}
	if got := all.Messages[0].Message; got != text {
		i := 0
		for i < len(got) && i < len(text) && got[i] == text[i] {
			i++
		}
		t.Errorf("message: got %d bytes differing at byte %d; want the %d bytes sent", len(got), i, len(text))
	}
}
