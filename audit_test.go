package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// auditFixture is the database the Python original wrote for
// testdata/audit/session.jsonl, replayed over stdio with
// CROSSTALK_OBSERVABILITY_RETENTION_DAYS=inf and then checkpointed.
const auditFixture = "testdata/audit/original.sqlite3"

// copyAuditFixture copies the original's database into a fresh directory so
// that opening it (which creates -shm files) never touches testdata.
func copyAuditFixture(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fixture.sqlite3")
	copyFile(t, auditFixture, path)
	return path
}

// singleValue is a query expected to return exactly one row holding want.
type singleValue struct{ query, want string }

// expectSingleValues reports each check whose query does not return exactly
// one row rendered (by queryRows) as its want.
func expectSingleValues(t *testing.T, db *sql.DB, checks []singleValue) {
	t.Helper()
	for _, c := range checks {
		if got := queryRows(t, db, c.query); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: got %v; want %s", c.query, got, c.want)
		}
	}
}

// newTestAudit opens an audit log in a fresh directory, discarding its
// warnings, and closes it when the test ends. No server is attached, so it
// has no name lookups unless the test sets groupName and memberName.
func newTestAudit(t *testing.T, config auditConfig, now func() time.Time) (*auditLog, string) {
	t.Helper()
	dir := t.TempDir()
	a := openAuditLog(dir, config, io.Discard, now)
	t.Cleanup(func() { a.close() })
	return a, dir
}

var auditInf = auditConfig{enabled: true, setting: "inf"}

// auditFlush waits until every event observed so far has had its write
// attempt: it stops the writer the way close does, which drains the queue,
// and starts a fresh one on the same handle. observe is held off meanwhile
// by closing. A nil a, auditing off, has nothing to wait for.
func auditFlush(t testing.TB, a *auditLog) {
	t.Helper()
	if a == nil {
		return
	}
	a.closing.Lock()
	defer a.closing.Unlock()
	if a.closed {
		return
	}
	close(a.queue)
	a.writer.Wait()
	a.queue = make(chan auditEvent, auditQueueSize)
	a.writer.Go(a.writeRows)
}

// auditFixtureEvents reads the original's rows back as events, with their snapshots.
func auditFixtureEvents(t *testing.T, db *sql.DB) []auditEvent {
	t.Helper()
	rows, err := db.Query("SELECT occurred_at, audit_request_id, tool_name, group_id, context_id, name, outcome, duration_ms, " +
		"result_count, error_category, details_json, COALESCE(group_name, '') FROM tool_calls " +
		"LEFT JOIN tool_call_group_names ON tool_call_id = tool_calls.id ORDER BY tool_calls.id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var events []auditEvent
	for rows.Next() {
		var e auditEvent
		if err := rows.Scan(&e.occurredAt, &e.requestID, &e.toolName, &e.groupID, &e.contextID, &e.name, &e.outcome,
			&e.durationMS, &e.resultCount, &e.errorCategory, &e.detailsJSON, &e.groupName); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		t.Fatal("fixture has no tool_calls rows")
	}
	return events
}

// auditRollupTables lists every table whose contents derive from tool_calls.
func auditRollupTables() []string {
	var tables []string
	for _, r := range auditResolutions {
		tables = append(tables, "analytics_"+r.suffix, "analytics_latency_"+r.suffix)
	}
	return tables
}

func TestAuditConfigFromEnv(t *testing.T) {
	tests := []struct {
		name  string
		value *string
		want  auditConfig
		err   bool
	}{
		{name: "unset", want: auditConfig{}},
		{name: "inf", value: auditPtr("inf"), want: auditConfig{enabled: true, setting: "inf"}},
		{name: "days", value: auditPtr("30"), want: auditConfig{enabled: true, days: 30, setting: "30"}},
		{name: "one", value: auditPtr("1"), want: auditConfig{enabled: true, days: 1, setting: "1"}},
		{name: "zero", value: auditPtr("0"), err: true},
		{name: "negative", value: auditPtr("-1"), err: true},
		{name: "fraction", value: auditPtr("1.5"), err: true},
		{name: "leading space", value: auditPtr(" 1"), err: true},
		{name: "trailing newline", value: auditPtr("1\n"), err: true},
		{name: "leading zero", value: auditPtr("01"), err: true},
		{name: "upper case", value: auditPtr("INF"), err: true},
		{name: "empty", value: auditPtr(""), err: true},
		{name: "word", value: auditPtr("invalid"), err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(key string) (string, bool) {
				if key != auditRetentionVar || tt.value == nil {
					return "", false
				}
				return *tt.value, true
			}
			got, err := auditConfigFromEnv(lookup)
			if tt.err {
				const want = "CROSSTALK_OBSERVABILITY_RETENTION_DAYS must be 'inf' or a positive integer."
				if err == nil || err.Error() != want {
					t.Fatalf("got error %v; want %q", err, want)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v, nil", got, err, tt.want)
			}
		})
	}
}

func auditPtr(s string) *string { return &s }

func TestAuditDisabledOpensNothing(t *testing.T) {
	dir := t.TempDir()
	a := openAuditLog(dir, auditConfig{}, io.Discard, time.Now)
	if a != nil {
		t.Fatalf("got %v; want nil", a)
	}
	a.observe(auditTestCall("list_groups", `{"caller_name":"x"}`, `1`, `{"groups":[]}`, false, ""))
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("got %d files in the groups directory; want 0", len(entries))
	}
}

func TestAuditObserveLookups(t *testing.T) {
	names := map[string]string{"grp_a": "Alpha"}
	members := map[[2]string]string{{"grp_a", "c1"}: "joined-name"}
	a, dir := newTestAudit(t, auditInf, time.Now)
	a.groupName = func(id string) string {
		return names[id] // "" when not found
	}
	a.memberName = func(id, ctx string) string {
		return members[[2]string{id, ctx}]
	}
	call := func(tool, args, payload string, isError bool) {
		c := auditTestCall(tool, args, `1`, payload, isError, "validation")
		if tool == "delete_group" {
			// As the tools/call path does: read the name, then delete.
			c.groupName, c.groupNameRead = names["grp_a"], true
			delete(names, "grp_a")
		}
		a.observe(c)
	}
	call("update_group_metadata", `{"group_id":"grp_a","context_id":"c1","description":"d"}`, `{"error":"x"}`, true)
	call("get_users", `{"group_id":"grp_a","caller_name":"ops"}`, `{"users":[]}`, false)
	call("delete_group", `{"group_id":"grp_a","context_id":"c1","caller_name":"lead"}`, `{"group_id":"grp_a","deleted":true}`, false)
	call("get_users", `{"group_id":"grp_a","caller_name":"ops"}`, `{"error":"gone"}`, true)
	auditFlush(t, a)
	db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
	got := queryRows(t, db, "SELECT tool_name, COALESCE(name, 'NULL'), COALESCE(group_name, 'NULL') FROM tool_calls LEFT JOIN tool_call_group_names ON tool_call_id = id ORDER BY id")
	want := []string{
		"update_group_metadata|joined-name|Alpha",
		"get_users|ops|Alpha",
		"delete_group|lead|Alpha",
		"get_users|ops|NULL",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	// The latest label wins, as in the original: the last call saw no name.
	if got := queryRows(t, db, "SELECT label || '|' || count FROM analytics_filter_values WHERE field = 'group_id'"); !reflect.DeepEqual(got, []string{"grp_a|4"}) {
		t.Fatalf("got group filter %v; want [grp_a|4]", got)
	}
}

// TestAuditLookedUpNamesBounded gives a group and a member megabyte-long
// names: a call without a caller name records the member's, and every call
// its group's snapshot (read ahead, as delete_group's, or at observe), like
// the names a call sends, as its first 1 KiB, in rows, rollups and filters.
func TestAuditLookedUpNamesBounded(t *testing.T) {
	huge := strings.Repeat("n", 1<<20)
	tests := []struct {
		name, tool, args, query string
	}{
		{"member name in the row", "get_users", `{"group_id":"grp_a","context_id":"c1"}`, "SELECT MAX(length(name)) FROM tool_calls"},
		{"member name in the rollups", "get_users", `{"group_id":"grp_a","context_id":"c1"}`, "SELECT MAX(length(name)) FROM analytics_30d"},
		{"member name as a filter value", "get_users", `{"group_id":"grp_a","context_id":"c1"}`, "SELECT MAX(length(label)) FROM analytics_filter_values WHERE field = 'name'"},
		{"group name snapshot", "get_users", `{"group_id":"grp_a","caller_name":"ops"}`, "SELECT MAX(length(group_name)) FROM tool_call_group_names"},
		{"group name read ahead", "delete_group", `{"group_id":"grp_a","context_id":"c1","caller_name":"ops"}`, "SELECT MAX(length(group_name)) FROM tool_call_group_names"},
		{"group name as a filter label", "get_users", `{"group_id":"grp_a","caller_name":"ops"}`, "SELECT MAX(length(label)) FROM analytics_filter_values WHERE field = 'group_id'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, dir := newTestAudit(t, auditInf, time.Now)
			a.memberName = func(string, string) string { return huge }
			a.groupName = func(string) string { return huge }
			c := auditTestCall(tt.tool, tt.args, `1`, `{"users":[]}`, false, "")
			if tt.tool == "delete_group" {
				c.groupName, c.groupNameRead = huge, true
			}
			a.observe(c)
			auditFlush(t, a)
			db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
			if got := queryInt(t, db, tt.query); got != auditValueMaxBytes {
				t.Fatalf("%s: got %d; want %d", tt.query, got, auditValueMaxBytes)
			}
		})
	}
}

// TestAuditFailedWriteIsBoundedAndSilent is long because its two failures,
// a locked and a corrupt file, share observeOne and their timing bounds.
func TestAuditFailedWriteIsBoundedAndSilent(t *testing.T) {
	// observeOne returns how long the call path was held up, and how long
	// the write attempt took in the background.
	observeOne := func(a *auditLog) (call, attempt time.Duration) {
		start := time.Now()
		a.observe(auditTestCall("list_groups", `{"caller_name":"ops"}`, `9`, `{"groups":[]}`, false, ""))
		call = time.Since(start)
		auditFlush(t, a)
		return call, time.Since(start)
	}
	t.Run("locked", func(t *testing.T) {
		var stderr bytes.Buffer
		dir := t.TempDir()
		a := openAuditLog(dir, auditInf, &stderr, time.Now)
		defer a.close()
		db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
		release := holdWriteLock(t, filepath.Join(dir, catalogFileName))
		for range 2 {
			call, attempt := observeOne(a)
			if call > 50*time.Millisecond || attempt > busyRetryWindow+time.Second {
				t.Fatalf("a locked audit write held the call %v and took %v; want no wait and at most %v", call, attempt, busyRetryWindow)
			}
		}
		release()
		if got := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); got != 0 {
			t.Fatalf("got %d rows while locked; want 0", got)
		}
		if n := strings.Count(stderr.String(), "\n"); n != 1 {
			t.Fatalf("got %d warning lines %q; want 1", n, stderr.String())
		}
		observeOne(a)
		if got := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); got != 1 {
			t.Fatalf("got %d rows after the lock was released; want 1", got)
		}
	})
	t.Run("a current file opens without a write", func(t *testing.T) {
		// Another process's lock must not hold up a server's start.
		dir := t.TempDir()
		openAuditLog(dir, auditInf, io.Discard, time.Now).close()
		release := holdWriteLock(t, filepath.Join(dir, catalogFileName))
		defer release()
		var stderr bytes.Buffer
		start := time.Now()
		a := openAuditLog(dir, auditInf, &stderr, time.Now)
		opened := time.Since(start)
		a.close()
		if opened > writeLockWait/2 || stderr.Len() != 0 {
			t.Fatalf("opening took %v and warned %q; want no wait and no warning", opened, stderr.String())
		}
	})
	t.Run("a lock held through exit", func(t *testing.T) {
		// The first batch waits busyRetryWindow for the lock; the rest, at
		// exit, each try once rather than wait as long again.
		dir := t.TempDir()
		start := time.Now()
		a := openAuditLog(dir, auditInf, io.Discard, time.Now)
		if opened := time.Since(start); opened > busyRetryWindow/2 {
			t.Fatalf("opening took %v; want well under %v", opened, busyRetryWindow)
		}
		call := auditTestCall("list_groups", `{"caller_name":"ops"}`, `9`, `{"groups":[]}`, false, "")
		a.observe(call)
		auditFlush(t, a)
		release := holdWriteLock(t, filepath.Join(dir, catalogFileName))
		defer release()
		for range 3 * auditMaxBatch {
			a.observe(call)
			if len(a.queue) == 0 {
				time.Sleep(time.Millisecond) // so that the batches are several
			}
		}
		start = time.Now()
		a.close()
		if took := time.Since(start); took > 2*busyRetryWindow {
			t.Fatalf("close took %v with the lock held; want under %v", took, 2*busyRetryWindow)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		var stderr bytes.Buffer
		dir := t.TempDir()
		garbage := bytes.Repeat([]byte("not a database "), 512)
		if err := os.WriteFile(filepath.Join(dir, catalogFileName), garbage, 0o644); err != nil {
			t.Fatal(err)
		}
		a := openAuditLog(dir, auditInf, &stderr, time.Now)
		defer a.close()
		if call, attempt := observeOne(a); call > 50*time.Millisecond || attempt > 2*time.Second {
			t.Fatalf("a corrupt audit write held the call %v and took %v; want no wait and well under 2s", call, attempt)
		}
		if stderr.Len() == 0 {
			t.Fatal("got no warning; want one")
		}
		data, _ := os.ReadFile(filepath.Join(dir, catalogFileName))
		if !bytes.Equal(data, garbage) {
			t.Fatal("the corrupt file was modified; want it left alone")
		}
	})
}

func TestAuditWriterQueue(t *testing.T) {
	call := auditTestCall("list_groups", `{"caller_name":"ops"}`, `1`, `{"groups":[]}`, false, "")
	t.Run("close writes what is queued", func(t *testing.T) {
		dir := t.TempDir()
		a := openAuditLog(dir, auditInf, io.Discard, time.Now)
		for range 50 {
			a.observe(call)
		}
		if err := a.close(); err != nil {
			t.Fatal(err)
		}
		a.observe(call) // after close: ignored, not a panic
		db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
		if got := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); got != 50 {
			t.Fatalf("got %d rows; want 50", got)
		}
		if got := queryInt(t, db, "SELECT SUM(call_count) FROM analytics_1d"); got != 50 {
			t.Fatalf("got %d calls in analytics_1d; want 50", got)
		}
	})
	t.Run("a full queue is written at exit without lingering", func(t *testing.T) {
		if raceEnabled() {
			t.Skip("the race detector makes each batch's commit outlast auditLinger")
		}
		a, dir := newTestAudit(t, auditInf, time.Now)
		for range auditQueueSize {
			a.observe(call)
		}
		start := time.Now()
		a.close()
		// Lingering between its full batches alone would take this long.
		if took, lingering := time.Since(start), time.Duration(auditQueueSize/auditMaxBatch-1)*auditLinger; took >= lingering {
			t.Errorf("close took %v; want less than %v", took, lingering)
		}
		if n := countRows(t, dir, "tool_calls"); n != auditQueueSize {
			t.Errorf("got %d rows after close; want %d", n, auditQueueSize)
		}
	})
	t.Run("a busy writer commits a few times a second", func(t *testing.T) {
		// Each commit holds observability.sqlite3's write lock, which the
		// original's servers wait on for only 100 ms: past that a tool call
		// leaves a group without its catalog row and a server fails to start.
		a, dir := newTestAudit(t, auditInf, time.Now)
		conn, err := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc").Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		version := func() (v int64) {
			if err := conn.QueryRowContext(context.Background(), "PRAGMA data_version").Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		commits, last := 0, version()
		for start := time.Now(); time.Since(start) < time.Second; time.Sleep(time.Millisecond) {
			a.observe(call) // a server answering a call every millisecond or two
			if v := version(); v != last {
				commits, last = commits+1, v
			}
		}
		if commits > 20 {
			t.Fatalf("got %d audit commits in a second of calls; want at most 20", commits)
		}
	})
	t.Run("a stalled writer drops, never blocks", func(t *testing.T) {
		var stderr bytes.Buffer
		dir := t.TempDir()
		a := openAuditLog(dir, auditInf, &stderr, time.Now)
		defer a.close()
		a.mu.Lock() // the writer stalls as if on a slow disk
		a.observe(call)
		deadline := time.Now().Add(5 * time.Second)
		for len(a.queue) > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // until the writer holds the first event
		}
		start := time.Now()
		// The writer may take up to one batch more before it blocks.
		total := 1 + auditMaxBatch + auditQueueSize + 10
		for range total - 1 {
			a.observe(call)
		}
		held := time.Since(start)
		a.mu.Unlock()
		auditFlush(t, a)
		if held > 2*time.Second {
			t.Fatalf("observing with a stalled writer took %v; want no waiting", held)
		}
		db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
		if got := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); got < auditQueueSize || got >= int64(total) {
			t.Fatalf("got %d rows of %d calls; want a full queue's worth and some dropped", got, total)
		}
		if n := strings.Count(stderr.String(), "dropping"); n != 1 {
			t.Fatalf("got stderr %q; want one drop warning", stderr.String())
		}
	})
}

// TestAuditWritesTheFileItsPathNames deletes observability.sqlite3 under a
// running writer (a cache cleaner, or a user resetting the history), and
// another server creates a new one: the writer's rows must go to that file,
// not to the deleted one it still holds open.
func TestAuditWritesTheFileItsPathNames(t *testing.T) {
	a, dir := newTestAudit(t, auditInf, time.Now)
	path := filepath.Join(dir, catalogFileName)
	call := auditTestCall("list_groups", `{"caller_name":"ops"}`, `1`, `{"groups":[]}`, false, "")
	a.observe(call)
	auditFlush(t, a)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	a.observe(call)
	auditFlush(t, a)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("after the file was deleted, a write left no file: %v", err)
	}
	other := openAuditLog(dir, auditInf, io.Discard, time.Now) // another server, on the new file
	other.observe(call)
	other.close()
	a.observe(call)
	auditFlush(t, a)
	db := openTestDB(t, path, "rw")
	if got := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); got != 3 {
		t.Fatalf("got %d rows in the file the path names; want 3 (2 of this writer's since the delete, 1 of the other's)", got)
	}
}

// TestAuditConcurrentWritersLoseNothing runs eight audit writers on one
// file, as eight stdio servers do, each recording a stream of small batches.
// With SQLite's busy handler, which sleeps up to 100 ms between tries, the
// waiters rarely saw the lock free: about half the batches were lost.
func TestAuditConcurrentWritersLoseNothing(t *testing.T) {
	writers, calls := int64(8), int64(150)
	if raceEnabled() {
		calls = 40 // its slower commits would otherwise queue past busyRetryWindow
	}
	dir := t.TempDir()
	call := auditTestCall("list_groups", `{"caller_name":"ops"}`, `1`, `{"groups":[]}`, false, "")
	var stderr syncBuffer
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			a := openAuditLog(dir, auditInf, &stderr, time.Now)
			for range calls {
				a.observe(call)
				time.Sleep(2 * time.Millisecond)
			}
			a.close()
		})
	}
	wg.Wait()
	db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
	if got := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); got != writers*calls {
		t.Fatalf("got %d rows; want %d (stderr %q)", got, writers*calls, stderr.String())
	}
}
