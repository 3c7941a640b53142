package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAuditRollupsMatchOriginal(t *testing.T) {
	original := openTestDB(t, copyAuditFixture(t), "rwc")
	a, dir := newTestAudit(t, auditInf, time.Now)
	for _, e := range auditFixtureEvents(t, original) {
		if err := a.record(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	db := openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
	for _, table := range append(auditRollupTables(), "analytics_filter_values", "tool_call_group_names") {
		t.Run(table, func(t *testing.T) {
			q := "SELECT * FROM " + table + " ORDER BY 1, 2, 3, 4, 5, 6, 7"
			if table == "analytics_filter_values" || table == "tool_call_group_names" {
				q = "SELECT * FROM " + table + " ORDER BY 1, 2"
			}
			got, want := queryRows(t, db, q), queryRows(t, original, q)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %d rows %v; want %d rows %v", len(got), got, len(want), want)
			}
		})
	}
	if got := queryRows(t, db, "SELECT retention_setting FROM metadata"); !reflect.DeepEqual(got, []string{"inf"}) {
		t.Fatalf("got retention_setting %v; want [inf]", got)
	}
}

func TestAuditLatencyBucket(t *testing.T) {
	tests := []struct {
		ms   int64
		want string
	}{{0, "exact:0"}, {17, "exact:17"}, {1000, "exact:1000"}, {1001, "log:9"}, {1023, "log:9"}, {1024, "log:10"}, {5000, "log:12"}}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.ms), func(t *testing.T) {
			if got := auditLatencyBucket(tt.ms); got != tt.want {
				t.Fatalf("got %s; want %s", got, tt.want)
			}
		})
	}
}

// TestAuditRetention is long because its five cases, each a subtest, share
// the setup and event helpers declared at its top.
func TestAuditRetention(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	event := func(age time.Duration, tool, group, groupName string) auditEvent {
		return auditEvent{
			occurredAt: formatTimestamp(now.Add(-age)), toolName: tool, outcome: "success", durationMS: 3,
			groupID: sql.NullString{String: group, Valid: group != ""}, groupName: groupName,
			name: sql.NullString{String: "ops", Valid: true},
		}
	}
	setup := func(t *testing.T, config auditConfig, events ...auditEvent) (*auditLog, *sql.DB) {
		a, dir := newTestAudit(t, config, func() time.Time { return now })
		for _, e := range events {
			if err := a.record(context.Background(), e); err != nil {
				t.Fatal(err)
			}
		}
		return a, openTestDB(t, filepath.Join(dir, catalogFileName), "rwc")
	}
	oneDay := auditConfig{enabled: true, days: 1, setting: "1"}

	t.Run("expired rows and their counts go", func(t *testing.T) {
		a, db := setup(t, oneDay,
			event(72*time.Hour, "get_users", "grp_old", "Old group"),
			event(25*time.Hour, "list_groups", "", ""),
			event(time.Hour, "list_groups", "grp_new", "New group"),
		)
		n, err := a.cleanup(context.Background())
		if n != 2 || err != nil {
			t.Fatalf("got %d, %v; want 2, nil", n, err)
		}
		checks := []struct {
			query string
			want  []string
		}{
			{"SELECT id FROM tool_calls", []string{"3"}},
			{"SELECT tool_call_id || '|' || group_name FROM tool_call_group_names", []string{"3|New group"}},
			{"SELECT field || '|' || value || '|' || count FROM analytics_filter_values ORDER BY 1", []string{"group_id|grp_new|1", "name|ops|1", "tool_name|list_groups|1"}},
			{"SELECT last_retention_cleanup_at FROM metadata", []string{formatTimestamp(now)}},
		}
		for _, table := range auditRollupTables() {
			col := "call_count"
			if strings.Contains(table, "latency") {
				col = "sample_count"
			}
			checks = append(checks, struct {
				query string
				want  []string
			}{"SELECT SUM(" + col + ") FROM " + table, []string{"1"}})
		}
		for _, c := range checks {
			if got := queryRows(t, db, c.query); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s: got %v; want %v", c.query, got, c.want)
			}
		}
	})

	t.Run("at most once a day", func(t *testing.T) {
		a, db := setup(t, oneDay, event(48*time.Hour, "list_groups", "", ""))
		if n, _ := a.cleanup(context.Background()); n != 1 {
			t.Fatalf("first cleanup deleted %d; want 1", n)
		}
		if err := a.record(context.Background(), event(48*time.Hour, "list_groups", "", "")); err != nil {
			t.Fatal(err)
		}
		now = now.Add(23 * time.Hour)
		if n, _ := a.cleanup(context.Background()); n != 0 {
			t.Fatalf("cleanup within the day deleted %d; want 0", n)
		}
		// Another process (no in-memory schedule) also respects the metadata.
		a.nextCleanup = time.Time{}
		if n, _ := a.cleanup(context.Background()); n != 0 {
			t.Fatalf("cleanup within the day by a fresh writer deleted %d; want 0", n)
		}
		now = now.Add(2 * time.Hour)
		if n, _ := a.cleanup(context.Background()); n != 1 {
			t.Fatalf("cleanup a day later deleted %d; want 1", n)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); got != 0 {
			t.Fatalf("got %d rows; want 0", got)
		}
	})

	t.Run("batches of auditCleanupBatchSize", func(t *testing.T) {
		a, db := setup(t, oneDay)
		tx, err := a.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := range auditCleanupBatchSize * 5 / 2 {
			e := event(48*time.Hour+time.Duration(i)*time.Second, "list_groups", "", "")
			if _, err := tx.Exec("INSERT INTO tool_calls(occurred_at, tool_name, name, outcome, duration_ms) VALUES (?, ?, 'ops', 'success', 3)", e.occurredAt, e.toolName); err != nil {
				t.Fatal(err)
			}
		}
		if err := auditApplyRollups(context.Background(), tx, auditRecordRollups(), 0); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		var got []int
		for range 4 {
			n, err := a.cleanup(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		if want := []int{auditCleanupBatchSize, auditCleanupBatchSize, auditCleanupBatchSize / 2, 0}; !reflect.DeepEqual(got, want) {
			t.Fatalf("got deletions per call %v; want %v", got, want)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM analytics_filter_values"); got != 0 {
			t.Fatalf("got %d filter values; want 0", got)
		}
		if got := queryInt(t, db, "SELECT COALESCE(SUM(call_count), 0) FROM analytics_1m"); got != 0 {
			t.Fatalf("got %d calls left in analytics_1m; want 0", got)
		}
	})

	t.Run("inf never deletes", func(t *testing.T) {
		a, db := setup(t, auditInf, event(24*3650*time.Hour, "list_groups", "", ""))
		if n, err := a.cleanup(context.Background()); n != 0 || err != nil {
			t.Fatalf("got %d, %v; want 0, nil", n, err)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); got != 1 {
			t.Fatalf("got %d rows; want 1", got)
		}
		if got := queryRows(t, db, "SELECT COALESCE(last_retention_cleanup_at, 'NULL') || '|' || retention_setting FROM metadata"); !reflect.DeepEqual(got, []string{"NULL|inf"}) {
			t.Fatalf("got metadata %v; want [NULL|inf]", got)
		}
	})

	t.Run("setting recorded by the writer", func(t *testing.T) {
		_, db := setup(t, auditConfig{enabled: true, days: 30, setting: "30"}, event(0, "list_groups", "", ""))
		if got := queryRows(t, db, "SELECT retention_setting FROM metadata"); !reflect.DeepEqual(got, []string{"30"}) {
			t.Fatalf("got %v; want [30]", got)
		}
	})
}

func TestAuditBucketStart(t *testing.T) {
	tests := []struct {
		at         string
		minute, hr int64
	}{
		{"2026-01-01T00:00:59.999999+00:00", 1767225600, 1767225600},
		{"2026-01-01T00:00:00Z", 1767225600, 1767225600},
		{"2026-01-01T00:01:00", 1767225660, 1767225600},
		{"2026-01-01T01:30:00+02:00", 1767223800, 1767222000},
		{"2026-01-01 00:02:00.5+00:00", 1767225720, 1767225600},
	}
	for _, tt := range tests {
		t.Run(tt.at, func(t *testing.T) {
			at, err := pyFromISOFormat(tt.at)
			if err != nil {
				t.Fatal(err)
			}
			if m, h := auditBucketStart(at, 60), auditBucketStart(at, 3600); m != tt.minute || h != tt.hr {
				t.Fatalf("got %d, %d; want %d, %d", m, h, tt.minute, tt.hr)
			}
		})
	}
	if _, err := pyFromISOFormat("yesterday"); err == nil {
		t.Fatal("got no error for an unreadable time; want one")
	}
}
