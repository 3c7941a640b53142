package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// combineGroup is a group with members a, b and c in a fresh directory,
// written by two stores, as by two server processes.
func combineGroup(t *testing.T) (leader, follower *store, id string) {
	t.Helper()
	if !combineAvailable {
		t.Skip("no rendezvous for combined sends on this platform")
	}
	dir := t.TempDir()
	leader, follower = newTestStore(t, dir), newTestStore(t, dir)
	return leader, follower, newTestGroup(t, leader, "combine", "a", "b", "c")
}

// sendsOf is one message from each of senders, with texts that name the
// test so that rows can be counted by text.
func sendsOf(tag string, senders ...string) []outgoing {
	var msgs []outgoing
	for i, who := range senders {
		msgs = append(msgs, outgoing{contextID: who, name: who, text: fmt.Sprintf("%s %d from %s", tag, i, who), priority: "normal"})
	}
	return msgs
}

// storedTexts counts the stored messages by text.
func storedTexts(t *testing.T, st *store, id string) map[string]int {
	t.Helper()
	rows, err := openTestDB(t, st.groupPath(id), "ro").Query("SELECT content FROM messages")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := map[string]int{}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		n[s]++
	}
	return n
}

// leaderOf stamps msgs for a combined send from st and binds its rendezvous,
// as a sender that found no leader does.
func leaderOf(t *testing.T, st *store, id string, msgs []outgoing) (*combineSend, *combineListener) {
	t.Helper()
	c := st.combining(id, msgs)
	ln := listenCombiner(c.name)
	if ln == nil {
		t.Fatal("rendezvous already bound")
	}
	return c, ln
}

// dialFollower connects to ln as a follower would and writes the request
// for msgs, stamped by st.
func dialFollower(t *testing.T, st *store, id string, msgs []outgoing) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := st.combining(id, msgs)
	conn := dialCombiner(c.name)
	if conn == nil {
		t.Fatal("no leader to follow")
	}
	req := combineRequest{GroupID: id}
	for _, m := range c.msgs {
		req.Messages = append(req.Messages, combineMessage{ContextID: m.contextID, Name: m.name, Text: m.text, Priority: m.priority, At: m.at})
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// TestLeaderStoresWaitingFollowers has two followers wait on a leader's
// rendezvous before it writes: the leader's one transaction stores its own
// message first and then theirs, in order, and answers each follower its
// results.
func TestLeaderStoresWaitingFollowers(t *testing.T) {
	leader, follower, id := combineGroup(t)
	c, ln := leaderOf(t, leader, id, sendsOf("own", "a"))
	conn1, r1 := dialFollower(t, follower, id, sendsOf("first", "b", "c"))
	conn2, r2 := dialFollower(t, follower, id, sendsOf("second", "c"))
	defer conn1.Close()
	defer conn2.Close()
	outs, errs, err := c.lead(ln)
	if err != nil || errs[0] != nil {
		t.Fatalf("lead: %v %v", err, errs)
	}
	if outs[0].messageID != 1 {
		t.Errorf("leader's message got id %d; want 1", outs[0].messageID)
	}
	for _, f := range []struct {
		r   *bufio.Reader
		ids []int64
	}{{r1, []int64{2, 3}}, {r2, []int64{4}}} {
		reply := readReply(t, f.r)
		if len(reply.Results) != len(f.ids) {
			t.Fatalf("got %+v; want %d results", reply, len(f.ids))
		}
		for i, res := range reply.Results {
			if res.MessageID != f.ids[i] || res.Error != "" {
				t.Errorf("result %d: got %+v; want message %d", i, res, f.ids[i])
			}
		}
	}
	got := storedTexts(t, leader, id)
	for _, text := range []string{"own 0 from a", "first 0 from b", "first 1 from c", "second 0 from c"} {
		if got[text] != 1 {
			t.Errorf("%q stored %d times; want once", text, got[text])
		}
	}
	waitReleased(t, c.name)
}

// waitReleased waits for the leader holding name to give it up, which one
// that served followers does once nobody has come for combineHold.
func waitReleased(t testing.TB, name string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if ln := listenCombiner(name); ln != nil {
			ln.close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader kept the rendezvous for 10 s with nobody coming")
		}
	}
}

// readReply reads a leader's answer line.
func readReply(t *testing.T, r *bufio.Reader) combineReply {
	t.Helper()
	var reply combineReply
	line, err := r.ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &reply) != nil {
		t.Fatalf("read answer: %q %v", line, err)
	}
	return reply
}

// TestLeaderKeepsLeading has more followers wait than one round takes. The
// leader answers its own call after the first round and serves the rest in
// the background; closing its store ends that, and whoever was still
// waiting is refused rather than left without an answer.
func TestLeaderKeepsLeading(t *testing.T) {
	for _, closeAtOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("close at once %v", closeAtOnce), func(t *testing.T) {
			leader, follower, id := combineGroup(t)
			c, ln := leaderOf(t, leader, id, sendsOf("own", "a"))
			readers := make([]*bufio.Reader, combineMaxFollowers+1)
			for i := range readers {
				conn, r := dialFollower(t, follower, id, sendsOf(fmt.Sprintf("follower %d", i), "b"))
				defer conn.Close()
				readers[i] = r
			}
			if _, errs, err := c.lead(ln); err != nil || errs[0] != nil {
				t.Fatalf("lead: %v %v", err, errs)
			}
			if closeAtOnce {
				leader.close()
				if ln := listenCombiner(c.name); ln == nil {
					t.Fatal("closed store still holds the rendezvous")
				} else {
					ln.close()
				}
			}
			stored := storedTexts(t, leader, id)
			for i, r := range readers {
				reply := readReply(t, r)
				text := fmt.Sprintf("follower %d 0 from b", i)
				switch {
				case len(reply.Results) == 1 && reply.Results[0].Error == "":
					if !closeAtOnce {
						stored = storedTexts(t, leader, id)
					}
					if stored[text] != 1 {
						t.Errorf("follower %d answered results, and its message is stored %d times", i, stored[text])
					}
				case reply.Refused && (closeAtOnce && i == combineMaxFollowers):
					if stored[text] != 0 {
						t.Errorf("follower %d refused, and its message is stored %d times", i, stored[text])
					}
				default:
					t.Errorf("follower %d: got %+v; want its result", i, reply)
				}
			}
			if !closeAtOnce {
				waitReleased(t, c.name)
			}
		})
	}
}

// TestLeaderRefusesBadRequests checks that a leader stores nothing of a
// request it cannot take (malformed, for another group, with a value the
// tool would refuse, not sent in time, or from a follower that left) and
// answers it refused, while its own message is stored.
func TestLeaderRefusesBadRequests(t *testing.T) {
	for _, tt := range []struct {
		name, line string
		leave      bool
	}{
		{"not JSON", "{\"group_id\": \n", false},
		{"silent", "", false},
		{"other group", `{"group_id": "grp_00000000000000000000000000000000", "messages": [{"context_id": "b", "name": "b", "text": "bad", "priority": "normal", "at": "2026-12-01T00:00:00+00:00"}]}` + "\n", false},
		{"bad priority", `{"group_id": "%s", "messages": [{"context_id": "b", "name": "b", "text": "bad", "priority": "loud", "at": "2026-12-01T00:00:00+00:00"}]}` + "\n", false},
		{"bad timestamp", `{"group_id": "%s", "messages": [{"context_id": "b", "name": "b", "text": "bad", "priority": "normal", "at": "yesterday"}]}` + "\n", false},
		{"invalid UTF-8", "{\"group_id\": \"%s\", \"messages\": [{\"context_id\": \"b\", \"name\": \"b\", \"text\": \"bad \xff\", \"priority\": \"normal\", \"at\": \"2026-12-01T00:00:00+00:00\"}]}\n", false},
		{"no messages", `{"group_id": "%s", "messages": []}` + "\n", false},
		{"follower left", `{"group_id": "%s", "messages": [{"context_id": "b", "name": "b", "text": "bad", "priority": "normal", "at": "2026-12-01T00:00:00+00:00"}]}` + "\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leader, _, id := combineGroup(t)
			c := leader.combining(id, sendsOf("own", "a"))
			ln := listenCombiner(c.name)
			conn := dialCombiner(c.name)
			if ln == nil || conn == nil {
				t.Fatal("no rendezvous")
			}
			defer conn.Close()
			line := tt.line
			if strings.Contains(line, "%s") {
				line = fmt.Sprintf(line, id)
			}
			conn.Write([]byte(line))
			if tt.leave {
				conn.Close()
			}
			if _, errs, err := c.lead(ln); err != nil || errs[0] != nil {
				t.Fatalf("lead: %v %v", err, errs)
			}
			if !tt.leave {
				if answer, _ := bufio.NewReader(conn).ReadBytes('\n'); string(answer) != "{\"refused\": true}\n" {
					t.Errorf("got answer %q; want a refusal", answer)
				}
			}
			got := storedTexts(t, leader, id)
			if got["bad"] != 0 || got["bad \xff"] != 0 || got["own 0 from a"] != 1 {
				t.Errorf("stored %v; want only the leader's message", got)
			}
		})
	}
}

// TestFollowerOutcomes runs a follower against a leader played by the test,
// which answers in each of the ways a leader can end, and checks that each
// message is stored exactly once and answered with its row's id.
func TestFollowerOutcomes(t *testing.T) {
	for _, tt := range []struct {
		name string
		// lead plays the leader on conn, given the request, with st writing
		// to the same group, and reports whether it stored the request.
		lead func(t *testing.T, conn *followerConn, st *store, req combineRequest) bool
	}{
		{"results", func(t *testing.T, conn *followerConn, st *store, req combineRequest) bool {
			res := combineReply{}
			for _, o := range storeRequest(t, st, req) {
				res.Results = append(res.Results, combineResult{MessageID: o.messageID, Priority: o.priority, RoutingReason: o.routingReason})
			}
			line, _ := json.Marshal(res)
			conn.Write(append(line, '\n'))
			return true
		}},
		{"refused", func(t *testing.T, conn *followerConn, st *store, req combineRequest) bool {
			conn.Write([]byte("{\"refused\": true}\n"))
			return false
		}},
		{"died before storing", func(*testing.T, *followerConn, *store, combineRequest) bool { return false }},
		{"died after storing", func(t *testing.T, conn *followerConn, st *store, req combineRequest) bool {
			storeRequest(t, st, req)
			return true
		}},
		{"garbage", func(t *testing.T, conn *followerConn, st *store, req combineRequest) bool {
			storeRequest(t, st, req)
			conn.Write([]byte("not json\n"))
			return true
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leader, follower, id := combineGroup(t)
			msgs := append(sendsOf("twice", "b"), sendsOf("twice", "b")...) // equal texts, told apart by position
			c, ln := leaderOf(t, follower, id, msgs)
			stored := make(chan bool, 1)
			go func() {
				conn := acceptWaiting(ln)
				ln.close() // the follower's next try finds no leader and leads
				req, err := readRequest(conn)
				if err != nil {
					t.Error(err)
				}
				stored <- tt.lead(t, conn, leader, req)
				conn.close()
			}()
			outs, errs, err := c.send()
			if err != nil || errs[0] != nil || errs[1] != nil {
				t.Fatalf("send: %v %v", err, errs)
			}
			if outs[0].messageID == outs[1].messageID || outs[0].messageID == 0 {
				t.Errorf("got ids %d and %d; want two messages", outs[0].messageID, outs[1].messageID)
			}
			<-stored
			if got := storedTexts(t, leader, id)["twice 0 from b"]; got != 2 {
				t.Errorf("stored %d times; want twice, once per send", got)
			}
			var n int
			openTestDB(t, leader.groupPath(id), "ro").QueryRow("SELECT COUNT(*) FROM messages WHERE id IN (?, ?)", outs[0].messageID, outs[1].messageID).Scan(&n)
			if n != 2 {
				t.Errorf("answered ids %d and %d match %d rows; want 2", outs[0].messageID, outs[1].messageID, n)
			}
		})
	}
}

// TestFollowerSkipsStalledLeader has a leader that takes no request at
// all, as one whose process was stopped: the kernel queues the follower's
// connection, and nobody answers. The follower gives up after
// combineReplyWait, writes its message itself, and sends the plain way
// while the stalled leader still holds the name.
func TestFollowerSkipsStalledLeader(t *testing.T) {
	_, follower, id := combineGroup(t)
	c, ln := leaderOf(t, follower, id, sendsOf("stalled", "b"))
	defer ln.close()
	outs, errs, err := c.send()
	if err != nil || errs[0] != nil || outs[0].messageID == 0 {
		t.Fatalf("send beside a stalled leader: %v %v %+v", err, errs, outs)
	}
	if follower.combining(id, sendsOf("next", "b")) != nil {
		t.Error("the next send would follow the stalled leader again; want the plain way")
	}
	if _, _, err := follower.sendMessages(id, sendsOf("next", "b")); err != nil {
		t.Fatal(err)
	}
	got := storedTexts(t, follower, id)
	if got["stalled 0 from b"] != 1 || got["next 0 from b"] != 1 {
		t.Errorf("stored %v; want each message once", got)
	}
}

// acceptWaiting waits for a connection on ln.
func acceptWaiting(ln *combineListener) *followerConn {
	for {
		if conn := ln.accept(); conn != nil {
			conn.deadline = time.Now().Add(5 * time.Second)
			return conn
		}
	}
}

// readRequest reads a follower's request line.
func readRequest(conn io.Reader) (combineRequest, error) {
	var req combineRequest
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	return req, err
}

// storeRequest stores req as a leader would, with its stamps.
func storeRequest(t *testing.T, st *store, req combineRequest) []sent {
	t.Helper()
	var msgs []outgoing
	for _, m := range req.Messages {
		msgs = append(msgs, outgoing{contextID: m.ContextID, name: m.Name, text: m.Text, priority: m.Priority, at: m.At})
	}
	outs, _, err := st.sendPlain(req.GroupID, msgs)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// TestCombinedSendsConcurrent has four stores, as four processes, send
// from three goroutines each at once. Every answered send is stored once
// with the id it was answered with, and the counters match the rows.
func TestCombinedSendsConcurrent(t *testing.T) {
	leader, _, id := combineGroup(t)
	stores := []*store{leader}
	for range 3 {
		stores = append(stores, newTestStore(t, leader.dir))
	}
	const perSender = 40
	var mu sync.Mutex
	answered := map[string]int64{}
	var wg sync.WaitGroup
	for i, st := range stores {
		for j, who := range []string{"a", "b", "c"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range perSender {
					text := fmt.Sprintf("store %d sender %d message %d", i, j, k)
					var out sent
					err := retryBusy(func() (err error) {
						out, err = st.sendMessage(id, outgoing{contextID: who, name: who, text: text, priority: "normal"})
						return err
					})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					answered[text] = out.messageID
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	combined := int64(0)
	for _, st := range stores {
		combined += st.combined.Load()
	}
	if combined == 0 {
		t.Error("no send was stored by another store's transaction; want some combined")
	}
	t.Logf("%d of %d sends combined", combined, len(stores)*3*perSender)
	db := openTestDB(t, leader.groupPath(id), "rw")
	rows, err := db.Query("SELECT id, content FROM messages")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	for rows.Next() {
		var mid int64
		var text string
		rows.Scan(&mid, &text)
		if _, dup := stored[text]; dup {
			t.Errorf("%q stored twice", text)
		}
		stored[text] = mid
	}
	rows.Close()
	if len(stored) != len(stores)*3*perSender {
		t.Errorf("stored %d messages; want %d", len(stored), len(stores)*3*perSender)
	}
	for text, mid := range answered {
		if stored[text] != mid {
			t.Errorf("%q answered as %d; stored as %d", text, mid, stored[text])
		}
	}
	checkGroupConsistent(t, db)
}

// TestFailedLeaderRefusesFollowers has a leader whose group was deleted
// before it could write: it answers the follower waiting on it refused, so
// that the follower sends again (and is told the group is gone) instead of
// looking for a message that was never stored.
func TestFailedLeaderRefusesFollowers(t *testing.T) {
	leader, follower, id := combineGroup(t)
	c, ln := leaderOf(t, leader, id, sendsOf("own", "a"))
	conn, r := dialFollower(t, follower, id, sendsOf("waiting", "b"))
	defer conn.Close()
	if err := leader.deleteGroup(id, "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.lead(ln); err == nil {
		t.Fatal("lead into a deleted group: got no error")
	}
	if answer, _ := r.ReadBytes('\n'); string(answer) != "{\"refused\": true}\n" {
		t.Errorf("got answer %q; want a refusal", answer)
	}
}

// pythonOriginalSends makes argv[2] sends as the original would, one
// transaction each: the writer that knows nothing of combined sends.
const pythonOriginalSends = pythonOriginalSend + `
for i in range(int(sys.argv[2])):
    send(db, "python %d" % i, "2026-12-01T00:00:00.%06d+00:00" % i)
`

// TestCombinedSendsBesideOriginal has three stores combine their sends
// while the original's runtime writes the same group: every send of both
// is stored once, and the counters and both indexes stay consistent.
func TestCombinedSendsBesideOriginal(t *testing.T) {
	if !combineAvailable {
		t.Skip("no rendezvous for combined sends on this platform")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	dir := t.TempDir()
	first := newTestStore(t, dir)
	id := newTestGroup(t, first, "beside", "alice", "bob")
	const goSends, pySends = 60, 200
	py := exec.Command(python, "-c", pythonOriginalSends, first.groupPath(id), fmt.Sprint(pySends))
	var pyOut bytes.Buffer
	py.Stdout, py.Stderr = &pyOut, &pyOut
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		st := first
		if i > 0 {
			st = newTestStore(t, dir)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range goSends {
				if err := retryBusy(func() error {
					_, err := st.sendMessage(id, outgoing{contextID: "alice", name: "alice", text: fmt.Sprintf("go %d %d", i, k), priority: "normal"})
					return err
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := py.Wait(); err != nil {
		t.Fatalf("python3: %v\n%s", err, pyOut.Bytes())
	}
	texts := storedTexts(t, first, id)
	if len(texts) != 3*goSends+pySends {
		t.Errorf("stored %d distinct texts; want %d", len(texts), 3*goSends+pySends)
	}
	for text, n := range texts {
		if n != 1 {
			t.Errorf("%q stored %d times", text, n)
		}
	}
	checkGroupConsistent(t, openTestDB(t, first.groupPath(id), "rw"))
}

// FuzzCombinedRequest hands a real leader arbitrary bytes as a follower's
// request. Whatever they are, the leader stores its own message, and it
// either refuses the request and stores nothing of it, or answers with
// one result per message it stored. Run it with
//
//	go test -run '^$' -fuzz FuzzCombinedRequest -parallel 1 .
func FuzzCombinedRequest(f *testing.F) {
	if !combineAvailable {
		f.Skip("no rendezvous for combined sends on this platform")
	}
	st := newTestStore(f, f.TempDir())
	id := newTestGroup(f, st, "fuzz", "a", "b")
	ok := fmt.Sprintf(`{"group_id": %q, "messages": [{"context_id": "b", "name": "b", "text": "fuzzed", "priority": "normal", "at": "2026-12-01T00:00:00.5+00:00"}]}`, id)
	for _, seed := range []string{ok, ok[:40], `{"group_id": "` + id + `", "messages": null}`, strings.Replace(ok, `"b"`, `"nobody"`, 2), "\n", "[]\n"} {
		f.Add([]byte(seed + "\n"))
	}
	own := 0
	f.Fuzz(func(t *testing.T, request []byte) {
		c, ln := leaderOf(t, st, id, sendsOf("own", "a"))
		conn := dialCombiner(c.name)
		if conn == nil {
			t.Fatal("no rendezvous")
		}
		defer conn.Close()
		// Written as a follower writes, beside the leader's reading: a
		// request larger than the socket's buffer would block otherwise.
		go conn.Write(request)
		before := storedTexts(t, st, id)
		if _, errs, err := c.lead(ln); err != nil || errs[0] != nil {
			t.Fatalf("leader's own send: %v %v", err, errs)
		}
		own++
		after := storedTexts(t, st, id)
		if after["own 0 from a"] != own {
			t.Fatalf("leader's message stored %d times; want %d", after["own 0 from a"], own)
		}
		added := 0
		for text, n := range after {
			added += n - before[text]
		}
		added-- // the leader's own
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(conn).ReadBytes('\n')
		var reply combineReply
		json.Unmarshal(line, &reply)
		stored := 0
		for _, res := range reply.Results {
			if res.Error == "" {
				stored++
			}
		}
		if added != stored || (reply.Refused && added != 0) {
			t.Fatalf("request %q: answered %q, and %d messages of it stored; want the answer to account for each", request, line, added)
		}
		waitReleased(t, c.name)
	})
}
