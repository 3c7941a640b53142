package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"sync"
	"time"
)

// auditCleanupBatchSize bounds the rows one retention transaction deletes,
// and so how long it holds the write lock, which the original's audit
// writers wait on for only 100 ms (busy_timeout), this port's for 3 s.
// With two busy cores and rows of many groups and members, 250 rows take
// 19–48 ms; 1,000 rows took 64–170 ms.
const auditCleanupBatchSize = 250

// The statements of one audit write.
const (
	auditSetRetentionSQL = "UPDATE metadata SET retention_setting = ? WHERE id = 1 AND retention_setting IS NOT ?"
	auditInsertCallSQL   = "INSERT INTO tool_calls(occurred_at, audit_request_id, tool_name, group_id, context_id, " +
		"name, outcome, duration_ms, result_count, error_category, details_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	auditInsertNameSQL = "INSERT INTO tool_call_group_names(tool_call_id, group_name) VALUES (?, ?)"
)

// auditRollupStatements returns the statements, each taking where's
// arguments, that add sign (1 or -1) times the tool_calls rows matching where
// to every rollup and filter value: one upsert per distinct rollup row, alike
// for record, cleanup and upgrade. nameColumn is "NULL" for a version-1
// table, which has no name column; groupLabel labels a group's filter value.
func auditRollupStatements(nameColumn, groupLabel, where string, sign int) []string {
	// Rows whose time SQLite cannot read have no bucket and are left out, so
	// that one malformed row written by someone else cannot fail an upgrade
	// or a cleanup; the rows this server writes always have readable times.
	rows := "WITH e AS (SELECT unixepoch(occurred_at) AS t, COALESCE(tool_name, '') AS tool_name, " +
		"COALESCE(group_id, '') AS group_id, COALESCE(context_id, '') AS context_id, COALESCE(" + nameColumn + ", '') AS name, " +
		"COALESCE(outcome, '') AS outcome, COALESCE(error_category, '') AS error_category, COALESCE(duration_ms, 0) AS ms " +
		"FROM tool_calls WHERE " + where + ") "
	n := strconv.Itoa(sign) + " * "
	var out []string
	for _, r := range auditResolutions {
		// auditBucketStart's floor division, for Unix seconds of either sign.
		bucket := fmt.Sprintf("t - (t %% %[1]d + %[1]d) %% %[1]d", r.seconds)
		out = append(out, rows+"INSERT INTO analytics_"+r.suffix+"(bucket_start, "+auditDimensions+
			", call_count, error_count, duration_sum_ms) SELECT "+bucket+", "+auditDimensions+", "+n+"COUNT(*), "+
			n+"SUM(outcome = 'error'), "+n+"SUM(ms) FROM e WHERE t IS NOT NULL GROUP BY 1, 2, 3, 4, 5, 6, 7 "+
			"ON CONFLICT DO UPDATE SET call_count = call_count + excluded.call_count, "+
			"error_count = error_count + excluded.error_count, duration_sum_ms = duration_sum_ms + excluded.duration_sum_ms",
			// auditLatencyBucket: exact up to a second, powers of two above.
			rows+"INSERT INTO analytics_latency_"+r.suffix+"(bucket_start, "+auditDimensions+", latency_bucket, sample_count) "+
				"SELECT "+bucket+", "+auditDimensions+", CASE WHEN ms <= 1000 THEN 'exact:' || ms "+
				"ELSE 'log:' || CAST(floor(log2(ms)) AS INTEGER) END, "+n+"COUNT(*) FROM e WHERE t IS NOT NULL "+
				"GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ON CONFLICT DO UPDATE SET sample_count = sample_count + excluded.sample_count")
	}
	// Taking rows off leaves a label alone.
	relabel := ""
	if sign > 0 {
		relabel = ", label = excluded.label"
	}
	for _, f := range [][3]string{{"tool_name", "tool_name", "tool_name"}, {"name", nameColumn, nameColumn},
		{"group_id", "group_id", groupLabel}} {
		// Grouping by an expression, not the column, keeps SQLite from
		// scanning a whole (column, occurred_at) index for the order.
		out = append(out, "INSERT INTO analytics_filter_values(field, value, label, count) SELECT '"+f[0]+"', value, label, n "+
			"FROM (SELECT COALESCE("+f[1]+", '') AS value, "+f[2]+" AS label, "+n+"COUNT(*) AS n, MAX(id) FROM tool_calls "+
			"LEFT JOIN tool_call_group_names ON tool_call_id = id WHERE "+where+" GROUP BY 1) WHERE value != '' "+
			"ON CONFLICT DO UPDATE SET count = count + excluded.count"+relabel)
	}
	return out
}

// auditLatestLabel labels a group as its latest row did: SQLite takes a bare
// column from the row that holds MAX(id).
const auditLatestLabel = "COALESCE(group_name, group_id)"

// auditRecordRollups counts a batch inserted from the argument's id on;
// auditExpire takes the rows of a cleanup batch, up to the argument's time,
// off the rollups and deletes them. Both are built on first use, as the
// audit log is opt-in.
var (
	auditRecordRollups = sync.OnceValue(func() []string { return auditRollupStatements("name", auditLatestLabel, "id >= ?", 1) })
	auditExpire        = sync.OnceValue(func() []string {
		return append(auditRollupStatements("name", auditLatestLabel, "occurred_at <= ?", -1),
			"DELETE FROM tool_call_group_names WHERE tool_call_id IN (SELECT id FROM tool_calls WHERE occurred_at <= ?)",
			"DELETE FROM tool_calls WHERE occurred_at <= ?")
	})
)

// auditApplyRollups runs statements, from auditRollupStatements, with args.
func auditApplyRollups(ctx context.Context, tx *sql.Tx, statements []string, args ...any) error {
	for _, q := range statements {
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("update audit rows and rollups: %w", err)
		}
	}
	return nil
}

// auditBucketStart returns the Unix second at which the bucket of the given
// width containing t starts.
func auditBucketStart(t time.Time, seconds int64) int64 {
	unix := t.Unix()
	return unix - (unix%seconds+seconds)%seconds
}

// auditLatencyBucket keeps exact milliseconds up to one second, where the
// dashboard's percentiles need them, and power-of-two buckets above.
func auditLatencyBucket(ms int64) string {
	if ms <= 1000 {
		return "exact:" + strconv.FormatInt(ms, 10)
	}
	return "log:" + strconv.Itoa(bits.Len64(uint64(ms))-1)
}

// record writes events and their rollups in a single IMMEDIATE transaction.
func (a *auditLog) record(ctx context.Context, events ...auditEvent) error {
	if len(events) == 0 {
		return nil // and so the rollups never count rows from id 0 on
	}
	tx, err := a.begin(ctx)
	if err != nil {
		return fmt.Errorf("begin audit write: %w", err)
	}
	defer tx.Rollback()
	// The guard skips the page write when the setting is already recorded.
	if _, err := tx.ExecContext(ctx, auditSetRetentionSQL, a.config.setting, a.config.setting); err != nil {
		return fmt.Errorf("record audit retention setting: %w", err)
	}
	var first int64
	for i, e := range events {
		res, err := tx.ExecContext(ctx, auditInsertCallSQL, e.occurredAt, e.requestID, e.toolName, e.groupID, e.contextID, e.name,
			e.outcome, e.durationMS, e.resultCount, e.errorCategory, e.detailsJSON)
		if err != nil {
			return fmt.Errorf("insert audit row: %w", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return fmt.Errorf("read audit row id: %w", err)
		}
		if i == 0 {
			first = id
		}
		if e.groupName != "" {
			if _, err := tx.ExecContext(ctx, auditInsertNameSQL, id, e.groupName); err != nil {
				return fmt.Errorf("insert audit group name: %w", err)
			}
		}
	}
	// The transaction holds the write lock, so the batch is every row from first on.
	if err := auditApplyRollups(ctx, tx, auditRecordRollups(), first); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit audit write: %w", err)
	}
	return nil
}

// cleanup removes the rows older than the retention period, at most once a
// day by any process (metadata records the last finished pass). Each call
// deletes the oldest auditCleanupBatchSize expired rows and takes them off the
// rollups in one IMMEDIATE transaction, so no reader sees counts that disagree
// with the rows; an unfinished pass goes on after the writer's next batch. It
// returns the number of expired rows the batch took (rows tied with the
// last go too, uncounted).
func (a *auditLog) cleanup(ctx context.Context) (int, error) {
	now := a.now().UTC()
	if a.config.days == 0 || now.Before(a.nextCleanup) {
		return 0, nil
	}
	tx, err := a.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin audit cleanup: %w", err)
	}
	defer tx.Rollback()
	var last sql.NullString
	if err := tx.QueryRowContext(ctx, "SELECT last_retention_cleanup_at FROM metadata WHERE id = 1").Scan(&last); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("read audit cleanup time: %w", err)
	}
	if t, err := pyFromISOFormat(last.String); err == nil && now.Sub(t) < 24*time.Hour {
		a.nextCleanup = t.Add(24 * time.Hour)
		return 0, nil
	}
	cutoff := formatTimestamp(now.AddDate(0, 0, -a.config.days))
	// The batch is the oldest expired rows up to the last one's time (rows
	// tied with it go too): one bound, so SQLite searches the index by it.
	expired, end := 0, sql.NullString{}
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*), MAX(occurred_at) FROM (SELECT occurred_at FROM tool_calls "+
		"WHERE occurred_at < ? ORDER BY occurred_at LIMIT ?)", cutoff, auditCleanupBatchSize).Scan(&expired, &end); err != nil {
		return 0, fmt.Errorf("read expired audit rows: %w", err)
	}
	done := expired < auditCleanupBatchSize
	if err := auditApplyRollups(ctx, tx, auditExpire(), end.String); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM analytics_filter_values WHERE count <= 0"); err != nil {
		return 0, fmt.Errorf("drop audit filter values: %w", err)
	}
	if done {
		if _, err := tx.ExecContext(ctx, "UPDATE metadata SET last_retention_cleanup_at = ? WHERE id = 1", formatTimestamp(now)); err != nil {
			return 0, fmt.Errorf("record audit cleanup time: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit audit cleanup: %w", err)
	}
	if done {
		a.nextCleanup = now.Add(24 * time.Hour)
	}
	return expired, nil
}

// pyFromISOFormat reads a stored ISO 8601 timestamp as the original's
// datetime.fromisoformat does; one without a zone is UTC.
func pyFromISOFormat(s string) (time.Time, error) {
	for _, layout := range []string{
		"2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999",
		"2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("parse audit timestamp %q", s)
}
