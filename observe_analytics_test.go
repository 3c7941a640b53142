package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestVersion1AuditDatabase(t *testing.T) {
	fx := newObserveFixture(t)
	fx.mkdir()
	fx.script(catalogFileName, `CREATE TABLE tool_calls (id INTEGER PRIMARY KEY, occurred_at TEXT NOT NULL, tool_name TEXT NOT NULL, outcome TEXT NOT NULL, duration_ms INTEGER NOT NULL, error_category TEXT);
INSERT INTO tool_calls(occurred_at, tool_name, outcome, duration_ms, error_category) VALUES ('2026-01-01T00:00:00+00:00', 'list_groups', 'error', 17, 'validation');`)
	obs := newTestObserver(t, fx.dir, time.Second)
	audit, err := obs.readAuditSchema(context.Background())
	if err != nil {
		t.Fatalf("read audit schema: %v", err)
	}
	rel := obs.reliability(context.Background(), audit)
	if got := fmt.Sprint(rel.Calls, " ", rel.ErrorRate, " ", rel.P95); got != "1 100.0% 17 ms p95" {
		t.Errorf("got reliability %q; want %q", got, "1 100.0% 17 ms p95")
	}
	_, body, _ := get(t, obs, "/fragments/analytics")
	for _, want := range []string{"Total calls</strong><span>1", "17 / 17 ms", "raw rollup", "Validation Error", "List Groups"} {
		if !strings.Contains(body, want) {
			t.Errorf("v1 analytics lacks %q", want)
		}
	}
	_, body, _ = get(t, obs, "/fragments/storage")
	if !strings.Contains(body, "unknown (legacy audit database)") {
		t.Errorf("v1 storage lacks the legacy retention note")
	}
}

func TestToolAnalytics(t *testing.T) {
	fx := newObserveFixture(t)
	fx.enableAudit(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	gid := "grp_" + strings.Repeat("a", 32)
	fx.calls(
		fixtureCall{At: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), Tool: "send_message", Group: gid, Context: "writer", Caller: "Writer", Duration: 12},
		fixtureCall{At: time.Date(2026, 1, 1, 13, 0, 0, 0, time.UTC), Tool: "send_message", Group: gid, Context: "writer", Caller: "Writer", Outcome: "error", Category: "validation", Duration: 40},
		fixtureCall{At: time.Date(2025, 6, 1, 13, 0, 0, 0, time.UTC), Tool: "list_groups", Caller: "Old", Duration: 2000},
	)
	obs := newObserverAt(t, fx.dir, time.Second, func() time.Time { return time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) })
	tests := []struct {
		query string
		want  []string
	}{
		{"range_value=2&range_unit=d", []string{"Total calls</strong><span>2", "12 / 40 ms", "50.0%", "2 matching calls", "1h rollup", `title="Writer: 2 calls (100%)"`}},
		{"range_value=2&range_unit=d&outcome=error:validation", []string{"Total calls</strong><span>1", "1 matching calls"}},
		{"range_value=2&range_unit=d&outcome=success", []string{"Total calls</strong><span>1", "12 / 12 ms", "0.0%"}},
		{"tool_name=list_groups", []string{"Total calls</strong><span>1", "1024 / 1024 ms", "1d rollup"}},
		{"range_value=11&range_unit=h", []string{"Total calls</strong><span>1", "1h rollup"}},
		{"range_value=360&range_unit=m", []string{"Total calls</strong><span>0", "1m rollup", "No calls match these filters."}},
		{"name=Writer&range_value=1&range_unit=Y", []string{"Total calls</strong><span>2", "30d rollup"}},
		{"range_value=3&range_unit=months", []string{"Total calls</strong><span>2"}},
		{"range_value=0", []string{"Total calls</strong><span>3", "1d rollup"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			_, body, _ := get(t, obs, "/fragments/analytics?"+tt.query)
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("analytics?%s lacks %q", tt.query, w)
				}
			}
		})
	}
}

func TestRangeStartAndTiers(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		amount, unit string
		want         time.Time
		ok           bool
	}{
		{"30", "s", now.Add(-30 * time.Second), true},
		{"5", "m", now.Add(-5 * time.Minute), true},
		{"2", "hours", now.Add(-2 * time.Hour), true},
		{"1", "M", time.Date(2026, 2, 28, 12, 0, 0, 0, time.UTC), true},
		{"1", "Y", time.Date(2025, 3, 31, 12, 0, 0, 0, time.UTC), true},
		{"0", "h", time.Time{}, false},
		{"1000001", "s", time.Time{}, false},
		{"1", "weeks", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.amount+tt.unit, func(t *testing.T) {
			got, ok := rangeStart(tt.amount, tt.unit, now)
			if ok != tt.ok || !got.Equal(tt.want) {
				t.Errorf("got %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	tiers := []struct {
		span time.Duration
		want string
	}{{6 * time.Hour, "1m"}, {7 * time.Hour, "1h"}, {15 * 24 * time.Hour, "1h"}, {16 * 24 * time.Hour, "1d"}, {400 * 24 * time.Hour, "30d"}}
	for _, tt := range tiers {
		if got, _ := chooseTier(auditFilter{From: now.Add(-tt.span)}, now, time.Time{}); got != tt.want {
			t.Errorf("span %v got tier %s; want %s", tt.span, got, tt.want)
		}
	}
	if got, _ := chooseTier(auditFilter{}, now, time.Time{}); got != "30d" {
		t.Errorf("no range and no data got tier %s; want 30d", got)
	}
}

// TestRawBucketsMatchRollups checks that raw rows before 1970 fall into the
// same buckets as the rollups put them, and that the line chart's range
// buckets use the same starts.
func TestRawBucketsMatchRollups(t *testing.T) {
	fx := newObserveFixture(t)
	fx.mkdir()
	fx.script(catalogFileName, `CREATE TABLE tool_calls (id INTEGER PRIMARY KEY, occurred_at TEXT NOT NULL, tool_name TEXT NOT NULL, outcome TEXT NOT NULL, duration_ms INTEGER NOT NULL, error_category TEXT);
INSERT INTO tool_calls(occurred_at, tool_name, outcome, duration_ms) VALUES ('1969-12-31T23:59:30+00:00', 'list_groups', 'success', 5);`)
	obs := newTestObserver(t, fx.dir, time.Second)
	a, err := obs.readAuditSchema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	agg, _, tier, err := readAggregates(context.Background(), a, auditFilter{}, "1m", 60)
	if err != nil || tier != "raw" || len(agg) != 1 {
		t.Fatalf("got %v, tier %q, %v; want one raw aggregate", agg, tier, err)
	}
	at := time.Date(1969, 12, 31, 23, 59, 30, 0, time.UTC)
	if want := auditBucketStart(at, 60); agg[0].Bucket != want || want != -60 {
		t.Errorf("got raw bucket %d; want %d, the rollups' bucket (-60)", agg[0].Bucket, want)
	}
	f := auditFilter{From: at, To: at.Add(time.Minute)}
	keys := chartBuckets(map[int64]int64{-60: 1}, 60, f, at)
	if fmt.Sprint(keys) != "[-60 0]" {
		t.Errorf("got chart buckets %v; want [-60 0]", keys)
	}
}

// TestGroupLabels checks the one rule that names groups in the event log
// and the group filter.
func TestGroupLabels(t *testing.T) {
	fx := newObserveFixture(t)
	live := fx.group("Live name", "", time.Now())
	gone := "grp_" + strings.Repeat("d", 32)
	obs := newTestObserver(t, fx.dir, time.Second)
	l := func(id, recorded string) (string, bool) { return obs.groupLabel(context.Background(), id, recorded) }
	tests := []struct {
		id, recorded, want string
		deleted            bool
	}{
		{live, "Recorded name", "Recorded name", false},
		{live, "", "Live name", false},
		{live, live, "Live name", false},
		{gone, "Old name", "Old name (deleted)", true},
		{gone, gone, "Unknown group", true},
		{gone, "", "Unknown group", true},
	}
	for _, tt := range tests {
		got, deleted := l(tt.id, tt.recorded)
		if got != tt.want || deleted != tt.deleted {
			t.Errorf("label(%s, %q) got %q, %v; want %q, %v", tt.id, tt.recorded, got, deleted, tt.want, tt.deleted)
		}
	}
}

// TestToolAnalyticsTokenFilter narrows Tool analytics to the calls made
// through one per-agent token, which only the raw rows' details_json
// records, and keeps the typed name in the form.
func TestToolAnalyticsTokenFilter(t *testing.T) {
	fx := newObserveFixture(t)
	fx.enableAudit(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	fx.calls(
		fixtureCall{At: at, Tool: "send_message", Caller: "Writer", Duration: 12},
		fixtureCall{At: at, Tool: "list_groups", Caller: "Writer", Duration: 40},
		fixtureCall{At: at, Tool: "get_users", Caller: "Other", Duration: 7},
	)
	fx.exec(catalogFileName, func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE tool_calls SET details_json = CASE tool_name WHEN 'send_message' THEN '{"token_name":"agent-a"}'
			WHEN 'list_groups' THEN '{"token_name":"agent-a","remote_addr":"127.0.0.1:1"}' ELSE '{"token_name":"agent-b"}' END`)
		return err
	})
	obs := newObserverAt(t, fx.dir, time.Second, func() time.Time { return time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) })
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"", []string{"Total calls</strong><span>3", `name="token_name" value=""`}},
		{"token_name=agent-a", []string{"Total calls</strong><span>2", "2 matching calls", "12 / 40 ms", "raw rollup", `name="token_name" value="agent-a"`}},
		{"token_name=agent-a&tool_name=list_groups&range_value=2&range_unit=d", []string{"Total calls</strong><span>1", "1 matching calls"}},
		{"token_name=agent-b", []string{"Total calls</strong><span>1", `title="Other: 1 calls (100%)"`}},
		{"token_name=nobody", []string{"Total calls</strong><span>0", "No calls match these filters."}},
	} {
		t.Run(tt.query, func(t *testing.T) {
			_, body, _ := get(t, obs, "/fragments/analytics?"+tt.query)
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("analytics?%s lacks %q", tt.query, w)
				}
			}
		})
	}
}

// TestPercentileText checks that each latency bucket stands for a duration
// it holds: log:9 holds 1001–1023 ms, above every exact bucket.
func TestPercentileText(t *testing.T) {
	tests := []struct {
		name string
		hist []latencyCount
		p    float64
		want string
	}{
		{"empty", nil, 0.5, "—"},
		{"exact", []latencyCount{{"exact:5", 1}, {"exact:40", 1}}, 0.95, "40"},
		{"just over a second", []latencyCount{{"log:9", 3}}, 0.5, "1001"},
		{"just over a second beats an exact bucket", []latencyCount{{"exact:800", 1}, {"log:9", 1}}, 0.95, "1001"},
		{"exact below just over a second", []latencyCount{{"log:9", 1}, {"exact:800", 1}}, 0.5, "800"},
		{"two seconds", []latencyCount{{"log:10", 1}}, 0.5, "1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentileText(tt.hist, tt.p, "%d"); got != tt.want {
				t.Errorf("got %s; want %s", got, tt.want)
			}
		})
	}
}
