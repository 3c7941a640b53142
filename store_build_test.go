package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// pythonOriginalSend defines send(db, text, now), what the original does
// to a group file for one send from bob to alice: one transaction, run by
// python3's own sqlite3 module (Python 3.11 bundles SQLite 3.40.1, the
// original's runtime), which waits for the write lock as the original does.
const pythonOriginalSend = `
import sqlite3, sys
def send(db, text, now):
    db.execute("BEGIN IMMEDIATE")
    mid = db.execute("INSERT INTO messages(sender_context_id, sender_name, content, created_at) VALUES ('bob', 'bob', ?, ?)", (text, now)).lastrowid
    db.execute("INSERT INTO member_unread_messages(context_id, message_id) VALUES ('alice', ?)", (mid,))
    db.execute("INSERT INTO wakeup_events(message_id, context_id, relevance, created_at) VALUES (?, 'alice', 'fallback', ?)", (mid, now))
    db.execute("UPDATE group_members SET unread_count = unread_count + 1 WHERE context_id = 'alice'")
    db.execute("UPDATE group_members SET latest_message_id = ? WHERE context_id = 'bob'", (mid,))
    db.execute("UPDATE group_state SET message_revision = message_revision + 1, wakeup_revision = wakeup_revision + 1")
    db.execute("COMMIT")
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
`

// pythonOriginalWrite sends argv[2] as the original would, then runs
// SQLite's and FTS5's integrity checks. It prints the SQLite version, the
// page size and the two check results.
const pythonOriginalWrite = pythonOriginalSend + `
send(db, sys.argv[2], "2026-12-01T00:00:00.000001+00:00")
check = db.execute("PRAGMA integrity_check").fetchone()[0]
try:
    db.execute("INSERT INTO message_search(message_search) VALUES ('integrity-check')")
    fts = "ok"
except sqlite3.Error as e:
    fts = str(e)
print(sqlite3.sqlite_version, db.execute("PRAGMA page_size").fetchone()[0], check, fts)
`

// TestNewGroupPageSize shows that a new group file gets groupPageSize pages
// and that such a file is an ordinary SQLite database to the original: the
// Python runtime writes a message into it, finds it intact, and this store
// then reads and finds that message.
func TestNewGroupPageSize(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	gid := newTestGroup(t, st, "pages", "alice", "bob")
	// A text several pages long, so that it lives on overflow pages.
	long := strings.Repeat("Überlauf über mehrere Seiten; ", 200)
	if _, err := st.sendMessage(gid, outgoing{contextID: "alice", name: "alice", text: long, priority: "normal"}); err != nil {
		t.Fatal(err)
	}
	path := st.groupPath(gid)
	if got := queryRows(t, openTestDB(t, path, "ro"), "PRAGMA page_size"); len(got) != 1 || got[0] != "1024" {
		t.Fatalf("page size of a new group: got %v; want [1024]", got)
	}

	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed, so the original's runtime cannot write to the group")
	}
	text := "from Python " + long
	out, err := exec.Command(python, "-c", pythonOriginalWrite, path, text).CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 4 || fields[1] != "1024" || fields[2] != "ok" || fields[3] != "ok" {
		t.Fatalf("python3 (SQLite version, page size, integrity, search index): got %q; want [VERSION 1024 ok ok]", out)
	}
	t.Logf("written by SQLite %s", fields[0])
	unread, err := st.unreadMessages(context.Background(), gid, "alice", "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(unread) != 1 || unread[0].text != text || unread[0].contextID != "bob" {
		t.Fatalf("alice's unread after Python's send: got %d messages; want bob's one", len(unread))
	}
	found, err := st.searchMessages(context.Background(), gid, "bob", "bob", "from Python Überlauf")
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].text != text {
		t.Errorf("search for Python's text: got %d messages; want 1", len(found))
	}
	if got := queryRows(t, openTestDB(t, path, "ro"), "PRAGMA integrity_check"); len(got) != 1 || got[0] != "ok" {
		t.Errorf("integrity_check after both wrote: got %v; want [ok]", got)
	}
}
