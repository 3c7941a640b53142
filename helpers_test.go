package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is an io.Writer that is safe to read while another goroutine or
// process writes to it, such as a server's stdout or stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what has been written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// holdWriteLock takes the write lock of the SQLite database at path on a
// connection of its own, as another process would, until release is called
// or the test ends. Release may be called from any goroutine and more than
// once; a failed ROLLBACK is reported as a test error.
func holdWriteLock(tb testing.TB, path string) (release func()) {
	tb.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path, "rw"))
	if err != nil {
		tb.Fatalf("open %s: %v", path, err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		db.Close()
		tb.Fatalf("connection to %s: %v", path, err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		conn.Close()
		db.Close()
		tb.Fatalf("BEGIN IMMEDIATE on %s: %v", path, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				tb.Errorf("ROLLBACK on %s: %v", path, err)
			}
			conn.Close()
			db.Close()
		})
	}
	tb.Cleanup(release)
	return release
}

// openTestDB opens a connection pool of its own to the SQLite database at
// path with the store's DSN in the given mode ("ro", "rw" or "rwc"), as
// another process would, and closes it when the test ends.
func openTestDB(tb testing.TB, path, mode string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path, mode))
	if err != nil {
		tb.Fatalf("open %s: %v", path, err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// queryRows runs query and renders each row as one string, its columns
// joined by "|" and NULL as "NULL".
func queryRows(tb testing.TB, db *sql.DB, query string, args ...any) []string {
	tb.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			tb.Fatalf("%s: %v", query, err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				parts[i] = "NULL"
			case []byte:
				parts[i] = string(v)
			default:
				parts[i] = fmt.Sprint(v)
			}
		}
		out = append(out, strings.Join(parts, "|"))
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return out
}

// queryInt runs a query that returns one integer; a NULL fails the test.
func queryInt(tb testing.TB, db *sql.DB, query string, args ...any) int64 {
	tb.Helper()
	var n int64
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return n
}

// countRows counts a table's rows in dir's observability.sqlite3.
func countRows(tb testing.TB, dir, table string) int {
	tb.Helper()
	return observabilityInt(tb, dir, "SELECT COUNT(*) FROM "+table)
}

// observabilityInt reads one integer from dir's observability.sqlite3,
// opened read-only as the dashboard opens it.
func observabilityInt(tb testing.TB, dir, query string) int {
	tb.Helper()
	db, err := sql.Open("sqlite", readOnlyDSN(filepath.Join(dir, catalogFileName)))
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
	return n
}

// copyFile copies the file at from to to, creating to's directory, so that
// opening a fixture (which creates -shm files) never touches testdata.
func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// with returns a copy of base with key set to value; a key already in base
// keeps base's value.
func with(base map[string]any, key string, value any) map[string]any {
	out := map[string]any{key: value}
	for k, v := range base {
		out[k] = v
	}
	return out
}

// newTestStore opens a store on the groups directory dir, on a testClock
// that clockOf returns, and closes it when the test ends.
func newTestStore(tb testing.TB, dir string) *store {
	tb.Helper()
	c := &testClock{}
	st, err := newStore(dir, c.now)
	if err != nil {
		tb.Fatalf("newStore: %v", err)
	}
	testClocks.Store(st, c)
	tb.Cleanup(func() { st.close(); testClocks.Delete(st) })
	return st
}

// testClocks maps each store of newTestStore to its clock.
var testClocks sync.Map

// clockOf returns the clock of st, a store of newTestStore.
func clockOf(st *store) *testClock {
	c, _ := testClocks.Load(st)
	return c.(*testClock)
}

// testClock is a store's clock that a test moves: the real time plus skew,
// or at when at is set.
type testClock struct {
	mu   sync.Mutex
	skew time.Duration
	at   time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() {
		return c.at
	}
	return time.Now().Add(c.skew)
}

// skewBy runs the clock d ahead of the real time.
func (c *testClock) skewBy(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew = d
}

// fix stops the clock at at.
func (c *testClock) fix(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = at
}

// newTestGroup creates a group named name in st, created by the first of
// members, and joins every member under its context id as its name. It
// returns the group's id.
func newTestGroup(tb testing.TB, st *store, name string, members ...string) string {
	tb.Helper()
	meta, err := st.createGroup(members[0], name, "")
	if err != nil {
		tb.Fatal(err)
	}
	for _, who := range members {
		if err := st.joinGroup(meta.groupID, who, who); err != nil {
			tb.Fatal(err)
		}
	}
	return meta.groupID
}

// checkGroupConsistent fails tb unless the group database db passes
// SQLite's integrity check and FTS5's (rank 1 compares the index against
// the messages it indexes), and every member's unread_count equals its
// unread rows: what concurrent or killed writers must leave behind.
func checkGroupConsistent(tb testing.TB, db *sql.DB) {
	tb.Helper()
	if bad := queryInt(tb, db, "SELECT COUNT(*) FROM group_members m WHERE unread_count != "+
		"(SELECT COUNT(*) FROM member_unread_messages u WHERE u.context_id = m.context_id)"); bad != 0 {
		tb.Errorf("members whose unread_count differs from their unread rows: %d", bad)
	}
	if got := queryRows(tb, db, "PRAGMA integrity_check"); len(got) != 1 || got[0] != "ok" {
		tb.Errorf("PRAGMA integrity_check: got %v; want ok", got)
	}
	if _, err := db.Exec("INSERT INTO message_search(message_search, rank) VALUES ('integrity-check', 1)"); err != nil {
		tb.Errorf("FTS5 integrity-check: %v", err)
	}
}
