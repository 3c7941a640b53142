package main

import (
	"database/sql/driver"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHugeMessageIndexedAside sends a message of hugeLine bytes into a group
// the original wrote and into groups whose search trigger is not the
// original's, and checks what sendHuge promises: the row and its unread
// fan-out as for any send, the search index consistent and finding it, and
// the schema, the original's trigger text included, exactly as before.
func TestHugeMessageIndexedAside(t *testing.T) {
	cases := []struct {
		name  string
		setup string // run on the group before the send, if any
		// indexed says whether the search index should hold the message.
		indexed bool
	}{
		{name: "original's group", indexed: true},
		{name: "trigger dropped by an operator", setup: "DROP TRIGGER messages_search_after_insert", indexed: false},
		{name: "trigger of another body", setup: "DROP TRIGGER messages_search_after_insert;" +
			"CREATE TRIGGER messages_search_after_insert AFTER INSERT ON messages BEGIN SELECT 1; END", indexed: false},
	}
	text := strings.Repeat("x", hugeLine) + " needle-at-the-end"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, interopGroup+".sqlite3")
			copyFile(t, filepath.Join("testdata", "interop", interopGroup+".sqlite3"), path)
			copyFile(t, filepath.Join("testdata", "interop", "observability.sqlite3"), filepath.Join(dir, "observability.sqlite3"))
			if c.setup != "" {
				if _, err := openTestDB(t, path, "rw").Exec(c.setup); err != nil {
					t.Fatal(err)
				}
			}
			schema := interopSchema(t, path)
			st := newTestStore(t, dir)
			out, err := st.sendHuge(interopGroup, outgoing{contextID: "ctx-alice", name: "alice", priority: "normal"}, &hugeText{s: text})
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			if out.messageID != 11 {
				t.Errorf("message id: got %d; want 11", out.messageID)
			}
			st.close()
			if got := interopSchema(t, path); !slices.Equal(got, schema) {
				t.Errorf("schema after the send:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(schema, "\n"))
			}
			db := openTestDB(t, path, "rw")
			want := int64(0)
			if c.indexed {
				want = 1
			}
			if got := queryInt(t, db, "SELECT count(*) FROM message_search WHERE content LIKE '%needle-at-the-end%'"); got != want {
				t.Errorf("search for the message: got %d hits; want %d", got, want)
			}
			if c.indexed {
				if _, err := db.Exec("INSERT INTO message_search(message_search) VALUES ('integrity-check')"); err != nil {
					t.Errorf("search index integrity check: %v", err)
				}
			}
			if got := queryInt(t, db, "SELECT count(*) FROM member_unread_messages WHERE message_id = 11"); got != 2 {
				t.Errorf("unread rows for the message: got %d; want 2 (bob, Carol)", got)
			}
			if got := queryInt(t, db, "SELECT length(content) FROM messages WHERE id = 11"); got != int64(len(text)) {
				t.Errorf("stored length: got %d; want %d", got, len(text))
			}
		})
	}
}

// TestHugeTextTakenOnce sends huge messages held in a hugeText, as the stdio
// transport hands them over: the text is stored exactly, indexed, and the
// hugeText holds nothing of it afterwards. A send whose text was already
// taken (a retry after a failure past the insert) fails and stores nothing,
// rather than storing an empty message.
func TestHugeTextTakenOnce(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	gid := newTestGroup(t, st, "huge", "a", "b")
	text := "@b " + strings.Repeat("y", hugeLine) + " needle-in-a-box"
	h := &hugeText{s: strings.Clone(text)}
	out, err := st.sendHuge(gid, outgoing{contextID: "a", name: "a", priority: "high"}, h)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	// The row's other columns are those of an ordinary send of the same
	// routing, which insertRows writes.
	small, err := st.sendMessage(gid, outgoing{contextID: "a", name: "a", priority: "high", text: "@b small"})
	if err != nil {
		t.Fatal(err)
	}
	const columns = "SELECT sender_context_id, sender_name, priority, mentions, wakeup_targets, routing_reason, length(created_at) FROM messages WHERE id = ?"
	db := openTestDB(t, st.groupPath(gid), "ro")
	got, want := queryRows(t, db, columns, out.messageID), queryRows(t, db, columns, small.messageID)
	if len(want) != 1 || !strings.Contains(want[0], `|["b"]|["b"]|mentioned|`) {
		t.Fatalf("the ordinary send's row: got %v; want one routed to b by mention", want)
	}
	if !slices.Equal(got, want) {
		t.Errorf("huge row's columns: got %v; want %v, as an ordinary send's", got, want)
	}
	if h.s != "" || !h.taken {
		t.Errorf("hugeText after the send: %d bytes left, taken %v; want 0, true", len(h.s), h.taken)
	}
	if got := queryInt(t, db, "SELECT count(*) FROM messages WHERE id = ? AND content = ?", out.messageID, text); got != 1 {
		t.Errorf("stored text: got %d rows equal to the sent text; want 1", got)
	}
	if got := queryInt(t, db, "SELECT count(*) FROM message_search WHERE content LIKE '%needle-in-a-box%'"); got != 1 {
		t.Errorf("search for the message: got %d hits; want 1", got)
	}
	_, err = st.sendHuge(gid, outgoing{contextID: "a", name: "a", priority: "normal"}, h)
	if !errors.Is(err, errHugeTextTaken) {
		t.Errorf("second send of a taken text: got %v; want errHugeTextTaken", err)
	}
	if got := queryInt(t, db, "SELECT count(*) FROM messages"); got != 2 {
		t.Errorf("messages after the refused send: got %d; want 2", got)
	}
	left := 0
	boundTexts.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("registered texts after both sends: got %d; want 0", left)
	}
}

// TestReleaseTextSQL calls crosstalk_release_text from SQL: it returns its
// second argument, leaves a registered argument alone when the token is
// another, and clears it (and unregisters it) for its own token.
func TestReleaseTextSQL(t *testing.T) {
	db := openTestDB(t, filepath.Join(t.TempDir(), "f.sqlite3"), "rwc")
	arg := driver.NamedValue{Ordinal: 3, Value: "the text"}
	const token = 0x5eed
	boundTexts.Store(int64(token), &arg)
	defer boundTexts.Delete(int64(token))
	for _, c := range []struct {
		token int64
		want  any // arg.Value afterwards
	}{{token + 1, "the text"}, {token, nil}} {
		var got string
		if err := db.QueryRow("SELECT "+releaseTextSQL+"(?, 'value')", c.token).Scan(&got); err != nil || got != "value" {
			t.Errorf("token %#x: got %q, %v; want \"value\"", c.token, got, err)
		}
		if arg.Value != c.want {
			t.Errorf("token %#x: argument afterwards %v; want %v", c.token, arg.Value, c.want)
		}
	}
	if _, still := boundTexts.Load(int64(token)); still {
		t.Error("the token is still registered after its call")
	}
}
