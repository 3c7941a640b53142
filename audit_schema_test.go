package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// auditSchemaShape describes every audit table's columns, keys and indexes.
func auditSchemaShape(t *testing.T, db *sql.DB) map[string][]string {
	t.Helper()
	shape := map[string][]string{}
	for _, table := range auditTables {
		shape[table] = append(shape[table], queryRows(t, db, "SELECT cid, name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?)", table)...)
		for _, idx := range queryRows(t, db, "SELECT name, \"unique\", origin, partial FROM pragma_index_list(?) ORDER BY name", table) {
			name := strings.Split(idx, "|")[0]
			cols := queryRows(t, db, "SELECT seqno, cid, name, \"desc\", coll, key FROM pragma_index_xinfo(?)", name)
			shape[table] = append(shape[table], "index "+idx+" "+strings.Join(cols, ","))
		}
	}
	return shape
}

func TestAuditNewSchemaMatchesOriginal(t *testing.T) {
	original := openTestDB(t, copyAuditFixture(t), "rwc")
	want := auditSchemaShape(t, original)

	t.Run("new file", func(t *testing.T) {
		_, dir := newTestAudit(t, auditInf, time.Now)
		db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
		if got := auditSchemaShape(t, db); !reflect.DeepEqual(got, want) {
			t.Fatalf("got schema %v; want %v", got, want)
		}
		checks := []singleValue{
			{"PRAGMA user_version", "2"},
			{"PRAGMA journal_mode", "wal"},
			{"PRAGMA auto_vacuum", "2"},
			{"SELECT schema_version || '|' || (created_at = audit_enabled_at) || '|' || COALESCE(last_retention_cleanup_at, 'NULL') FROM metadata", "2|1|NULL"},
		}
		expectSingleValues(t, db, checks)
	})

	t.Run("beside the core's catalog", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, catalogFileName)
		core := openTestDB(t, path, "rwc")
		for _, stmt := range []string{
			"PRAGMA auto_vacuum=INCREMENTAL", "PRAGMA journal_mode=WAL",
			"CREATE TABLE groups (group_id TEXT PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL, created_at TEXT, updated_at TEXT NOT NULL)",
			"INSERT INTO groups VALUES ('grp_1', 'One', '', NULL, 'now')",
		} {
			if _, err := core.Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
		a := openAuditLog(dir, auditInf, io.Discard, time.Now)
		defer a.close()
		if got := auditSchemaShape(t, core); !reflect.DeepEqual(got, want) {
			t.Fatalf("got schema %v; want %v", got, want)
		}
		if got := queryRows(t, core, "SELECT group_id, name FROM groups"); !reflect.DeepEqual(got, []string{"grp_1|One"}) {
			t.Fatalf("got catalog %v; want [grp_1|One]", got)
		}
		if got := queryInt(t, core, "PRAGMA auto_vacuum"); got != 2 {
			t.Fatalf("got auto_vacuum %d; want 2", got)
		}
	})
}

// createAuditV1 writes the original's version-1 layout: tool_calls and metadata
// without rollups, filter values or indexes.
func createAuditV1(t *testing.T, path string, withGroupNames bool) *sql.DB {
	t.Helper()
	db := openTestDB(t, path, "rwc")
	stmts := []string{
		"CREATE TABLE metadata (id INTEGER PRIMARY KEY, schema_version INTEGER NOT NULL, created_at TEXT NOT NULL, audit_enabled_at TEXT NOT NULL, last_retention_cleanup_at TEXT, retention_setting TEXT)",
		"CREATE TABLE tool_calls (id INTEGER PRIMARY KEY, occurred_at TEXT NOT NULL, audit_request_id TEXT, tool_name TEXT NOT NULL, group_id TEXT, context_id TEXT, name TEXT, outcome TEXT NOT NULL, duration_ms INTEGER NOT NULL, result_count INTEGER, error_category TEXT, details_json TEXT)",
		"INSERT INTO metadata VALUES (1, 1, '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00', NULL, 'inf')",
		"PRAGMA user_version=1",
	}
	if withGroupNames {
		stmts = append(stmts, "CREATE TABLE tool_call_group_names (tool_call_id INTEGER PRIMARY KEY, group_name TEXT NOT NULL)")
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// TestAuditUpgradeFromV1 is long because its four cases, each a subtest,
// share the version-1 layout and checks; apart they would repeat them.
func TestAuditUpgradeFromV1(t *testing.T) {
	t.Run("original's legacy case", func(t *testing.T) {
		dir := t.TempDir()
		db := createAuditV1(t, filepath.Join(dir, catalogFileName), false)
		if _, err := db.Exec("INSERT INTO tool_calls(occurred_at, tool_name, outcome, duration_ms) VALUES ('2026-01-01T00:00:00+00:00', 'list_groups', 'error', 17)"); err != nil {
			t.Fatal(err)
		}
		a := openAuditLog(dir, auditInf, io.Discard, time.Now)
		defer a.close()
		checks := []singleValue{
			{"SELECT SUM(call_count) || '|' || SUM(error_count) || '|' || SUM(duration_sum_ms) FROM analytics_30d", "1|1|17"},
			{"SELECT bucket_start || '|' || latency_bucket || '|' || sample_count FROM analytics_latency_1m", "1767225600|exact:17|1"},
			{"SELECT group_concat(field || '=' || value || ':' || count) FROM analytics_filter_values", "tool_name=list_groups:1"},
			{"PRAGMA user_version", "2"},
			{"SELECT schema_version FROM metadata", "2"},
		}
		expectSingleValues(t, db, checks)
	})

	t.Run("fixture rows backfill the original's rollups once", func(t *testing.T) {
		original := openTestDB(t, copyAuditFixture(t), "rwc")
		dir := t.TempDir()
		path := filepath.Join(dir, catalogFileName)
		db := createAuditV1(t, path, true)
		for i, e := range auditFixtureEvents(t, original) {
			if _, err := db.Exec("INSERT INTO tool_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", i+1, e.occurredAt, e.requestID, e.toolName,
				e.groupID, e.contextID, e.name, e.outcome, e.durationMS, e.resultCount, e.errorCategory, e.detailsJSON); err != nil {
				t.Fatal(err)
			}
			if e.groupName != "" {
				if _, err := db.Exec("INSERT INTO tool_call_group_names VALUES (?, ?)", i+1, e.groupName); err != nil {
					t.Fatal(err)
				}
			}
		}
		upgrade := func() {
			a := openAuditLog(dir, auditInf, io.Discard, time.Now)
			a.close()
		}
		upgrade()
		compare := func(stage string) {
			for _, table := range auditRollupTables() {
				q := "SELECT * FROM " + table + " ORDER BY 1, 2, 3, 4, 5, 6, 7"
				if got, want := queryRows(t, db, q), queryRows(t, original, q); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: %s: got %v; want %v", stage, table, got, want)
				}
			}
			q := "SELECT field, value, count FROM analytics_filter_values ORDER BY 1, 2"
			if got, want := queryRows(t, db, q), queryRows(t, original, q); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: filter values: got %v; want %v", stage, got, want)
			}
			// The backfill labels a group with its greatest recorded name.
			labels := queryRows(t, db, "SELECT label FROM analytics_filter_values WHERE field = 'group_id' AND value IN (SELECT group_id FROM tool_calls WHERE details_json LIKE '%created_group_id%' AND context_id = 'lead-ctx')")
			if !reflect.DeepEqual(labels, []string{"Release train"}) {
				t.Fatalf("%s: got group label %v; want [Release train]", stage, labels)
			}
		}
		compare("first upgrade")
		// A database marked version 1 again, with its rollups present, must
		// not be backfilled a second time.
		if _, err := db.Exec("PRAGMA user_version=1"); err != nil {
			t.Fatal(err)
		}
		upgrade()
		compare("second upgrade")
		if got := queryInt(t, db, "PRAGMA user_version"); got != 2 {
			t.Fatalf("got user_version %d; want 2", got)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'tool_calls_by_%'"); got != 6 {
			t.Fatalf("got %d tool_calls indexes; want 6", got)
		}
	})

	t.Run("rollups present without the group-name table", func(t *testing.T) {
		dir := t.TempDir()
		db := createAuditV1(t, filepath.Join(dir, catalogFileName), false)
		if _, err := db.Exec(auditRollupSchema()); err != nil {
			t.Fatal(err)
		}
		a := openAuditLog(dir, auditInf, io.Discard, time.Now)
		defer a.close()
		tables, err := tableNames(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(auditTables, func(name string) bool { return !tables[name] }) {
			t.Fatalf("got tables %v; want all of %v", tables, auditTables)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'tool_calls_by_%'"); got != 6 {
			t.Fatalf("got %d tool_calls indexes; want 6", got)
		}
		call := auditTestCall("get_group_metadata", `{"caller_name":"ops","group_id":"grp_0123456789abcdef0123456789abcdef"}`, `1`, `{"name":"Ops"}`, false, "")
		call.groupName, call.groupNameRead = "Ops", true
		a.observe(call)
		auditFlush(t, a)
		if got := queryRows(t, db, "SELECT group_name FROM tool_call_group_names"); !reflect.DeepEqual(got, []string{"Ops"}) {
			t.Fatalf("got group names %v; want [Ops]", got)
		}
	})

	t.Run("a locked database stays version 1", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, catalogFileName)
		db := createAuditV1(t, path, false)
		if _, err := db.Exec("PRAGMA journal_mode=WAL"); err != nil {
			t.Fatal(err)
		}
		release := holdWriteLock(t, path)
		var stderr bytes.Buffer
		a := openAuditLog(dir, auditInf, &stderr, time.Now)
		defer a.close()
		release()
		if got := queryInt(t, db, "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'analytics%'"); got != 0 {
			t.Fatalf("got %d analytics tables after a failed upgrade; want 0", got)
		}
		if !strings.Contains(stderr.String(), "audit") {
			t.Fatalf("got stderr %q; want one audit warning", stderr.String())
		}
		// The next write retries the upgrade and succeeds.
		a.observe(auditTestCall("list_groups", `{"caller_name":"ops"}`, `1`, `{"groups":[]}`, false, ""))
		auditFlush(t, a)
		if got := queryInt(t, db, "SELECT SUM(call_count) FROM analytics_30d"); got != 1 {
			t.Fatalf("got %d calls in analytics_30d; want 1", got)
		}
	})
}

// TestAuditRepairsVersion2MissingTable opens a file marked version 2 that
// has lost a table: it is created again, not left to fail every write.
func TestAuditRepairsVersion2MissingTable(t *testing.T) {
	dir := t.TempDir()
	openAuditLog(dir, auditInf, io.Discard, time.Now).close()
	db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
	if _, err := db.Exec("DROP TABLE analytics_1h"); err != nil {
		t.Fatal(err)
	}
	a := openAuditLog(dir, auditInf, io.Discard, time.Now)
	a.observe(auditTestCall("list_groups", `{"caller_name":"ops"}`, `1`, `{"groups":[]}`, false, ""))
	a.close()
	if got := queryInt(t, db, "SELECT SUM(call_count) FROM analytics_1h"); got != 1 {
		t.Fatalf("got %d calls in analytics_1h; want 1", got)
	}
}
