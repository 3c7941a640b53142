package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// sendLine is a send_message request line; extra adds or replaces arguments.
func sendLine(id any, group, contextID, name, text string, extra ...any) string {
	args := map[string]any{"caller_name": "c", "group_id": group, "context_id": contextID, "name": name, "message": text}
	for i := 0; i+1 < len(extra); i += 2 {
		args[extra[i].(string)] = extra[i+1]
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "send_message", "arguments": args}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestPipelinedSendsRuns(t *testing.T) {
	const g, h = "grp_00000000000000000000000000000001", "grp_00000000000000000000000000000002"
	many := make([]string, 70)
	for i := range many {
		many[i] = sendLine(i, g, "a", "A", "hi")
	}
	tests := []struct {
		name     string
		notReady bool
		lines    []string
		want     []int // per chunk serve handles: a run's length, or 0 for a line answered alone
	}{
		{"sends to one group", false, []string{sendLine(1, g, "a", "A", "x"), sendLine(2, g, "b", "B", "y"), sendLine(3, g, "a", "A", "z")}, []int{3}},
		{"run is bounded", false, many, []int{64, 6}},
		{"another group starts a new run", false, []string{sendLine(1, g, "a", "A", "x"), sendLine(2, g, "a", "A", "x"), sendLine(3, h, "a", "A", "x")}, []int{2, 1}},
		{"another tool ends a run", false, []string{sendLine(1, g, "a", "A", "x"),
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_unread_messages","arguments":{"caller_name":"c","group_id":"` + g + `","context_id":"a","name":"A"}}}`,
			sendLine(3, g, "a", "A", "x")}, []int{1, 0, 1}},
		{"a send with bad arguments is answered alone", false, []string{sendLine(1, g, "a", "A", "x"), sendLine(2, g, "a", "A", "x", "priority", "loud"),
			sendLine(3, g, "a", "A", "x", "Context_ID", "a"), sendLine(4, g, "a", "A", " "), sendLine(5, g, "a", "A", "x")}, []int{1, 0, 0, 0, 1}},
		{"an invalid group id is answered alone", false, []string{sendLine(1, "grp_X", "a", "A", "x"), sendLine(2, "../x", "a", "A", "x")}, []int{0, 0}},
		{"notifications and batches are not run", false, []string{sendLine(nil, g, "a", "A", "x"), "[" + sendLine(1, g, "a", "A", "x") + "]",
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"send_message","arguments":{"caller_name":" "}}}`}, []int{0, 0, 0}},
		{"not before initialization", true, []string{sendLine(1, g, "a", "A", "x"), sendLine(2, g, "a", "A", "x")}, []int{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			s.ready = !tt.notReady
			r := bufio.NewReaderSize(strings.NewReader(strings.Join(tt.lines, "\n")+"\n"), 64<<10)
			var got []int
			for {
				line, err := r.ReadBytes('\n')
				if len(line) > 0 {
					got = append(got, len(s.pipelinedSends(line, r)))
				}
				if err != nil {
					break
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got runs %v; want %v", got, tt.want)
			}
		})
	}
}

// lineByLine hands the lines of r to its reader one per Read, so that
// nothing is buffered behind a line: a server reading it commits every send
// alone, as it does for a client that waits for each answer.
type lineByLine struct {
	r    *bufio.Reader
	rest []byte
}

func (l *lineByLine) Read(p []byte) (int, error) {
	if len(l.rest) == 0 {
		line, err := l.r.ReadBytes('\n')
		if len(line) == 0 {
			return 0, err
		}
		l.rest = line
	}
	n := copy(p, l.rest)
	l.rest = l.rest[n:]
	return n, nil
}

// sessionInput is in as serve reads it: all at once, or with oneByOne one
// line at a time (lineByLine).
func sessionInput(in string, oneByOne bool) io.Reader {
	if oneByOne {
		return &lineByLine{r: bufio.NewReader(strings.NewReader(in))}
	}
	return strings.NewReader(in)
}

// groupCommitServer is a ready server whose store has a fixed clock and a
// group with members a, b and c, whose id is fixed so that two such servers
// write the same bytes.
func groupCommitServer(t *testing.T) (*server, *bytes.Buffer, string) {
	t.Helper()
	s, out := newTestServer(t)
	clockOf(s.store).fix(time.Date(2026, 11, 29, 12, 0, 0, 123456000, time.UTC))
	initializeSession(t, s)
	const g = "grp_0123456789abcdef0123456789abcdef"
	if err := s.store.initGroup(g, "a", "commit", ""); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b", "c"} {
		if err := s.store.joinGroup(g, m, strings.ToUpper(m)); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	return s, out, g
}

// groupDump lists every row a send writes, so two stores can be compared.
func groupDump(t *testing.T, s *store, g string) string {
	t.Helper()
	var b strings.Builder
	err := s.withGroup(g, func(db *sql.DB) error {
		for _, q := range []string{
			"SELECT * FROM messages ORDER BY id",
			"SELECT * FROM member_unread_messages ORDER BY context_id, message_id",
			"SELECT * FROM group_members ORDER BY context_id",
			"SELECT * FROM wakeup_events ORDER BY id",
			"SELECT * FROM group_message_metrics ORDER BY metric, value",
			"SELECT * FROM group_state",
			"SELECT rowid FROM message_search WHERE message_search MATCH 'ell' ORDER BY rowid",
			"SELECT rowid FROM message_search WHERE content LIKE '%hello%' ORDER BY rowid",
			"SELECT rowid FROM message_search WHERE content LIKE '%@a%' ORDER BY rowid",
			"PRAGMA integrity_check",
		} {
			fmt.Fprintf(&b, "%s:\n%s\n", q, strings.Join(queryRows(t, db, q), "\n"))
		}
		// The index must agree with the messages it indexes (rank 1 makes
		// FTS5 compare it against the external content table too).
		if _, err := db.Exec("INSERT INTO message_search(message_search, rank) VALUES ('integrity-check', 1)"); err != nil {
			return fmt.Errorf("FTS integrity check: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dump group %s: %v", g, err)
	}
	return b.String()
}

// ftsSegmentsWritten reads the write counter of the message_search index:
// the number of segments FTS5 has written, which is the number of times it
// flushed its pending data. It is the third varint of the structure record
// (block 10), after a 4-byte cookie, the level count and the segment count.
func ftsSegmentsWritten(t *testing.T, s *store, g string) int {
	t.Helper()
	var block []byte
	err := s.withGroup(g, func(db *sql.DB) error {
		return db.QueryRow("SELECT block FROM message_search_data WHERE id = 10").Scan(&block)
	})
	if err != nil || len(block) < 4 {
		t.Fatalf("read FTS structure record: %v (%d bytes)", err, len(block))
	}
	rest := block[4:]
	var v uint64
	for i := 0; i < 3; i++ {
		v = 0
		for len(rest) > 0 {
			c := rest[0]
			rest = rest[1:]
			v = v<<7 | uint64(c&0x7f)
			if c < 0x80 {
				break
			}
		}
	}
	return int(v)
}

// TestGroupCommitMatchesOneByOne replays one pipelined session with group
// commit and without: answers, audit records and stored rows must be the same.
func TestGroupCommitMatchesOneByOne(t *testing.T) {
	const g = "grp_0123456789abcdef0123456789abcdef"
	unread := `{"jsonrpc":"2.0","id":"u","method":"tools/call","params":{"name":"get_unread_messages","arguments":{"caller_name":"c","group_id":"` + g + `","context_id":"b","name":"B"}}}`
	lines := []string{
		sendLine(1, g, "a", "A", "hello @b"),
		sendLine(2, g, "b", "B", "hello all", "priority", "urgent"),
		sendLine(3, g, "mallory", "M", "let me in"),
		sendLine(4, g, "a", "Wrong", "wrong name"),
		sendLine(5, g, "a", "A", "wake up", "wake_context_ids", []string{"c"}),
		sendLine("six", g, "c", "C", "@all shell hello"),
		sendLine(7, g, "a", "A", "x", "priority", "loud"),
		sendLine(8, g, "a", "A", "after the invalid one"),
		unread,
		sendLine(nil, g, "a", "A", "a notification is not run"),
		sendLine(10, "grp_ffffffffffffffffffffffffffffffff", "a", "A", "no such group"),
		sendLine(11, g, "b", "B", "last @a @c, hello"),
	}
	in := strings.Join(lines, "\n") + "\n"
	type session struct {
		out, dump string
		audit     []string
		walFrames int64
		segments  int // FTS5 index segments written
	}
	run := func(oneByOne bool) session {
		s, out, _ := groupCommitServer(t)
		var audit []string
		s.audit = func(c toolCall) {
			audit = append(audit, fmt.Sprintf("%s %s %v %s", c.requestID, c.name, c.result.isError, pyJSON(c.result.value)))
		}
		if err := s.serve(sessionInput(in, oneByOne)); err != nil {
			t.Fatal(err)
		}
		wal, err := os.Stat(s.store.groupPath(g) + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		// A WAL file is a 32-byte header and frames of a 24-byte header and
		// one 4096-byte page.
		return session{out.String(), groupDump(t, s.store, g), audit, (wal.Size() - 32) / (24 + 4096), ftsSegmentsWritten(t, s.store, g)}
	}
	together, alone := run(false), run(true)
	if together.out != alone.out {
		t.Errorf("answers differ\ngroup commit:\n%s\none by one:\n%s", together.out, alone.out)
	}
	if together.dump != alone.dump {
		t.Errorf("stored rows differ\ngroup commit:\n%s\none by one:\n%s", together.dump, alone.dump)
	}
	if fmt.Sprint(together.audit) != fmt.Sprint(alone.audit) {
		t.Errorf("audit differs\ngroup commit:\n%s\none by one:\n%s", strings.Join(together.audit, "\n"), strings.Join(alone.audit, "\n"))
	}
	// The comparison means something only if the session did what it says.
	if n := strings.Count(together.out, "\n"); n != len(lines)-1 {
		t.Errorf("got %d answers; want %d", n, len(lines)-1)
	}
	for _, want := range []string{`\"message_id\": 6`, "Context has not joined this group", "name does not match", "priority must be one of", "Group does not exist"} {
		if !strings.Contains(together.out, want) {
			t.Errorf("answers lack %q", want)
		}
	}
	// Pages that every send changes are written once per transaction; six
	// of the nine stored sends share one here.
	if together.walFrames*4 >= alone.walFrames*3 {
		t.Errorf("got %d WAL frames with group commit, %d without; want fewer than three quarters", together.walFrames, alone.walFrames)
	}
	// The search index is written once per transaction, not once per
	// message: six messages are stored, by three transactions here.
	if alone.segments != 6 || together.segments != 3 {
		t.Errorf("FTS segments written: got %d with group commit, %d without; want 3 and 6", together.segments, alone.segments)
	}
	if len(together.audit) != len(lines)-1 {
		t.Errorf("got %d audited calls; want %d", len(together.audit), len(lines)-1)
	}
}

// TestGroupCommitFailures checks runs whose shared transaction fails: each
// send must get the answer it gets when sent alone.
func TestGroupCommitFailures(t *testing.T) {
	const g = "grp_0123456789abcdef0123456789abcdef"
	tests := []struct {
		name   string
		setup  func(t *testing.T, s *server)
		texts  []string
		want   []string // in the answers, in order
		stored int64    // messages in the group afterwards; -1 when it is gone
		// slow skips the one-by-one session, which would take the retry
		// window once per send.
		slow bool
	}{
		{"a failing statement", func(t *testing.T, s *server) {
			err := s.store.withGroup(g, func(db *sql.DB) error {
				_, err := db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.content = 'boom' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}, []string{"one", "boom", "three"}, []string{`\"message_id\": 1`, "Database error while processing send_message: refused", `\"message_id\": 2`}, 2, false},
		{"a group held locked for 200 ms", func(t *testing.T, s *server) {
			time.AfterFunc(200*time.Millisecond, holdWriteLock(t, s.store.groupPath(g)))
		}, []string{"one", "two", "three"}, []string{`\"message_id\": 1`, `\"message_id\": 2`, `\"message_id\": 3`}, 3, false},
		{"a group held locked past the retry window", func(t *testing.T, s *server) {
			holdWriteLock(t, s.store.groupPath(g))
		}, []string{"one", "two"}, []string{"group is busy", "group is busy"}, 0, true},
		{"a group deleted by another process", func(t *testing.T, s *server) {
			if err := removeDatabaseFiles(s.store.groupPath(g)); err != nil {
				t.Fatal(err)
			}
		}, []string{"one", "two"}, []string{"Group does not exist", "Group does not exist"}, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in strings.Builder
			for i, text := range tt.texts {
				in.WriteString(sendLine(i+1, g, "a", "A", text) + "\n")
			}
			answers := map[bool]string{}
			ways := []bool{false, true}
			if tt.slow {
				ways = ways[:1]
			}
			for _, oneByOne := range ways {
				s, out, _ := groupCommitServer(t)
				tt.setup(t, s)
				if err := s.serve(sessionInput(in.String(), oneByOne)); err != nil {
					t.Fatal(err)
				}
				answers[oneByOne] = out.String()
				switch {
				case tt.stored >= 0:
					var n int64
					err := s.store.withGroup(g, func(db *sql.DB) error { return db.QueryRow("SELECT COUNT(*) FROM messages").Scan(&n) })
					if err != nil {
						t.Fatalf("count messages: %v", err)
					}
					if n != tt.stored {
						t.Errorf("one by one %v: got %d stored messages; want %d", oneByOne, n, tt.stored)
					}
				case s.store.groupExists(g):
					t.Errorf("one by one %v: got the deleted group back; want it gone", oneByOne)
				}
			}
			if !tt.slow && answers[false] != answers[true] {
				t.Errorf("answers differ\ngroup commit:\n%s\none by one:\n%s", answers[false], answers[true])
			}
			lines := strings.Split(strings.TrimSuffix(answers[false], "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d answers; want %d:\n%s", len(lines), len(tt.want), answers[false])
			}
			for i, want := range tt.want {
				if !strings.Contains(lines[i], want) {
					t.Errorf("answer %d: got %s; want it to contain %s", i+1, lines[i], want)
				}
			}
		})
	}
}

// failingAfter is an output that takes n writes and fails every later one,
// as stdout does once the client has closed it.
type failingAfter struct{ n int }

func (w *failingAfter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, io.ErrClosedPipe
	}
	w.n--
	return len(p), nil
}

// TestGroupCommitAuditsStoredSendsWhenOutputFails checks a run whose client
// closes stdout after the first answer: every send the run stored is audited,
// as a send stored alone is before its answer is written.
func TestGroupCommitAuditsStoredSendsWhenOutputFails(t *testing.T) {
	s, _, g := groupCommitServer(t)
	s.out = &lineWriter{w: bufio.NewWriter(&failingAfter{n: 1})}
	var audited []string
	s.audit = func(c toolCall) { audited = append(audited, string(c.requestID)) }
	in := sendLine(1, g, "a", "A", "one") + "\n" + sendLine(2, g, "a", "A", "two") + "\n" + sendLine(3, g, "a", "A", "three") + "\n"
	if err := s.serve(strings.NewReader(in)); err == nil {
		t.Fatal("got nil error writing to a closed output; want an error")
	}
	var stored int
	err := s.store.withGroup(g, func(db *sql.DB) error { return db.QueryRow("SELECT COUNT(*) FROM messages").Scan(&stored) })
	if err != nil {
		t.Fatal(err)
	}
	if len(audited) != stored {
		t.Errorf("got %d audited sends %v; want the %d stored", len(audited), audited, stored)
	}
}
