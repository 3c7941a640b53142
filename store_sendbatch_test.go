package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSendBatchMatchesOneByOne stores the same sends once as one batch and
// once one by one, in two groups with the same members, and compares every
// row. The batch is large enough for the wake events to take several
// INSERTs (maxInsertRows), and its 62 accepted messages take five, a power
// of two each.
func TestSendBatchMatchesOneByOne(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	clockOf(st).fix(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	const members, sends = 50, 63
	var groups [2]string
	for i := range groups {
		meta, err := st.createGroup("m0", "batch", "")
		if err != nil {
			t.Fatal(err)
		}
		groups[i] = meta.groupID
		for m := range members {
			if err := st.joinGroup(meta.groupID, fmt.Sprintf("m%d", m), fmt.Sprintf("M%d", m)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var msgs []outgoing
	for i := range sends {
		m := outgoing{contextID: fmt.Sprintf("m%d", i%members), name: fmt.Sprintf("M%d", i%members), text: fmt.Sprintf("hello %d @m3", i), priority: "urgent"}
		if i%5 == 1 {
			m.priority = "normal"
		}
		if i == 7 {
			m.name = "impostor"
		}
		msgs = append(msgs, m)
	}
	outs, errs, err := st.sendMessages(context.Background(), groups[0], msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		out, err := st.sendMessage(groups[1], m)
		if (err == nil) != (errs[i] == nil) || (err == nil && (out.messageID != outs[i].messageID || !slices.Equal(out.wakeupTargets, outs[i].wakeupTargets))) {
			t.Errorf("send %d: batch got %+v (%v); alone got %+v (%v)", i, outs[i], errs[i], out, err)
		}
	}
	dump := func(g string) []string {
		db := openTestDB(t, st.groupPath(g), "ro")
		var rows []string
		for _, q := range []string{
			"SELECT * FROM messages ORDER BY id",
			"SELECT rowid, * FROM member_unread_messages ORDER BY rowid",
			"SELECT rowid, * FROM group_members ORDER BY rowid",
			"SELECT * FROM wakeup_events ORDER BY id",
			"SELECT * FROM group_message_metrics ORDER BY metric, value",
			"SELECT * FROM group_state",
		} {
			rows = append(rows, q)
			rows = append(rows, queryRows(t, db, q)...)
		}
		return rows
	}
	batch, alone := dump(groups[0]), dump(groups[1])
	if !slices.Equal(batch, alone) {
		for i := range min(len(batch), len(alone)) {
			if batch[i] != alone[i] {
				t.Fatalf("rows differ at %d: batch %q, alone %q", i, batch[i], alone[i])
			}
		}
		t.Fatalf("row counts differ: batch %d, alone %d", len(batch), len(alone))
	}
	var wakes int
	if err := openTestDB(t, st.groupPath(groups[0]), "ro").QueryRow("SELECT COUNT(*) FROM wakeup_events").Scan(&wakes); err != nil || wakes <= maxInsertRows {
		t.Errorf("got %d wake events (%v); want more than %d, to cover split INSERTs", wakes, err, maxInsertRows)
	}
}

// heldSendQueue returns the handle of group id with its writeTurn held, so
// that sends queue behind it, and a function that waits until n sends are
// queued and then lets them go.
func heldSendQueue(t *testing.T, st *store, id string) (h *groupHandle, release func(n int)) {
	t.Helper()
	h, err := st.acquire(id)
	if err != nil {
		t.Fatal(err)
	}
	h.inUse.RUnlock()
	h.writeTurn <- struct{}{}
	return h, func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			h.sendsMu.Lock()
			queued := len(h.sends)
			h.sendsMu.Unlock()
			if queued == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("queued sends: got %d; want %d", queued, n)
			}
		}
		<-h.writeTurn
	}
}

// TestSendQueueShares sends from several goroutines while the group's write
// connection is busy: every send is stored, each with its own result, and
// all of them in one transaction (the search index is written once).
func TestSendQueueShares(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	gid := newTestGroup(t, st, "queue", "a", "b")
	before := ftsSegmentsWritten(t, st, gid)
	_, release := heldSendQueue(t, st, gid)
	const senders = 8
	ids := make([]int64, senders)
	errs := make([]error, senders)
	var wg sync.WaitGroup
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := st.sendMessage(gid, outgoing{contextID: "a", name: "a", text: fmt.Sprintf("queued %d", i), priority: "normal"})
			ids[i], errs[i] = out.messageID, err
		}()
	}
	release(senders)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("send %d: %v", i, err)
		}
	}
	db := openTestDB(t, st.groupPath(gid), "ro")
	for i, id := range ids {
		if got := queryInt(t, db, "SELECT count(*) FROM messages WHERE id = ? AND content = ?", id, fmt.Sprintf("queued %d", i)); got != 1 {
			t.Errorf("send %d: message %d holds another text", i, id)
		}
	}
	if got := ftsSegmentsWritten(t, st, gid) - before; got != 1 {
		t.Errorf("transactions that stored the %d sends: got %d; want 1", senders, got)
	}
}

// TestSendQueueCancelledAndFailing queues, behind a busy write connection,
// a send whose context then ends and a send that fails its statement: the
// first is not stored and reports its context's error; the second fails
// alone, and the sends queued with it are stored.
func TestSendQueueCancelledAndFailing(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	gid := newTestGroup(t, st, "queue", "a", "b")
	db := openTestDB(t, st.groupPath(gid), "rw")
	if _, err := db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.content = 'boom' BEGIN SELECT RAISE(ABORT, 'refused'); END`); err != nil {
		t.Fatal(err)
	}
	_, release := heldSendQueue(t, st, gid)
	ctx, cancel := context.WithCancel(context.Background())
	texts := []string{"one", "cancelled", "boom", "four"}
	errs := make([]error, len(texts))
	var wg sync.WaitGroup
	for i, text := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := context.Background()
			if text == "cancelled" {
				c = ctx
			}
			_, _, errs[i] = st.sendMessages(c, gid, []outgoing{{contextID: "a", name: "a", text: text, priority: "normal"}})
		}()
	}
	cancel()
	release(len(texts) - 1) // the cancelled send leaves the queue at once
	wg.Wait()
	for i, want := range []string{"", context.Canceled.Error(), "refused", ""} {
		if got := fmt.Sprint(errs[i]); (want == "" && errs[i] != nil) || (want != "" && !strings.Contains(got, want)) {
			t.Errorf("send %q: got error %v; want %q", texts[i], errs[i], want)
		}
	}
	if got := queryRows(t, db, "SELECT content FROM messages ORDER BY content"); !slices.Equal(got, []string{"four", "one"}) {
		t.Errorf("stored: got %v; want [four one]", got)
	}
}

// TestHTTPSendGivenUpIsNotStored sends over HTTP to a group whose write lock
// another connection holds, and drops the request before the lock is free:
// the send must not be stored once the lock is released within its busy
// window, as it would be if the store kept retrying for a client that left.
func TestHTTPSendGivenUpIsNotStored(t *testing.T) {
	s, a, gid := newHTTPMember(t, "given up")
	release := holdWriteLock(t, groupFile(s.dir, gid))
	send := func(text string) []byte {
		return a.request("tools/call", map[string]any{"name": "send_message", "arguments": map[string]any{"caller_name": "t",
			"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": text}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if resp, err := a.tryDo(ctx, http.MethodPost, send("given up"), nil); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("send behind a held lock answered %d within 300 ms (%.300s); want it still retrying", resp.StatusCode, body)
	}
	time.Sleep(700 * time.Millisecond) // well inside the send's 3 s window
	release()
	a.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": "after"}, nil)
	got := queryRows(t, openTestDB(t, groupFile(s.dir, gid), "ro"), "SELECT content FROM messages ORDER BY id")
	if !slices.Equal(got, []string{"after"}) {
		t.Errorf("stored: got %q; want only [after]: a send whose client left must not be stored", got)
	}
}

// sendMessage stores one message as sendMessages does, for a test with no
// request of its own to end it.
func (s *store) sendMessage(id string, m outgoing) (sent, error) {
	outs, errs, err := s.sendMessages(context.Background(), id, []outgoing{m})
	if err != nil {
		return sent{}, err
	}
	return outs[0], errs[0]
}

// TestHTTPSendsOnOneSessionBehindAHeldLock fires 20 sends at once on one
// HTTP session while another connection holds the group's write lock. A
// session handles its messages one at a time, yet each send answers within
// its own busy window counted from its arrival, not k windows for the k-th;
// and when half the clients give up and the lock is then released, exactly
// the other half is stored.
func TestHTTPSendsOnOneSessionBehindAHeldLock(t *testing.T) {
	s, a, gid := newHTTPMember(t, "queued")
	args := func(text string) map[string]any {
		return map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": text}
	}
	const n = 20
	bound := busyRetryWindow + 2*time.Second // generous: one window, not n
	t.Run("each answers in its own window", func(t *testing.T) {
		release := holdWriteLock(t, groupFile(s.dir, gid))
		defer release()
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				start := time.Now()
				reply := a.tool("send_message", args(fmt.Sprintf("busy %d", i)))
				if took := time.Since(start); took > bound || !reply.isError || !strings.Contains(reply.text, "busy") {
					t.Errorf("send %d: got %s after %v; want sqlite_busy within %v", i, reply.text, took.Round(time.Millisecond), bound)
				}
			})
		}
		wg.Wait()
	})
	t.Run("given up sends are not stored", func(t *testing.T) {
		release := holdWriteLock(t, groupFile(s.dir, gid))
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				text := fmt.Sprintf("kept %d", i)
				if i%2 == 1 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					req := toolRequest("send_message", args(fmt.Sprintf("dropped %d", i)))
					if resp, err := a.tryDo(ctx, http.MethodPost, a.request(req.Method, req.Params), nil); err == nil {
						io.Copy(io.Discard, resp.Body) // the client leaves while the answer is still coming
						resp.Body.Close()
					}
					return
				}
				if reply := a.tool("send_message", args(text)); reply.isError {
					t.Errorf("%s: got %s; want it stored once the lock is free", text, reply.text)
				}
			})
		}
		time.Sleep(1500 * time.Millisecond)
		release()
		wg.Wait()
		got := queryRows(t, openTestDB(t, groupFile(s.dir, gid), "ro"), "SELECT content FROM messages WHERE content NOT LIKE 'busy %' ORDER BY content")
		var want []string
		for i := 0; i < n; i += 2 {
			want = append(want, fmt.Sprintf("kept %d", i))
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("stored: got %q; want %q", got, want)
		}
	})
}

// TestSendWindowEndingDuringWriteStillCommits stores sends whose busy
// window has ended by the time their transaction reaches COMMIT, as a
// message of hundreds of megabytes does while it is indexed: the window
// bounds the wait for the lock, so they are stored. A send whose caller gave
// up is not.
func TestSendWindowEndingDuringWriteStillCommits(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	gid := newTestGroup(t, st, "window", "a", "b")
	windowEnded, endWindow := context.WithCancelCause(context.Background())
	endWindow(errGroupBusy)
	gaveUp, giveUp := context.WithCancel(context.Background())
	giveUp()
	ended := &queuedSend{ctx: windowEnded, msgs: []outgoing{{contextID: "a", name: "a", text: "window ended", priority: "normal"}}, done: make(chan struct{})}
	left := &queuedSend{ctx: gaveUp, msgs: []outgoing{{contextID: "a", name: "a", text: "gave up", priority: "normal"}}, done: make(chan struct{})}
	err := st.withHandle(gid, func(h *groupHandle) error {
		h.writeTurn <- struct{}{}
		defer func() { <-h.writeTurn }()
		h.storeQueued(st, gid, []*queuedSend{ended, left})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ended.err != nil || len(ended.outs) != 1 {
		t.Errorf("send whose window ended: got %d results, error %v; want 1, nil", len(ended.outs), ended.err)
	}
	if !errors.Is(left.err, context.Canceled) {
		t.Errorf("send whose caller gave up: got error %v; want %v", left.err, context.Canceled)
	}
	db := openTestDB(t, st.groupPath(gid), "ro")
	if got := queryRows(t, db, "SELECT content FROM messages"); !slices.Equal(got, []string{"window ended"}) {
		t.Errorf("stored: got %v; want [window ended]", got)
	}
}

// TestAnsweredSendsReleased queues three 8 MiB sends behind this process's
// own write: once answered, the handle's queue keeps none of their texts.
func TestAnsweredSendsReleased(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	g := newTestGroup(t, st, "mem", "alice", "bob")
	if _, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: "warm", priority: "normal"}); err != nil {
		t.Fatal(err)
	}
	h, err := st.acquire(g)
	if err != nil {
		t.Fatal(err)
	}
	h.inUse.RUnlock()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	h.writeTurn <- struct{}{} // another write of this process is under way
	const n, size = 3, 8 << 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			text := strings.Repeat(string(rune('a'+i))+" ", size/2)
			if _, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: text, priority: "normal"}); err != nil {
				t.Error(err)
			}
		})
	}
	for queued := 0; queued < n; time.Sleep(time.Millisecond) {
		h.sendsMu.Lock()
		queued = len(h.sends)
		h.sendsMu.Unlock()
	}
	<-h.writeTurn
	wg.Wait()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > size {
		t.Errorf("heap grew by %d MiB after %d answered sends of %d MiB; want their texts released", grown>>20, n, size>>20)
	}
}

// TestInsertStatementsBounded sends batches of every size from 1 to 64 to a
// group of 33, each waking the other 32 members: the handle caches a
// statement per size of message and wake-event INSERT, and sizes go in
// powers of two.
func TestInsertStatementsBounded(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	members := []string{"alice"}
	for i := range 32 {
		members = append(members, fmt.Sprintf("m%02d", i))
	}
	g := newTestGroup(t, st, "big", members...)
	for k := 1; k <= 64; k++ {
		msgs := slices.Repeat([]outgoing{{contextID: "alice", name: "alice", text: "hello everyone", priority: "normal"}}, k)
		if _, _, err := st.sendMessages(context.Background(), g, msgs); err != nil {
			t.Fatal(err)
		}
	}
	h, err := st.acquire(g)
	if err != nil {
		t.Fatal(err)
	}
	defer h.inUse.RUnlock()
	for _, head := range []string{"INSERT INTO messages(", "INSERT OR IGNORE INTO wakeup_events"} {
		cached := 0
		for q := range h.stmts {
			if strings.HasPrefix(q, head) {
				cached++
			}
		}
		if cached > 12 {
			t.Errorf("cached statements %s…: got %d; want at most 12", head, cached)
		}
	}
}
