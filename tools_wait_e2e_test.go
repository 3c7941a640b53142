package main

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// TestE2EWaitForMessages runs the built binary as a client would: bob's
// session calls wait_for_messages, a ping sent after it is answered first,
// and a message alice sends from another process ends the wait. It logs the
// latency from the send's answer to the wait's answer over several rounds.
func TestE2EWaitForMessages(t *testing.T) {
	dir := t.TempDir()
	bob := startSession(t, "B", dir)
	alice := startSession(t, "A", dir)
	gid := alice.createGroup("ctx-a")
	alice.join(gid, "ctx-a", "alice")
	bob.join(gid, "ctx-b", "bob")
	waitArgs := map[string]any{"group_id": gid, "context_id": "ctx-b", "name": "bob", "timeout_seconds": 30}

	const rounds = 10
	var latencies []time.Duration
	for i := range rounds {
		chans, err := bob.send(toolRequest("wait_for_messages", waitArgs), rpcRequest{Method: "ping"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bob.await(chans[1], e2eTimeout); err != nil {
			t.Fatalf("round %d: ping behind the wait: %v", i, err)
		}
		select {
		case msg := <-chans[0]:
			t.Fatalf("round %d: the wait answered before the ping and before any send: %+v", i, msg)
		default:
		}
		text := "@bob round " + string(rune('A'+i))
		alice.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": text}, nil)
		sent := time.Now()
		msg, err := bob.await(chans[0], e2eTimeout)
		if err != nil {
			t.Fatalf("round %d: wait_for_messages: %v", i, err)
		}
		latencies = append(latencies, time.Since(sent))
		reply, err := parseToolReply(msg)
		var got messagesReply
		if err == nil {
			err = json.Unmarshal([]byte(reply.text), &got)
		}
		if err != nil || reply.isError || len(got.Messages) != 1 || got.Messages[0].Message != text {
			t.Fatalf("round %d: got %q (%v); want the message %q", i, reply.text, err, text)
		}
	}
	slices.Sort(latencies)
	t.Logf("send answered → wait_for_messages answered over %d rounds: p50 %v, max %v", rounds, latencies[rounds/2], latencies[rounds-1])

	var unread messagesReply
	bob.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": "ctx-b", "name": "bob"}, &unread)
	if len(unread.Messages) != 0 {
		t.Errorf("unread after the waits: got %+v; want none", unread.Messages)
	}
	db := openGroupDB(t, dir, gid)
	if got := queryInt(t, db, "SELECT COUNT(*) FROM wakeup_deliveries WHERE context_id = 'ctx-b' AND delivered_via = ?", viaWaitForMessage); got != rounds {
		t.Errorf("deliveries by wait_for_messages: got %d; want %d", got, rounds)
	}
}
