package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// receiptsFixture is a group where alice sent one message that bob read,
// carol's hook delivered, dave was notified of and frank has not seen;
// erin joined after it was sent, which makes it unread for her too.
func receiptsFixture(t *testing.T) (*store, string, int64) {
	t.Helper()
	st := newTestStore(t, t.TempDir())
	g := newTestGroup(t, st, "team", "alice", "bob", "carol", "dave", "frank")
	out, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: "@bob @carol @dave hi"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.unreadMessages(context.Background(), g, "bob", "bob", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := st.claimForHook(g, "carol", []int64{out.messageID}); err != nil {
		t.Fatal(err)
	}
	db := openTestDB(t, groupFile(st.dir, g), "rw")
	if _, err := db.Exec("UPDATE wakeup_events SET last_notified_at = '2026-01-01T00:00:00+00:00' WHERE context_id = 'dave'"); err != nil {
		t.Fatal(err)
	}
	if err := st.joinGroup(g, "erin", "erin"); err != nil {
		t.Fatal(err)
	}
	return st, g, out.messageID
}

// TestSentReceipts checks every state a recipient can be in, and that the
// sender is not one of them.
func TestSentReceipts(t *testing.T) {
	st, g, id := receiptsFixture(t)
	ids, byMessage, err := st.sentReceipts(g, "alice", receiptLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[0] != id {
		t.Fatalf("got messages %v; want [%d]", ids, id)
	}
	if got, want := describeReceipts(byMessage[id]), "bob read, carol delivered by hook, dave notified, erin unread, frank unread"; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
	text, err := memberStatus(st, statusOptions{contextID: "alice", events: 5})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`sent message %d: "bob read, carol delivered by hook, dave notified, erin unread, frank unread"`, id); !strings.Contains(text, want) {
		t.Errorf("status lacks %q:\n%s", want, text)
	}
}

// TestReceiptsResource reads the receipts resource as the joined sender,
// and checks that another member's receipts are refused to this session.
func TestReceiptsResource(t *testing.T) {
	s, _ := newTestServer(t)
	initializeSession(t, s)
	call := func(id int, name, args string) string {
		return exchangeLine(t, s, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, name, args))
	}
	g := newTestGroup(t, s.store, "team", "alice", "bob")
	call(2, "join_group", fmt.Sprintf(`{"group_id":%q,"context_id":"alice","name":"alice","caller_name":"alice"}`, g))
	call(3, "send_message", fmt.Sprintf(`{"group_id":%q,"context_id":"alice","name":"alice","caller_name":"alice","message":"@bob hi"}`, g))
	read := func(contextID string) map[string]any {
		uri := uriPrefix + g + receiptsSegment + contextID
		return decodeJSON(t, exchangeLine(t, s, fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":%q}}`, uri)))
	}
	got := read("alice")
	if got["result"] == nil {
		t.Fatalf("resources/read: %v", got)
	}
	contents, _ := got["result"].(map[string]any)["contents"].([]any)
	if len(contents) != 1 {
		t.Fatalf("got %v; want one content", got)
	}
	var snap struct {
		Messages []struct {
			MessageID  int64 `json:"message_id"`
			Recipients []struct {
				ContextID string `json:"context_id"`
				State     string
			}
		}
	}
	if err := json.Unmarshal([]byte(contents[0].(map[string]any)["text"].(string)), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Messages) != 1 || len(snap.Messages[0].Recipients) != 1 || snap.Messages[0].Recipients[0].ContextID != "bob" || snap.Messages[0].Recipients[0].State != "unread" {
		t.Errorf("got %+v; want one message with bob unread", snap)
	}
	if e, _ := read("bob")["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "not authorized") {
		t.Errorf("bob's receipts from alice's session: got %v; want an authorization error", e)
	}
}

// TestChatShowsReceipts checks that the dashboard's Chats view puts each
// message's receipts under it.
func TestChatShowsReceipts(t *testing.T) {
	st, g, _ := receiptsFixture(t)
	obs := newTestObserver(t, st.dir, time.Second)
	_, body, _ := get(t, obs, "/fragments/messages?group_id="+g)
	if want := "receipts: bob read, carol delivered by hook, dave notified, erin unread, frank unread"; !strings.Contains(body, want) {
		t.Errorf("messages fragment lacks %q: %s", want, body)
	}
}

// TestStopWakeupsBeyondSQLiteParameters shows that the Stop hook's claim
// and its release work for a member with more undelivered wake events than
// SQLite binds parameters (32,766): a member who never read a busy group
// was told nothing at all, the claim failing with "too many SQL variables".
func TestStopWakeupsBeyondSQLiteParameters(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	g := newTestGroup(t, st, "team", "alice", "bob")
	msgs := make([]outgoing, 33_000)
	for i := range msgs {
		msgs[i] = outgoing{contextID: "alice", name: "alice", text: "hi", priority: "normal"}
	}
	if _, _, err := st.sendMessages(context.Background(), g, msgs); err != nil {
		t.Fatal(err)
	}
	wakes, err := st.claimStopWakeups(g, "bob")
	if err != nil || len(wakes) != len(msgs) {
		t.Fatalf("claimStopWakeups: got %d events, %v; want %d", len(wakes), err, len(msgs))
	}
	db := openTestDB(t, groupFile(st.dir, g), "ro")
	if n := queryInt(t, db, "SELECT COUNT(*) FROM wakeup_events WHERE acknowledged_at IS NULL"); n != 0 {
		t.Errorf("unacknowledged wake events after the claim: %d; want 0", n)
	}
	ids := make([]int64, len(wakes))
	for i, w := range wakes {
		ids[i] = w.messageID
	}
	if err := st.releaseStopWakeups(g, "bob", ids); err != nil {
		t.Fatalf("releaseStopWakeups: %v", err)
	}
	if n := queryInt(t, db, "SELECT COUNT(*) FROM wakeup_events WHERE acknowledged_at IS NULL"); n != int64(len(msgs)) {
		t.Errorf("unacknowledged wake events after the release: %d; want %d", n, len(msgs))
	}
}

// TestStatusEscapesNames checks that a member's name, which any member
// chooses, reaches the user's terminal from `status` escaped: no control
// sequence, and no line of its own posing as another receipt.
func TestStatusEscapesNames(t *testing.T) {
	st, g, _ := receiptsFixture(t)
	if err := st.joinGroup(g, "mallory", "m\x1b]0;owned\x07\n    sent message 99: bob read"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: "again", priority: "normal"}); err != nil {
		t.Fatal(err)
	}
	text, err := memberStatus(st, statusOptions{contextID: "alice", events: 5})
	if err != nil || strings.ContainsAny(text, "\x1b\x07") || strings.Contains(text, "\n    sent message 99") {
		t.Errorf("got %v:\n%q\nwant the name escaped", err, text)
	}
}

// TestReceiptReadOnlyOnceRead checks that a receipt has a read time only
// when its message was read: a Stop notice acknowledges dave's wake event
// but leaves the message unread, and the receipts resource showed that
// acknowledgement as read_at beside the state "delivered".
func TestReceiptReadOnlyOnceRead(t *testing.T) {
	st, g, id := receiptsFixture(t)
	if _, err := st.claimStopWakeups(g, "dave"); err != nil {
		t.Fatal(err)
	}
	_, byMessage, err := st.sentReceipts(g, "alice", receiptLimit)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		contextID, state string
		read             bool
	}{
		{"bob", "read", true},
		{"carol", "delivered", false},
		{"dave", "delivered", false},
	} {
		t.Run(tc.contextID, func(t *testing.T) {
			for _, r := range byMessage[id] {
				if r.contextID == tc.contextID && (r.state() != tc.state || (r.readAt != nil) != tc.read) {
					t.Errorf("got state %s, read at set %v; want %s, %v", r.state(), r.readAt != nil, tc.state, tc.read)
				}
			}
		})
	}
}
