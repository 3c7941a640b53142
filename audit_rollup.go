package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"time"
)

// auditRollupKey identifies one row of a rollup table.
type auditRollupKey struct {
	table  int
	bucket int64
	dims   [6]string
}

const (
	// auditCleanupBatchSize bounds the rows one retention transaction deletes.
	auditCleanupBatchSize = 1000
	// auditMaxRetentionDays is past the start of the calendar for any clock
	// this program runs on, so longer settings can never expire a row.
	auditMaxRetentionDays = 1_000_000
)

// auditRollupSQL and auditLatencySQL are the upserts of each resolution,
// indexed like auditResolutions.
var auditRollupSQL, auditLatencySQL = func() (rollup, latency []string) {
	for _, r := range auditResolutions {
		rollup = append(rollup, "INSERT INTO analytics_"+r.suffix+"(bucket_start, "+auditDimensions+
			", call_count, error_count, duration_sum_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "+
			"ON CONFLICT(bucket_start, "+auditDimensions+") DO UPDATE SET call_count = call_count + excluded.call_count, "+
			"error_count = error_count + excluded.error_count, duration_sum_ms = duration_sum_ms + excluded.duration_sum_ms")
		latency = append(latency, "INSERT INTO analytics_latency_"+r.suffix+"(bucket_start, "+auditDimensions+
			", latency_bucket, sample_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "+
			"ON CONFLICT(bucket_start, "+auditDimensions+", latency_bucket) DO UPDATE SET "+
			"sample_count = sample_count + excluded.sample_count")
	}
	return rollup, latency
}()

// The statements of one audit write, prepared once per connection.
const (
	auditSetRetentionSQL = "UPDATE metadata SET retention_setting = ? WHERE id = 1 AND retention_setting IS NOT ?"
	auditInsertCallSQL   = "INSERT INTO tool_calls(occurred_at, audit_request_id, tool_name, group_id, context_id, " +
		"name, outcome, duration_ms, result_count, error_category, details_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	auditInsertNameSQL  = "INSERT INTO tool_call_group_names(tool_call_id, group_name) VALUES (?, ?)"
	auditCountFilterSQL = "INSERT INTO analytics_filter_values(field, value, label, count) VALUES (?, ?, ?, 1) " +
		"ON CONFLICT(field, value) DO UPDATE SET count = count + excluded.count, label = excluded.label"
)

// auditExec runs one statement of an audit transaction.
type auditExec func(ctx context.Context, query string, args ...any) (sql.Result, error)

// auditQueryEvents reads tool_calls rows' ids and rollup-relevant columns
// from a SELECT of id, occurred_at, tool_name, group_id, context_id, name,
// outcome, duration_ms and error_category, in that order.
func auditQueryEvents(ctx context.Context, q queryer, query string, args ...any) (ids []any, events []auditEvent, err error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var e auditEvent
		var tool, outcome sql.NullString
		var duration sql.NullInt64
		if err := rows.Scan(&id, &e.occurredAt, &tool, &e.groupID, &e.contextID, &e.name, &outcome, &duration, &e.errorCategory); err != nil {
			return nil, nil, err
		}
		e.toolName, e.outcome, e.durationMS = tool.String, outcome.String, duration.Int64
		ids, events = append(ids, id), append(events, e)
	}
	return ids, events, rows.Err()
}

// auditBucketStart returns the Unix second at which the bucket of the given
// width containing t starts.
func auditBucketStart(t time.Time, seconds int64) int64 {
	unix := t.Unix()
	start := unix / seconds * seconds
	if unix < 0 && unix%seconds != 0 {
		start -= seconds
	}
	return start
}

// auditLatencyBucket keeps exact milliseconds up to one second, where the
// dashboard's percentiles need them, and power-of-two buckets above.
func auditLatencyBucket(ms int64) string {
	if ms <= 1000 {
		return "exact:" + strconv.FormatInt(ms, 10)
	}
	return "log:" + strconv.Itoa(bits.Len64(uint64(ms))-1)
}

// auditApplyRollups adds delta times each event to every rollup resolution,
// aggregating first so a batch costs one upsert per distinct row. An event
// whose time cannot be read has no bucket and is skipped, so that one
// malformed row written by someone else cannot fail an upgrade or a
// cleanup; the rows this server writes always have readable times.
func auditApplyRollups(ctx context.Context, exec auditExec, events []auditEvent, delta int64) error {
	type sums struct{ calls, errs, duration int64 }
	totals := map[auditRollupKey]*sums{}
	latency := map[auditRollupKey]map[string]int64{}
	var order []auditRollupKey
	for _, e := range events {
		at, err := pyFromISOFormat(e.occurredAt)
		if err != nil {
			continue
		}
		dims := [6]string{e.toolName, e.groupID.String, e.contextID.String, e.name.String, e.outcome, e.errorCategory.String}
		for i, r := range auditResolutions {
			k := auditRollupKey{table: i, bucket: auditBucketStart(at, r.seconds), dims: dims}
			s := totals[k]
			if s == nil {
				s = &sums{}
				totals[k] = s
				latency[k] = map[string]int64{}
				order = append(order, k)
			}
			s.calls += delta
			if e.outcome == "error" {
				s.errs += delta
			}
			s.duration += delta * e.durationMS
			latency[k][auditLatencyBucket(e.durationMS)] += delta
		}
	}
	for _, k := range order {
		suffix := auditResolutions[k.table].suffix
		s := totals[k]
		args := []any{k.bucket, k.dims[0], k.dims[1], k.dims[2], k.dims[3], k.dims[4], k.dims[5]}
		_, err := exec(ctx, auditRollupSQL[k.table], append(args, s.calls, s.errs, s.duration)...)
		if err != nil {
			return fmt.Errorf("update audit rollup %s: %w", suffix, err)
		}
		buckets := make([]string, 0, len(latency[k]))
		for b := range latency[k] {
			buckets = append(buckets, b)
		}
		sort.Strings(buckets)
		for _, b := range buckets {
			_, err := exec(ctx, auditLatencySQL[k.table], append(args[:7:7], b, latency[k][b])...)
			if err != nil {
				return fmt.Errorf("update audit latency rollup %s: %w", suffix, err)
			}
		}
	}
	return nil
}

// auditFilterValues lists the (field, value, label) triples an event adds to
// analytics_filter_values; empty values are not listed.
func auditFilterValues(e auditEvent) [][3]string {
	var out [][3]string
	if e.toolName != "" {
		out = append(out, [3]string{"tool_name", e.toolName, e.toolName})
	}
	if e.name.String != "" {
		out = append(out, [3]string{"name", e.name.String, e.name.String})
	}
	if e.groupID.String != "" {
		label := e.groupName
		if label == "" {
			label = e.groupID.String
		}
		out = append(out, [3]string{"group_id", e.groupID.String, label})
	}
	return out
}

// record writes events and their rollups in a single IMMEDIATE transaction.
func (a *auditLog) record(ctx context.Context, events ...auditEvent) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin audit write: %w", err)
	}
	defer tx.Rollback()
	exec := func(ctx context.Context, query string, args ...any) (sql.Result, error) {
		if st := a.stmts[query]; st != nil {
			return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		}
		return tx.ExecContext(ctx, query, args...)
	}
	// The guard skips the page write when the setting is already recorded.
	if _, err := exec(ctx, auditSetRetentionSQL, a.config.setting, a.config.setting); err != nil {
		return fmt.Errorf("record audit retention setting: %w", err)
	}
	for _, e := range events {
		res, err := exec(ctx, auditInsertCallSQL, e.occurredAt, e.requestID, e.toolName, e.groupID, e.contextID, e.name,
			e.outcome, e.durationMS, e.resultCount, e.errorCategory, e.detailsJSON)
		if err != nil {
			return fmt.Errorf("insert audit row: %w", err)
		}
		if e.groupName != "" {
			id, err := res.LastInsertId()
			if err != nil {
				return fmt.Errorf("read audit row id: %w", err)
			}
			if _, err := exec(ctx, auditInsertNameSQL, id, e.groupName); err != nil {
				return fmt.Errorf("insert audit group name: %w", err)
			}
		}
		// In call order, so the latest group name labels the filter value.
		for _, f := range auditFilterValues(e) {
			if _, err := exec(ctx, auditCountFilterSQL, f[0], f[1], f[2]); err != nil {
				return fmt.Errorf("update audit filter values: %w", err)
			}
		}
	}
	if err := auditApplyRollups(ctx, exec, events, 1); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit audit write: %w", err)
	}
	return nil
}

// prepareStatements compiles the statements of record once: compiling them
// on every call costs about as much as running them. A statement that fails
// to compile is simply run unprepared.
func (a *auditLog) prepareStatements(ctx context.Context) {
	queries := append([]string{auditSetRetentionSQL, auditInsertCallSQL, auditInsertNameSQL, auditCountFilterSQL}, auditRollupSQL...)
	a.stmts = map[string]*sql.Stmt{}
	for _, q := range append(queries, auditLatencySQL...) {
		if st, err := a.db.PrepareContext(ctx, q); err == nil {
			a.stmts[q] = st
		}
	}
}

// cleanup removes rows older than the retention period at most once a day.
// Each batch of up to 1,000 rows is deleted, and its rollups and filter
// values decremented, in its own IMMEDIATE transaction, so a concurrent
// writer never sees counts that disagree with the rows. The work done in one
// call is bounded by cleanupBudget; an unfinished pass resumes on the next
// call. It returns the number of rows deleted.
func (a *auditLog) cleanup(ctx context.Context) (int, error) {
	days := a.config.days
	if days == 0 || days > auditMaxRetentionDays {
		return 0, nil
	}
	now := a.now().UTC()
	if now.Before(a.nextCleanup) {
		return 0, nil
	}
	cutoff := formatTimestamp(now.AddDate(0, 0, -days))
	deadline := time.Now().Add(a.cleanupBudget)
	deleted := 0
	for first := true; ; first = false {
		done, n, err := a.cleanupBatch(ctx, now, cutoff, first)
		deleted += n
		if err != nil || done {
			return deleted, err
		}
		if time.Now().After(deadline) {
			return deleted, nil
		}
	}
}

// cleanupBatch deletes one batch; done reports that the pass is finished
// (either nothing was due or the last expired row is gone).
func (a *auditLog) cleanupBatch(ctx context.Context, now time.Time, cutoff string, first bool) (done bool, deleted int, err error) {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return false, 0, fmt.Errorf("begin audit cleanup: %w", err)
	}
	defer tx.Rollback()
	if first {
		if recent, err := a.cleanedRecently(ctx, tx, now); err != nil || recent {
			return recent, 0, err
		}
	}
	ids, events, err := auditQueryEvents(ctx, tx, "SELECT id, occurred_at, tool_name, group_id, context_id, name, outcome, "+
		"duration_ms, error_category FROM tool_calls WHERE occurred_at < ? ORDER BY occurred_at LIMIT ?", cutoff, auditCleanupBatchSize)
	if err != nil {
		return false, 0, fmt.Errorf("read expired audit rows: %w", err)
	}
	if len(ids) > 0 {
		if err := auditDeleteEvents(ctx, tx, ids, events); err != nil {
			return false, 0, err
		}
		deleted = len(ids)
	}
	done = len(ids) < auditCleanupBatchSize
	if done {
		if _, err := tx.ExecContext(ctx, "UPDATE metadata SET last_retention_cleanup_at = ? WHERE id = 1", formatTimestamp(now)); err != nil {
			return false, 0, fmt.Errorf("record audit cleanup time: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, 0, fmt.Errorf("commit audit cleanup: %w", err)
	}
	if done {
		a.nextCleanup = now.Add(24 * time.Hour)
	}
	return done, deleted, nil
}

// cleanedRecently reports whether a retention pass, by this or another
// process, finished less than a day before now; if so the next pass waits
// for the day to end.
func (a *auditLog) cleanedRecently(ctx context.Context, tx *sql.Tx, now time.Time) (bool, error) {
	var last sql.NullString
	if err := tx.QueryRowContext(ctx, "SELECT last_retention_cleanup_at FROM metadata WHERE id = 1").Scan(&last); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("read audit cleanup time: %w", err)
	}
	if last.String != "" {
		if t, err := pyFromISOFormat(last.String); err == nil && now.Sub(t) < 24*time.Hour {
			a.nextCleanup = t.Add(24 * time.Hour)
			return true, nil
		}
	}
	return false, nil
}

// auditDeleteEvents deletes expired rows, given by id, with their group-name
// snapshots, and takes events, the same rows, off the rollups and filter
// values.
func auditDeleteEvents(ctx context.Context, tx *sql.Tx, ids []any, events []auditEvent) error {
	in := "(" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")"
	if _, err := tx.ExecContext(ctx, "DELETE FROM tool_call_group_names WHERE tool_call_id IN "+in, ids...); err != nil {
		return fmt.Errorf("delete expired audit group names: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM tool_calls WHERE id IN "+in, ids...); err != nil {
		return fmt.Errorf("delete expired audit rows: %w", err)
	}
	counts := map[[2]string]int64{}
	var keys [][2]string
	for _, e := range events {
		for _, f := range auditFilterValues(e) {
			k := [2]string{f[0], f[1]}
			if counts[k] == 0 {
				keys = append(keys, k)
			}
			counts[k]++
		}
	}
	if err := auditApplyRollups(ctx, tx.ExecContext, events, -1); err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := tx.ExecContext(ctx, "UPDATE analytics_filter_values SET count = count - ? WHERE field = ? AND value = ?", counts[k], k[0], k[1]); err != nil {
			return fmt.Errorf("decrement audit filter values: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM analytics_filter_values WHERE count <= 0"); err != nil {
		return fmt.Errorf("drop audit filter values: %w", err)
	}
	return nil
}
