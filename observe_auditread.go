package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// auditSchema is the audit database's handle with its table names and the
// columns of tool_calls, read once per request for every reader of it.
type auditSchema struct {
	db      *sql.DB
	tables  map[string]bool
	columns map[string]bool
}

// readAuditSchema opens the audit database and lists its schema.
func (o *observer) readAuditSchema(ctx context.Context) (*auditSchema, error) {
	db, err := o.dbs.audit(o.dir)
	if err != nil {
		return nil, err
	}
	tables, err := tableNames(ctx, db)
	if err != nil {
		return nil, err
	}
	columns, err := columnNames(ctx, db, "tool_calls") // none without the table
	if err != nil {
		return nil, err
	}
	return &auditSchema{db: db, tables: tables, columns: columns}, nil
}

// auditMeta is the audit database's metadata row.
type auditMeta struct {
	EnabledAt, LastCleanup, Retention string
}

// auditMetadata reads the metadata row; ok is false when auditing was never
// enabled (the file may still hold the group catalog) or a is nil.
func auditMetadata(ctx context.Context, a *auditSchema) (auditMeta, bool) {
	if a == nil || !a.tables["metadata"] {
		return auditMeta{}, false
	}
	retention := "NULL"
	if cols, err := columnNames(ctx, a.db, "metadata"); err == nil && cols["retention_setting"] {
		retention = "retention_setting"
	}
	var enabled, cleanup, ret sql.NullString
	err := a.db.QueryRowContext(ctx, "SELECT audit_enabled_at, last_retention_cleanup_at, "+retention+" FROM metadata WHERE id = 1").
		Scan(&enabled, &cleanup, &ret)
	return auditMeta{EnabledAt: enabled.String, LastCleanup: cleanup.String, Retention: ret.String}, err == nil
}

// auditFilter narrows audit rows for Tool analytics; zero values mean "any".
// Outcome is success, error, or error:<category>. Token, a per-agent token's
// name, is only in raw rows (details_json), so filtering on it reads those.
type auditFilter struct {
	From, To                                     time.Time
	Tool, Outcome, Caller, Group, Context, Token string
}

// auditWhere filters rollup rows when seconds, the tier's bucket width, is
// not zero, else raw tool_calls rows, whose optional columns cols lists (a
// version-1 database may lack some). ok is false when the filter names a
// column the database lacks, so that no row can match.
func auditWhere(f auditFilter, seconds int64, cols map[string]bool) (where string, args []any, ok bool) {
	var clauses []string
	add := func(clause string, arg ...any) {
		clauses, args = append(clauses, clause), append(args, arg...)
	}
	raw := seconds == 0
	if !f.From.IsZero() && raw {
		add("occurred_at >= ?", formatTimestamp(f.From))
	} else if !f.From.IsZero() {
		add("bucket_start + ? > ?", seconds, f.From.Unix())
	}
	if !f.To.IsZero() && raw {
		add("occurred_at <= ?", formatTimestamp(f.To))
	} else if !f.To.IsZero() {
		add("bucket_start <= ?", f.To.Unix())
	}
	for _, d := range []struct{ col, val string }{{"tool_name", f.Tool}, {"name", f.Caller}, {"group_id", f.Group}, {"context_id", f.Context}} {
		switch {
		case d.val == "":
		case !raw:
			add(d.col+" = ?", d.val)
		case !cols[d.col]:
			return "", nil, false
		default:
			add("tool_calls."+d.col+" = ?", d.val)
		}
	}
	switch {
	case f.Token == "":
	case !raw || !cols["details_json"]:
		return "", nil, false
	default:
		add("json_extract(tool_calls.details_json, '$.token_name') = ?", f.Token)
	}
	switch {
	case f.Outcome == "success" || f.Outcome == "error":
		add("outcome = ?", f.Outcome)
	case strings.HasPrefix(f.Outcome, "error:"):
		add("outcome = 'error' AND error_category = ?", strings.TrimPrefix(f.Outcome, "error:"))
	}
	if len(clauses) == 0 {
		return "", nil, true
	}
	return " WHERE " + strings.Join(clauses, " AND "), args, true
}

// optionalColumn selects col of tool_calls when it exists, else NULL, so
// version-1 audit databases read with the same query shape.
func (a *auditSchema) optionalColumn(col string) string {
	if a.columns[col] {
		return "tool_calls." + col
	}
	return "NULL"
}

// toolCallRow is one audit row as the event logs show it.
type toolCallRow struct {
	At                       stamp
	Tool, ToolName           string // the readable label and the stored name
	Caller                   string
	Outcome, Label, Category string // Label names the outcome or the category
	GroupID, GroupLabel      string
	Deleted                  bool
	Duration                 int64
	when                     time.Time
}

// readToolCalls reads the newest matching audit rows with their group-name
// snapshots, marking rows whose group database is gone.
func (o *observer) readToolCalls(ctx context.Context, a *auditSchema, f auditFilter, limit int) ([]toolCallRow, error) {
	where, args, ok := auditWhere(f, 0, a.columns)
	if !ok {
		return nil, nil
	}
	out, err := queryAll(ctx, a.db, func(row rowScanner) (toolCallRow, error) {
		var at, tool, group, caller, outcome, category, gname sql.NullString
		var duration sql.NullInt64
		if err := row.Scan(&at, &tool, &group, &caller, &outcome, &duration, &category, &gname); err != nil {
			return toolCallRow{}, err
		}
		r := toolCallRow{At: o.stampOf(at.String, ""), Tool: toolLabel(tool.String), ToolName: tool.String,
			Caller: firstNonEmpty(caller.String, "—"), Outcome: outcome.String, Label: outcomeLabel(outcome.String, category.String),
			Category: category.String, GroupID: group.String, GroupLabel: "—", Duration: duration.Int64}
		r.when, _ = parseStamp(at.String)
		if r.GroupID != "" {
			r.GroupLabel, r.Deleted = o.groupLabel(ctx, r.GroupID, gname.String)
		}
		return r, nil
	}, toolCallsQuery(a, f, where), append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("read tool calls: %w", err)
	}
	return out, nil
}

// toolCallsQuery selects the rows readToolCalls shows, newest first, with
// NULL for the columns and the name snapshot an older database lacks.
func toolCallsQuery(a *auditSchema, f auditFilter, where string) string {
	groupName, join := "NULL", ""
	if a.tables["tool_call_group_names"] {
		groupName = shownName("tool_call_group_names.group_name")
		join = " LEFT JOIN tool_call_group_names ON tool_call_group_names.tool_call_id = tool_calls.id"
	}
	order := " ORDER BY tool_calls.id DESC"
	if !f.From.IsZero() || !f.To.IsZero() || f.Outcome != "" {
		order = " ORDER BY occurred_at DESC, tool_calls.id DESC"
	}
	return "SELECT occurred_at, tool_name, " + a.optionalColumn("group_id") + ", " +
		a.optionalColumn("name") + ", outcome, duration_ms, " + a.optionalColumn("error_category") + ", " + groupName +
		" FROM tool_calls" + join + where + order + " LIMIT ?"
}

// unknownGroupLabel names a group that has no database and no recorded name.
const unknownGroupLabel = "Unknown group"

// groupLabel names group id, which audit rows refer to, and reports
// whether its database is gone. recorded is the name the audit log kept (or
// the id, or nothing); without one a live group is named from its database,
// a gone one is "Unknown group", as a call may name one that never existed.
func (o *observer) groupLabel(ctx context.Context, id, recorded string) (label string, deleted bool) {
	gone := !groupFileExists(o.dir, id)
	switch {
	case gone && (recorded == "" || recorded == id):
		return unknownGroupLabel, true
	case gone:
		return recorded + " (deleted)", true
	case recorded != "" && recorded != id:
		return recorded, false
	}
	return o.groupName(ctx, id), false
}

// aggregateRow is one grouped rollup row.
type aggregateRow struct {
	Tool, Caller, Outcome, Category string
	Bucket                          int64
	Calls, Errors                   int64
}

// readAggregates reads aggregates and the latency histogram from one rollup
// tier, or ("raw") from raw rows when the tier's tables are missing or the
// filter names a token.
func readAggregates(ctx context.Context, a *auditSchema, f auditFilter, tier string, seconds int64) ([]aggregateRow, []latencyCount, string, error) {
	if f.Token != "" || !a.tables["analytics_"+tier] || !a.tables["analytics_latency_"+tier] {
		agg, hist, err := readRawAggregate(ctx, a, f, seconds)
		return agg, hist, "raw", err
	}
	where, args, _ := auditWhere(f, seconds, nil)
	agg, err := queryAll(ctx, a.db, func(row rowScanner) (aggregateRow, error) {
		var r aggregateRow
		var tool, caller, outcome, category sql.NullString
		err := row.Scan(&tool, &caller, &outcome, &category, &r.Bucket, &r.Calls, &r.Errors)
		r.Tool, r.Caller, r.Outcome, r.Category = tool.String, caller.String, outcome.String, category.String
		return r, err
	}, "SELECT tool_name, name, outcome, error_category, bucket_start, SUM(call_count), SUM(error_count) FROM analytics_"+tier+
		where+" GROUP BY tool_name, name, outcome, error_category, bucket_start", args...)
	if err != nil {
		return nil, nil, tier, fmt.Errorf("read analytics_%s: %w", tier, err)
	}
	hist, err := queryAll(ctx, a.db, func(row rowScanner) (latencyCount, error) {
		var l latencyCount
		return l, row.Scan(&l.Bucket, &l.Count)
	}, "SELECT latency_bucket, SUM(sample_count) FROM analytics_latency_"+tier+where+" GROUP BY latency_bucket", args...)
	if err != nil {
		return nil, nil, tier, fmt.Errorf("read latency histogram: %w", err)
	}
	return agg, hist, tier, nil
}

// readTimeline reads calls per bucket from one tier.
func readTimeline(ctx context.Context, db *sql.DB, f auditFilter, tier string, seconds int64) (map[int64]int64, error) {
	where, args, _ := auditWhere(f, seconds, nil)
	out := map[int64]int64{}
	err := eachRow(ctx, db, func(row rowScanner) error {
		var bucket, calls int64
		err := row.Scan(&bucket, &calls)
		out[bucket] += calls
		return err
	}, "SELECT bucket_start, SUM(call_count) FROM analytics_"+tier+where+" GROUP BY bucket_start", args...)
	if err != nil {
		return nil, fmt.Errorf("read analytics_%s: %w", tier, err)
	}
	return out, nil
}

// readRawAggregate derives the aggregates from a pre-rollup database's rows.
func readRawAggregate(ctx context.Context, a *auditSchema, f auditFilter, seconds int64) ([]aggregateRow, []latencyCount, error) {
	where, args, ok := auditWhere(f, 0, a.columns)
	if !ok {
		return nil, nil, nil
	}
	groups := map[aggregateRow]int64{} // by everything but the counts: calls
	durations := map[string]int64{}
	err := eachRow(ctx, a.db, func(row rowScanner) error {
		var tool, caller, outcome, category, at sql.NullString
		var duration int64
		if err := row.Scan(&tool, &caller, &outcome, &category, &at, &duration); err != nil {
			return err
		}
		t, _ := parseStamp(at.String)
		groups[aggregateRow{Tool: tool.String, Caller: caller.String, Outcome: outcome.String, Category: category.String, Bucket: auditBucketStart(t, seconds)}]++
		durations[auditLatencyBucket(duration)]++
		return nil
	}, "SELECT tool_name, "+a.optionalColumn("name")+", outcome, "+a.optionalColumn("error_category")+
		", occurred_at, duration_ms FROM tool_calls"+where, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read tool calls: %w", err)
	}
	out := make([]aggregateRow, 0, len(groups))
	for a, calls := range groups {
		a.Calls = calls
		if a.Outcome == "error" {
			a.Errors = calls
		}
		out = append(out, a)
	}
	hist := make([]latencyCount, 0, len(durations))
	for b, n := range durations {
		hist = append(hist, latencyCount{Bucket: b, Count: n})
	}
	return out, hist, nil
}

// latencyCount is one latency histogram bucket: "exact:N" for N ≤ 1000 ms,
// else "log:K" for [2^K, 2^(K+1)) ms, as the audit rollups store them.
type latencyCount struct {
	Bucket string
	Count  int64
}

// latencyValue is the representative milliseconds of a bucket: its least
// duration, so log:9 (2^9 ms, but above the exact buckets) is 1001.
func latencyValue(bucket string) int64 {
	kind, num, _ := strings.Cut(bucket, ":")
	var n int64
	fmt.Sscan(num, &n)
	if kind == "log" {
		return max(int64(1)<<n, 1001)
	}
	return n
}

// percentileText renders the nearest-rank percentile p of a histogram in
// milliseconds with format, or "—" for an empty one.
func percentileText(hist []latencyCount, p float64, format string) string {
	var total int64
	for _, h := range hist {
		total += h.Count
	}
	if total == 0 {
		return "—"
	}
	sorted := slices.SortedFunc(slices.Values(hist), func(a, b latencyCount) int {
		return cmp.Compare(latencyValue(a.Bucket), latencyValue(b.Bucket))
	})
	target, i := int64(math.Ceil(float64(total)*p)), 0
	for seen := sorted[0].Count; seen < target && i < len(sorted)-1; seen += sorted[i].Count {
		i++
	}
	return fmt.Sprintf(format, latencyValue(sorted[i].Bucket))
}
