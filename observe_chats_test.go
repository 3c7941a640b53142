package main

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestMessagePagination(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := fx.group("Paged", "", now, fixtureMember{"w", "Writer"})
	exact := fx.group("Exact", "", now, fixtureMember{"w", "Writer"})
	var msgs []fixtureMessage
	for i := 0; i < 205; i++ {
		msgs = append(msgs, fixtureMessage{Sender: "w", SenderName: "Writer", Content: fmt.Sprintf("m%d", i+1), At: now.Add(time.Duration(i) * time.Second)})
	}
	fx.messages(id, msgs...)
	fx.messages(exact, msgs[:100]...)
	obs := newTestObserver(t, fx.dir, time.Second)
	idPattern := regexp.MustCompile(`data-message-id="(\d+)"`)
	cursorPattern := regexp.MustCompile(`older_than_message_id=(\d+)`)
	seen := map[string]bool{}
	var order []string
	path := "/fragments/messages?group_id=" + id
	var pages []int
	for path != "" {
		code, body, _ := get(t, obs, path)
		if code != 200 {
			t.Fatalf("%s got %d", path, code)
		}
		var page []string
		for _, m := range idPattern.FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Errorf("message %s shown twice", m[1])
			}
			seen[m[1]] = true
			page = append(page, m[1])
		}
		order = append(page, order...)
		pages = append(pages, len(page))
		path = ""
		if m := cursorPattern.FindStringSubmatch(body); m != nil {
			path = "/fragments/messages?group_id=" + id + "&older_than_message_id=" + m[1]
		}
	}
	if fmt.Sprint(pages) != "[100 100 5]" {
		t.Errorf("got page sizes %v; want [100 100 5]", pages)
	}
	for i, got := range order {
		if want := fmt.Sprint(i + 1); got != want {
			t.Fatalf("position %d holds message %s; want %s (no gaps, chronological)", i, got, want)
		}
	}
	_, body, _ := get(t, obs, "/fragments/messages?group_id="+exact)
	if strings.Contains(body, "Load older") || len(idPattern.FindAllString(body, -1)) != 100 {
		t.Errorf("a group of exactly 100 messages got a Load older button or a wrong page")
	}
}

func TestChatWakeupsNamePendingFirstWithDeliveryStates(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now().UTC().Truncate(time.Second)
	ann := fixtureMember{"5d1c2b4e-0000-4000-8000-00000000a11e", "Ann the architect"}
	bo := fixtureMember{"b0b0b0b0-0000-4000-8000-0000000000b0", "Bo"}
	id := fx.group("Wakeful", "", now.Add(-time.Hour), ann, bo)
	ids := fx.messages(id,
		fixtureMessage{Sender: bo.ContextID, SenderName: "Bo", Content: "first, read", At: now.Add(-50 * time.Minute)},
		fixtureMessage{Sender: bo.ContextID, SenderName: "Bo", Content: "second, waiting", At: now.Add(-40 * time.Minute)},
		fixtureMessage{Sender: ann.ContextID, SenderName: "Ann the architect", Content: "third, read", At: now.Add(-30 * time.Minute)})
	fx.wakeup(id, ids[0], ann.ContextID, now.Add(-50*time.Minute), now.Add(-45*time.Minute))
	fx.wakeup(id, ids[1], ann.ContextID, now.Add(-40*time.Minute), time.Time{})
	fx.wakeup(id, ids[2], "left-the-group", now.Add(-30*time.Minute), now.Add(-20*time.Minute))
	// A hook delivered the waiting one; the agent has not read it yet. It
	// read the first one, whose wake event is acknowledged.
	fx.exec(id+".sqlite3", func(tx *sql.Tx) error {
		if _, err := tx.Exec(deliveriesTable); err != nil {
			return err
		}
		if _, err := tx.Exec("DELETE FROM member_unread_messages WHERE context_id = ? AND message_id = ?", ann.ContextID, ids[0]); err != nil {
			return err
		}
		_, err := tx.Exec("INSERT INTO wakeup_deliveries(message_id, context_id, delivered_at, delivered_via) VALUES (?, ?, ?, 'hook')",
			ids[1], ann.ContextID, formatTimestamp(now.Add(-35*time.Minute)))
		return err
	})
	obs := newTestObserver(t, fx.dir, time.Second)
	v := obs.chatView(context.Background(), id)
	if v.Pending != 1 || v.WakeupTotal != 3 || len(v.Wakeups) != 3 {
		t.Fatalf("got %d waiting of %d, %d listed; want 1 of 3, all listed", v.Pending, v.WakeupTotal, len(v.Wakeups))
	}
	var got []string
	for _, w := range v.Wakeups {
		var steps []string
		for _, s := range w.Steps {
			steps = append(steps, fmt.Sprintf("%s:%v", s.Name, s.Done))
		}
		got = append(got, fmt.Sprintf("%s #%d %s %s", w.Target, w.MessageID, w.Excerpt, strings.Join(steps, ",")))
	}
	want := []string{
		"Ann the architect #2 second, waiting created:true,notified:true,delivered · hook:true,read:false",
		"left-the-group #3 third, read created:true,notified:true,delivered · tool:true,read:true",
		"Ann the architect #1 first, read created:true,notified:true,delivered · tool:true,read:true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got wakeups\n%s\nwant (waiting first, then newest; names, not ids)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	_, body, _ := get(t, obs, "/fragments/chat?group_id="+id)
	if !strings.Contains(body, `title="Ann the architect" data-tip-id="`+ann.ContextID+`"`) || !strings.Contains(body, "1 waiting") {
		t.Errorf("chat fragment lacks the named, waiting wakeup: %.400s", body[strings.Index(body, "Wakeups"):])
	}
}

// TestChatWakeupReadOnlyWhenItsMessageIs shows that an acknowledged wake
// event counts as read, and is no longer waiting, only once its message is
// read: a Stop hook's notice or a preview acknowledges it and leaves the
// message unread, as crosstalk-mcp status also says.
func TestChatWakeupReadOnlyWhenItsMessageIs(t *testing.T) {
	for _, tc := range []struct {
		name        string
		messageRead bool
		want        string
	}{
		{"read by a read tool", true, "delivered · tool:true,read:true pending=false"},
		// Delivered, so no longer waiting, as the Wakeups header and the
		// Overview count it; not read, since its message is not.
		{"acknowledged by a Stop notice, still unread", false, "delivered · hook:true,read:false pending=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newObserveFixture(t)
			now := time.Now().UTC().Truncate(time.Second)
			ann, bo := fixtureMember{"a", "Ann"}, fixtureMember{"b", "Bo"}
			id := fx.group("Wakeful", "", now.Add(-time.Hour), ann, bo)
			ids := fx.messages(id, fixtureMessage{Sender: bo.ContextID, SenderName: "Bo", Content: "hi", At: now.Add(-50 * time.Minute)})
			fx.wakeup(id, ids[0], ann.ContextID, now.Add(-50*time.Minute), now.Add(-45*time.Minute))
			if tc.messageRead {
				fx.exec(id+".sqlite3", func(tx *sql.Tx) error {
					_, err := tx.Exec("DELETE FROM member_unread_messages WHERE context_id = ?", ann.ContextID)
					return err
				})
			}
			v := newTestObserver(t, fx.dir, time.Second).chatView(context.Background(), id)
			if len(v.Wakeups) != 1 {
				t.Fatalf("got %d wakeups; want 1", len(v.Wakeups))
			}
			w := v.Wakeups[0]
			got := fmt.Sprintf("%s:%v,%s:%v pending=%v", w.Steps[2].Name, w.Steps[2].Done, w.Steps[3].Name, w.Steps[3].Done, w.Pending)
			if got != tc.want {
				t.Errorf("got %s; want %s", got, tc.want)
			}
		})
	}
}

// TestChatTagsTokenNames shows the per-agent token's name, as text and
// HTML-escaped, on the messages message_tokens lists, and on no other.
func TestChatTagsTokenNames(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := fx.group("Tagged", "", now, fixtureMember{"w", "Writer"})
	ids := fx.messages(id,
		fixtureMessage{Sender: "w", SenderName: "Writer", Content: "by token", At: now},
		fixtureMessage{Sender: "w", SenderName: "Writer", Content: "hostile", At: now},
		fixtureMessage{Sender: "w", SenderName: "Writer", Content: "over stdio", At: now})
	obs := newTestObserver(t, fx.dir, time.Second)
	if _, body, _ := get(t, obs, "/fragments/messages?group_id="+id); strings.Contains(body, `class="tag"`) {
		t.Errorf("a group without message_tokens shows a token tag: %s", body)
	}
	fx.exec(id+".sqlite3", func(tx *sql.Tx) error {
		if _, err := tx.Exec(tokensTable); err != nil {
			return err
		}
		_, err := tx.Exec("INSERT INTO message_tokens(message_id, token_name) VALUES (?, 'alice-laptop'), (?, '<b>x</b>')", ids[0], ids[1])
		return err
	})
	_, body, _ := get(t, obs, "/fragments/messages?group_id="+id)
	for _, want := range []string{">token alice-laptop</span>", ">token &lt;b&gt;x&lt;/b&gt;</span>"} {
		if !strings.Contains(body, want) {
			t.Errorf("messages fragment lacks %q: %s", want, body)
		}
	}
	if strings.Contains(body, "<b>x</b>") || strings.Count(body, `class="tag"`) != 2 {
		t.Errorf("got %d tags (want 2, escaped): %s", strings.Count(body, `class="tag"`), body)
	}
	_, body, _ = get(t, obs, fmt.Sprintf("/fragments/message?group_id=%s&message_id=%d", id, ids[0]))
	if !strings.Contains(body, ">token alice-laptop</span>") {
		t.Errorf("live-appended message lacks its tag: %s", body)
	}
}

// TestChatCutsHugeMessages shows that the chat cuts a message after
// chatMessageChars characters, counted in characters, not bytes, and says
// so, while one exactly that long is shown whole.
func TestChatCutsHugeMessages(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := fx.group("Logs", "", now, fixtureMember{"w", "Writer"})
	whole, huge := strings.Repeat("é", chatMessageChars), strings.Repeat("é", chatMessageChars)+strings.Repeat("x", 1<<20)
	fx.messages(id, fixtureMessage{Sender: "w", SenderName: "Writer", Content: whole, At: now},
		fixtureMessage{Sender: "w", SenderName: "Writer", Content: huge, At: now.Add(time.Second)})
	obs := newTestObserver(t, fx.dir, time.Second)
	_, body, _ := get(t, obs, "/fragments/messages?group_id="+id)
	texts := regexp.MustCompile(`<p>([^<]*)</p>`).FindAllStringSubmatch(body, -1)
	if len(texts) != 2 {
		t.Fatalf("got %d message texts; want 2", len(texts))
	}
	if texts[0][1] != whole {
		t.Errorf("a message of exactly %d characters: got %d bytes; want it whole", chatMessageChars, len(texts[0][1]))
	}
	if got := texts[1][1]; !strings.HasPrefix(got, whole+" … (cut here") || strings.Contains(got, "x") {
		t.Errorf("a 1 MiB message: got %d bytes ending %q; want %d characters and the cut marked", len(got), got[max(0, len(got)-80):], chatMessageChars)
	}
}

// TestChatWakeupsReadOnlyTheListed: a busy group keeps a week of
// acknowledged wake events, hundreds of thousands; the side panel lists
// wakeupListLimit of them, so it must not load them all to pick those
// (at a million, each chat refresh took 7 s and 400 MB).
func TestChatWakeupsReadOnlyTheListed(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now().UTC().Truncate(time.Second)
	ann := fixtureMember{"ann", "Ann"}
	id := fx.group("Busy", "", now.Add(-time.Hour), ann)
	fx.wakeup(id, 1, ann.ContextID, now.Add(-time.Hour), time.Time{}) // the oldest still waits
	const events = 20000
	fx.exec(id+".sqlite3", func(tx *sql.Tx) error {
		_, err := tx.Exec(`WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO wakeup_events(message_id, context_id, relevance, priority, created_at, acknowledged_at, last_notified_at)
			SELECT i, 'ann', 'mention', 'normal', ?2, ?2, ?2 FROM n`, events, formatTimestamp(now))
		return err
	})
	obs := newTestObserver(t, fx.dir, time.Second)
	obs.chatView(context.Background(), id) // open the handle
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v := obs.chatView(context.Background(), id)
	runtime.ReadMemStats(&after)
	if len(v.Wakeups) != wakeupListLimit || !v.Wakeups[0].Pending || v.Wakeups[0].MessageID != 1 || v.Wakeups[1].MessageID != events {
		t.Fatalf("got %d wakeups starting #%d, #%d; want %d, the waiting #1 first, then the newest", len(v.Wakeups),
			v.Wakeups[0].MessageID, v.Wakeups[1].MessageID, wakeupListLimit)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("a chat of %d wake events allocated %d MiB; want the listed %d read, not all", events, got>>20, wakeupListLimit)
	}
}

// TestChatCutsHugeDescription: a group's description is as unbounded as a
// message, and every Overview keeps each group's summary, description
// included, in its read cache; it is cut like a message.
func TestChatCutsHugeDescription(t *testing.T) {
	fx := newObserveFixture(t)
	id := fx.group("Described", strings.Repeat("d", 4<<20), time.Now(), fixtureMember{"w", "Writer"})
	obs := newTestObserver(t, fx.dir, time.Second)
	_, body, _ := get(t, obs, "/fragments/chat?group_id="+id)
	if n := strings.Count(body, "d"); n > chatMessageChars+1000 || !strings.Contains(body, strings.Repeat("d", chatMessageChars)) {
		t.Errorf("a 4 MiB description: the chat shows %d KiB of it; want %d characters", n>>10, chatMessageChars)
	}
}
