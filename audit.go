package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite"
)

// auditLog is the opt-in audit writer: one row per completed tools/call in
// observability.sqlite3, plus the pre-aggregated rollups the dashboard reads.
// Every method is safe on a nil receiver, which is what a server with
// auditing disabled holds. Tool calls only queue their events; a background
// writer records them, one bounded attempt per batch, so a slow or failing
// audit database never changes or delays a tool result.
type auditLog struct {
	path   string
	config auditConfig

	// groupName returns a group's current name ("" when unnamed); it is
	// consulted for the group-name snapshot of each event.
	groupName func(groupID string) (string, error)
	// memberName returns the name a context joined a group with; it is the
	// caller-name fallback when a call carries no caller_name.
	memberName func(groupID, contextID string) (string, error)
	// now is the clock used for retention; tests move it.
	now func() time.Time
	// cleanupBudget bounds the retention work the writer does after one
	// batch, so that it never holds the write lock long; a large backlog is
	// drained after the following batches instead.
	cleanupBudget time.Duration

	// queue carries events from tool calls to the writer goroutine, so that
	// no tool call waits for the audit database. It is bounded: when the
	// writer falls behind by this much, new events are dropped.
	queue   chan auditEvent
	written chan struct{} // closed when the writer has exited
	pending sync.WaitGroup
	// closing guards queue against sends after close.
	closing sync.RWMutex
	closed  bool

	// mu serializes use of the database handle and the retention state.
	mu          sync.Mutex
	db          *sql.DB
	ready       bool
	stmts       map[string]*sql.Stmt
	nextCleanup time.Time
	warn        io.Writer
	warned      bool
	// dropped is set, without waiting for mu, when an event is first dropped.
	dropped atomic.Bool
}

// auditConfig is the validated CROSSTALK_OBSERVABILITY_RETENTION_DAYS.
type auditConfig struct {
	enabled bool
	// days is the retention in days; 0 means unlimited ("inf").
	days int
	// setting is the value recorded in metadata.retention_setting.
	setting string
}

// errAuditRetention is the message the original prints, byte for byte, before
// exiting with status 2.
//
//lint:ignore ST1005 printed byte for byte as the original prints it, final period included.
var errAuditRetention = errors.New("CROSSTALK_OBSERVABILITY_RETENTION_DAYS must be 'inf' or a positive integer.")

const (
	auditRetentionVar     = "CROSSTALK_OBSERVABILITY_RETENTION_DAYS"
	auditSchemaVersion    = 2
	auditDetailsMaxBytes  = 2048
	auditCleanupBatchSize = 1000
	// auditCleanupBudget is the default auditLog.cleanupBudget.
	auditCleanupBudget = 50 * time.Millisecond
	// auditQueueSize bounds the events waiting for the writer; at a few
	// hundred bytes each this is well under a megabyte.
	auditQueueSize = 4096
	// auditMaxBatch bounds the events written in one transaction, and so how
	// long the write lock is held.
	auditMaxBatch = 256
	// auditLinger is how long, during a run of calls, the writer waits to
	// gather a batch; it is also the most a row lags behind its call then.
	auditLinger = 10 * time.Millisecond
	// auditMaxRetentionDays is past the start of the calendar for any clock
	// this program runs on, so longer settings can never expire a row.
	auditMaxRetentionDays = 1_000_000
)

// auditDaysPattern is the original's accepted form of a number of days.
var auditDaysPattern = regexp.MustCompile(`^[1-9][0-9]*$`)

// auditConfigFromEnv validates the retention variable without touching any
// storage, so that main can refuse to start before a file is created.
func auditConfigFromEnv(lookup func(string) (string, bool)) (auditConfig, error) {
	value, ok := lookup(auditRetentionVar)
	switch {
	case !ok:
		return auditConfig{}, nil
	case value == "inf":
		return auditConfig{enabled: true, setting: "inf"}, nil
	case auditDaysPattern.MatchString(value):
		days, err := strconv.Atoi(value)
		if err != nil {
			days = math.MaxInt
		}
		return auditConfig{enabled: true, days: days, setting: value}, nil
	}
	return auditConfig{}, errAuditRetention
}

// auditResolutions are the rollup tables' suffixes and bucket widths.
var auditResolutions = []struct {
	suffix  string
	seconds int64
}{{"1m", 60}, {"1h", 3600}, {"1d", 86400}, {"30d", 30 * 86400}}

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

// auditTables are the tables a complete version-2 audit schema has: the
// metadata row and the history that "Delete audit history" empties.
var auditTables = append([]string{"metadata"}, auditHistoryTables...)

// auditBaseSchema is the original's version-2 metadata and tool_calls tables.
const auditBaseSchema = `
CREATE TABLE metadata (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	schema_version INTEGER NOT NULL,
	created_at TEXT NOT NULL,
	audit_enabled_at TEXT NOT NULL,
	last_retention_cleanup_at TEXT,
	retention_setting TEXT
);
CREATE TABLE tool_calls (
	id INTEGER PRIMARY KEY,
	occurred_at TEXT NOT NULL,
	audit_request_id TEXT,
	tool_name TEXT NOT NULL,
	group_id TEXT,
	context_id TEXT,
	name TEXT,
	outcome TEXT NOT NULL,
	duration_ms INTEGER NOT NULL,
	result_count INTEGER,
	error_category TEXT,
	details_json TEXT
);`

// auditIndexes are the tool_calls indexes and the group-name snapshot table;
// idempotent, so an upgrade can add them to a version-1 file.
const auditIndexes = `
CREATE INDEX IF NOT EXISTS tool_calls_by_occurred_at ON tool_calls(occurred_at);
CREATE INDEX IF NOT EXISTS tool_calls_by_tool_and_occurred_at ON tool_calls(tool_name, occurred_at);
CREATE INDEX IF NOT EXISTS tool_calls_by_group_and_occurred_at ON tool_calls(group_id, occurred_at);
CREATE INDEX IF NOT EXISTS tool_calls_by_context_and_occurred_at ON tool_calls(context_id, occurred_at);
CREATE INDEX IF NOT EXISTS tool_calls_by_name_and_occurred_at ON tool_calls(name, occurred_at);
CREATE INDEX IF NOT EXISTS tool_calls_by_outcome_and_occurred_at ON tool_calls(outcome, occurred_at);
CREATE TABLE IF NOT EXISTS tool_call_group_names (
	tool_call_id INTEGER PRIMARY KEY,
	group_name TEXT NOT NULL
);`

// auditDimensions are the rollup key columns after bucket_start, in order.
const auditDimensions = "tool_name, group_id, context_id, name, outcome, error_category"

// auditRollupSchema returns the rollup and filter-value tables; every
// statement is idempotent so an upgrade can run it over a partial schema.
func auditRollupSchema() string {
	var b strings.Builder
	dims := "tool_name TEXT NOT NULL DEFAULT '', group_id TEXT NOT NULL DEFAULT '', " +
		"context_id TEXT NOT NULL DEFAULT '', name TEXT NOT NULL DEFAULT '', " +
		"outcome TEXT NOT NULL DEFAULT '', error_category TEXT NOT NULL DEFAULT ''"
	for _, r := range auditResolutions {
		fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS analytics_%s (bucket_start INTEGER NOT NULL, %s, "+
			"call_count INTEGER NOT NULL, error_count INTEGER NOT NULL, duration_sum_ms INTEGER NOT NULL, "+
			"PRIMARY KEY (bucket_start, %s));\n", r.suffix, dims, auditDimensions)
		fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS analytics_latency_%s (bucket_start INTEGER NOT NULL, %s, "+
			"latency_bucket TEXT NOT NULL, sample_count INTEGER NOT NULL, "+
			"PRIMARY KEY (bucket_start, %s, latency_bucket));\n", r.suffix, dims, auditDimensions)
	}
	b.WriteString("CREATE TABLE IF NOT EXISTS analytics_filter_values (field TEXT NOT NULL, value TEXT NOT NULL, " +
		"label TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY(field, value));\n")
	return b.String()
}

// auditEvent is one tool_calls row plus the group-name snapshot stored beside it.
type auditEvent struct {
	occurredAt    string
	requestID     sql.NullString
	toolName      string
	groupID       sql.NullString
	contextID     sql.NullString
	name          sql.NullString
	outcome       string
	durationMS    int64
	resultCount   sql.NullInt64
	errorCategory sql.NullString
	detailsJSON   sql.NullString
	groupName     string
}

// openAuditLog returns the audit writer for dir, or nil when auditing is
// disabled. The schema is prepared now; if that fails (another process holds
// the write lock, say) the server still starts and each later write retries
// the preparation within its own bounded attempt.
func openAuditLog(dir string, config auditConfig, warn io.Writer) (*auditLog, error) {
	if !config.enabled {
		return nil, nil
	}
	path := filepath.Join(dir, catalogFileName)
	// busy_timeout(100) bounds how long one audit attempt can wait for a lock;
	// synchronous(NORMAL) is durable in WAL mode against process crashes and
	// saves an fsync per write, which analytics do not need.
	db, err := sql.Open("sqlite", sqliteDSN(path, "rwc")+"&_pragma=synchronous(NORMAL)")
	if err != nil {
		return nil, fmt.Errorf("open audit database %s: %w", path, err)
	}
	// One connection: there is one writer anyway, and the prepared statements
	// belong to the connection they were prepared on.
	db.SetMaxOpenConns(1)
	if warn == nil {
		warn = io.Discard
	}
	a := &auditLog{path: path, config: config, db: db, warn: warn, now: time.Now, cleanupBudget: auditCleanupBudget,
		queue: make(chan auditEvent, auditQueueSize), written: make(chan struct{})}
	a.mu.Lock()
	if err := a.prepare(); err != nil {
		a.report(err)
	}
	a.mu.Unlock()
	go a.write()
	return a, nil
}

// close writes what is queued, stops the writer and releases the database.
func (a *auditLog) close() error {
	if a == nil {
		return nil
	}
	a.closing.Lock()
	if !a.closed {
		a.closed = true
		close(a.queue)
	}
	a.closing.Unlock()
	<-a.written
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, st := range a.stmts {
		st.Close()
	}
	return a.db.Close()
}

// flush waits until every event observed so far has had its write attempt.
func (a *auditLog) flush() {
	if a != nil {
		a.pending.Wait()
	}
}

// write is the writer goroutine. It records waiting events in batches of up
// to auditMaxBatch, one attempt per batch in one transaction: a batch costs
// little more than a single event, because the same rollup and index pages
// are written once. After a quiet spell the first event is written at once;
// while calls keep coming, it lingers up to auditLinger to gather a batch.
func (a *auditLog) write() {
	defer close(a.written)
	var lastWrite time.Time
	for e := range a.queue {
		batch := []auditEvent{e}
		var timer *time.Timer
		var deadline <-chan time.Time
		if time.Since(lastWrite) < auditLinger {
			timer = time.NewTimer(auditLinger)
			deadline = timer.C
		}
	more:
		for len(batch) < auditMaxBatch {
			var next auditEvent
			var ok bool
			if deadline == nil {
				select {
				case next, ok = <-a.queue:
				default:
					break more
				}
			} else {
				select {
				case next, ok = <-a.queue:
				case <-deadline:
					break more
				}
			}
			if !ok {
				break
			}
			batch = append(batch, next)
		}
		if timer != nil {
			timer.Stop()
		}
		a.mu.Lock()
		if err := a.attempt(batch); err != nil {
			a.report(err)
		}
		a.mu.Unlock()
		lastWrite = time.Now()
		a.pending.Add(-len(batch))
	}
}

// report writes the first audit failure to stderr; later ones are silent so a
// broken audit database cannot flood the log. Callers hold a.mu.
func (a *auditLog) report(err error) {
	if a.warned {
		return
	}
	a.warned = true
	fmt.Fprintf(a.warn, "crosstalk-mcp: audit write failed, tool calls are unaffected (further failures are not reported): %v\n", err)
}

// prepare creates or upgrades the version-2 schema. It is a no-op once done.
func (a *auditLog) prepare() error {
	if a.ready {
		return nil
	}
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Dir(a.path), 0o755); err != nil {
		return fmt.Errorf("create audit directory: %w", err)
	}
	var pages int64
	if err := a.db.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		return fmt.Errorf("read audit database size: %w", err)
	}
	if pages == 0 {
		// The mode is recorded in the header only while the file has no tables.
		if _, err := a.db.ExecContext(ctx, "PRAGMA auto_vacuum=INCREMENTAL"); err != nil {
			return fmt.Errorf("set audit auto_vacuum: %w", err)
		}
	}
	var mode string
	if err := a.db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return fmt.Errorf("set audit journal mode: %w", err)
	}
	var version int
	if err := a.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("read audit schema version: %w", err)
	}
	tables, err := tableNames(ctx, a.db)
	if err != nil {
		return err
	}
	if version == auditSchemaVersion && hasAll(tables, auditTables) {
		a.ready = true
		a.prepareStatements(ctx)
		return nil
	}
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin audit schema transaction: %w", err)
	}
	defer tx.Rollback()
	// Re-read inside the write lock: another process may have just done this.
	if tables, err = tableNames(ctx, tx); err != nil {
		return err
	}
	if tables["metadata"] {
		err = auditUpgrade(ctx, tx, tables)
	} else {
		err = auditCreate(ctx, tx, formatTimestamp(a.now()))
	}
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE metadata SET schema_version = ? WHERE id = 1", auditSchemaVersion); err != nil {
		return fmt.Errorf("record audit schema version: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "PRAGMA user_version="+strconv.Itoa(auditSchemaVersion)); err != nil {
		return fmt.Errorf("set audit user_version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit audit schema: %w", err)
	}
	a.ready = true
	a.prepareStatements(ctx)
	return nil
}

// hasAll reports whether set holds every one of names.
func hasAll(set map[string]bool, names []string) bool {
	for _, n := range names {
		if !set[n] {
			return false
		}
	}
	return true
}

// auditCreate lays down a fresh version-2 schema inside tx.
func auditCreate(ctx context.Context, tx *sql.Tx, now string) error {
	for _, script := range []string{auditBaseSchema, auditIndexes, auditRollupSchema()} {
		if _, err := tx.ExecContext(ctx, script); err != nil {
			return fmt.Errorf("create audit schema: %w", err)
		}
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO metadata(id, schema_version, created_at, audit_enabled_at, "+
		"last_retention_cleanup_at, retention_setting) VALUES (1, ?, ?, ?, NULL, NULL)", auditSchemaVersion, now, now)
	if err != nil {
		return fmt.Errorf("create audit metadata: %w", err)
	}
	return nil
}

// auditUpgrade brings a version-1 database (tool_calls without rollups) to
// version 2. The rollups and filter values are backfilled only when the
// newest rollup table is missing, so running it twice counts nothing twice.
func auditUpgrade(ctx context.Context, tx *sql.Tx, tables map[string]bool) error {
	backfill := !tables["analytics_30d"]
	for _, script := range []string{auditRollupSchema(), auditIndexes} {
		if _, err := tx.ExecContext(ctx, script); err != nil {
			return fmt.Errorf("create audit rollups and indexes: %w", err)
		}
	}
	if !backfill {
		return nil
	}
	cols, err := columnNames(ctx, tx, "tool_calls")
	if err != nil {
		return fmt.Errorf("inspect audit tool_calls: %w", err)
	}
	nameColumn := "NULL"
	if cols["name"] {
		nameColumn = "name"
	}
	_, events, err := auditQueryEvents(ctx, tx, "SELECT id, occurred_at, tool_name, group_id, context_id, "+nameColumn+
		", outcome, duration_ms, error_category FROM tool_calls")
	if err != nil {
		return fmt.Errorf("read audit rows to backfill: %w", err)
	}
	if err := auditApplyRollups(ctx, tx.ExecContext, events, 1); err != nil {
		return err
	}
	for _, field := range []string{"tool_name", "name"} {
		if field == "name" && nameColumn == "NULL" {
			continue
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO analytics_filter_values(field, value, label, count) "+
			"SELECT ?, "+field+", "+field+", COUNT(*) FROM tool_calls WHERE "+field+" IS NOT NULL AND "+field+" != '' "+
			"GROUP BY "+field+" ON CONFLICT(field, value) DO UPDATE SET count = count + excluded.count", field)
		if err != nil {
			return fmt.Errorf("backfill audit filter values: %w", err)
		}
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO analytics_filter_values(field, value, label, count) "+
		"SELECT 'group_id', tool_calls.group_id, COALESCE(MAX(tool_call_group_names.group_name), tool_calls.group_id), COUNT(*) "+
		"FROM tool_calls LEFT JOIN tool_call_group_names ON tool_call_group_names.tool_call_id = tool_calls.id "+
		"WHERE tool_calls.group_id IS NOT NULL AND tool_calls.group_id != '' GROUP BY tool_calls.group_id "+
		"ON CONFLICT(field, value) DO UPDATE SET count = count + excluded.count")
	if err != nil {
		return fmt.Errorf("backfill audit group filter values: %w", err)
	}
	return nil
}

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

// auditRollupKey identifies one row of a rollup table.
type auditRollupKey struct {
	table  int
	bucket int64
	dims   [6]string
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
		at, err := auditParseTime(e.occurredAt)
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
		var last sql.NullString
		if err := tx.QueryRowContext(ctx, "SELECT last_retention_cleanup_at FROM metadata WHERE id = 1").Scan(&last); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, 0, fmt.Errorf("read audit cleanup time: %w", err)
		}
		if last.String != "" {
			if t, err := auditParseTime(last.String); err == nil && now.Sub(t) < 24*time.Hour {
				a.nextCleanup = t.Add(24 * time.Hour)
				return true, 0, nil
			}
		}
	}
	ids, events, err := auditQueryEvents(ctx, tx, "SELECT id, occurred_at, tool_name, group_id, context_id, name, outcome, "+
		"duration_ms, error_category FROM tool_calls WHERE occurred_at < ? ORDER BY occurred_at LIMIT ?", cutoff, auditCleanupBatchSize)
	if err != nil {
		return false, 0, fmt.Errorf("read expired audit rows: %w", err)
	}
	if len(ids) > 0 {
		in := "(" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")"
		if _, err := tx.ExecContext(ctx, "DELETE FROM tool_call_group_names WHERE tool_call_id IN "+in, ids...); err != nil {
			return false, 0, fmt.Errorf("delete expired audit group names: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM tool_calls WHERE id IN "+in, ids...); err != nil {
			return false, 0, fmt.Errorf("delete expired audit rows: %w", err)
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
			return false, 0, err
		}
		for _, k := range keys {
			if _, err := tx.ExecContext(ctx, "UPDATE analytics_filter_values SET count = count - ? WHERE field = ? AND value = ?", counts[k], k[0], k[1]); err != nil {
				return false, 0, fmt.Errorf("decrement audit filter values: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM analytics_filter_values WHERE count <= 0"); err != nil {
			return false, 0, fmt.Errorf("drop audit filter values: %w", err)
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

// auditParseTime reads a stored ISO 8601 timestamp as the original's
// datetime.fromisoformat does; one without a zone is UTC.
func auditParseTime(s string) (time.Time, error) {
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

// attach makes srv record every completed tools/call of srv, consulting srv's
// store for group names and members' joined names.
func (a *auditLog) attach(srv *server) {
	if a == nil {
		return
	}
	a.groupName = func(id string) (string, error) {
		meta, err := srv.store.groupMetadata(id)
		return meta.name, err
	}
	a.memberName = func(id, contextID string) (string, error) {
		members, err := srv.store.users(id)
		for _, m := range members {
			if m.contextID == contextID && m.name != "" {
				return m.name, nil
			}
		}
		return "", err
	}
	srv.audit = a.observe
}

// observe queues the record of one completed tools/call and returns at once:
// the tool result is already decided, and the audit database (however slow,
// locked or broken) must not hold it up. The lookups that snapshot the
// group's state happen here, before later calls can change it.
func (a *auditLog) observe(c toolCall) {
	if a == nil {
		return
	}
	e := auditBuildEvent(c, time.Since(c.started))
	if !e.name.Valid && e.groupID.String != "" && e.contextID.String != "" && a.memberName != nil {
		if name, err := a.memberName(e.groupID.String, e.contextID.String); err == nil && name != "" {
			e.name = sql.NullString{String: name, Valid: true}
		}
	}
	// A name read ahead of the record (delete_group's, before the group was
	// destroyed, or a pipelined run's) is kept rather than read again.
	if !c.groupNameRead && e.groupID.String != "" && a.groupName != nil {
		if name, err := a.groupName(e.groupID.String); err == nil {
			e.groupName = name
		}
	}
	a.closing.RLock()
	defer a.closing.RUnlock()
	if a.closed {
		return
	}
	a.pending.Add(1)
	select {
	case a.queue <- e:
	default:
		a.pending.Done()
		if a.dropped.CompareAndSwap(false, true) {
			fmt.Fprintln(a.warn, "crosstalk-mcp: audit writer is behind; dropping audit events (reported once)")
		}
	}
}

// attempt prepares the schema if needed, records events and runs due
// retention: one attempt, whose failure loses these events only.
func (a *auditLog) attempt(events []auditEvent) error {
	if err := a.prepare(); err != nil {
		return err
	}
	ctx := context.Background()
	if err := a.record(ctx, events...); err != nil {
		return err
	}
	_, err := a.cleanup(ctx)
	return err
}

// auditCallerNameTools are the tools whose "name" argument is the caller's
// own label, and so a fallback for a missing caller_name.
var auditCallerNameTools = map[string]bool{
	"join_group": true, "leave_group": true, "get_all_messages": true, "get_latest_messages": true,
	"get_unread_messages": true, "get_messages_after": true, "search_messages": true, "send_message": true,
}

// auditBuildEvent turns a completed call into its row, before the lookups
// that need the group store (member-name fallback, group-name snapshot).
// Identity comes from the arguments; only a successful create_group takes
// its group from the result.
func auditBuildEvent(c toolCall, elapsed time.Duration) auditEvent {
	e := auditEvent{
		occurredAt: formatTimestamp(c.started),
		toolName:   c.name,
		outcome:    "success",
		durationMS: max(0, int64(math.RoundToEven(float64(elapsed)/float64(time.Millisecond)))),
		groupName:  c.groupName,
	}
	if id, ok := auditRequestID(c.requestID); ok {
		e.requestID = sql.NullString{String: id, Valid: true}
	}
	if s, ok := c.args.str("group_id"); ok {
		e.groupID = sql.NullString{String: s, Valid: true}
	}
	if s, ok := c.args.str("context_id"); ok {
		e.contextID = sql.NullString{String: s, Valid: true}
	}
	name, _ := c.args.str("caller_name")
	if pyStrip(name) == "" && auditCallerNameTools[c.name] {
		name, _ = c.args.str("name")
	}
	if name = pyStrip(name); name != "" {
		e.name = sql.NullString{String: name, Valid: true}
	}
	result := c.result.value
	if c.result.isError {
		e.outcome = "error"
		category := c.result.category
		if category == "" {
			category = categoryInternal
		}
		e.errorCategory = sql.NullString{String: category, Valid: true}
	} else if c.name == "create_group" {
		if s, ok := auditResultString(result, "group_id"); ok {
			e.groupID = sql.NullString{String: s, Valid: true}
		}
	}
	if n, ok := auditResultLen(result, "messages"); ok {
		e.resultCount = sql.NullInt64{Int64: int64(n), Valid: true}
	}
	if !c.result.isError {
		if details, ok := auditDetails(c.name, result); ok {
			e.detailsJSON = sql.NullString{String: details, Valid: true}
		}
	}
	return e
}

// auditResultField returns a key of a tool result value: an object built by
// the tools, or a map decoded from JSON.
func auditResultField(v any, key string) (any, bool) {
	switch v := v.(type) {
	case object:
		for _, f := range v {
			if f.key == key {
				return f.value, true
			}
		}
	case map[string]any:
		value, ok := v[key]
		return value, ok
	}
	return nil, false
}

// auditResultString returns a string-valued key of a tool result.
func auditResultString(v any, key string) (string, bool) {
	value, _ := auditResultField(v, key)
	switch value := value.(type) {
	case string:
		return value, true
	case *string:
		if value != nil {
			return *value, true
		}
	}
	return "", false
}

// auditResultLen returns the length of a list-valued key of a tool result.
func auditResultLen(v any, key string) (int, bool) {
	value, _ := auditResultField(v, key)
	switch value := value.(type) {
	case []any:
		return len(value), true
	case stringList:
		return len(value), true
	case []string:
		return len(value), true
	case messageList:
		return len(value), true
	}
	return 0, false
}

// auditString reports the value of a JSON string.
func auditString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// auditRequestID renders a JSON-RPC id as the original's str() does: a string
// as-is, an integer as its digits, a fraction as a Python float.
func auditRequestID(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	if s, ok := auditString(raw); ok {
		return s, true
	}
	switch string(raw) {
	case "true":
		return "True", true
	case "false":
		return "False", true
	}
	return pyNumber(string(raw)), true
}

// pyNumber renders a JSON number literal as Python prints the value it
// decodes to: integers exactly ("-0" is "0"), other numbers as floats.
func pyNumber(lit string) string {
	if digits := strings.TrimPrefix(lit, "-"); digits != "" && strings.Trim(digits, "0123456789") == "" {
		if strings.TrimLeft(digits, "0") == "" {
			return "0"
		}
		return lit
	}
	if f, err := strconv.ParseFloat(lit, 64); err == nil {
		return pyFloatRepr(f)
	}
	return lit
}

// pyFloatRepr formats f like Python's repr(float): shortest digits, fixed
// notation with at least one decimal for exponents in [-4, 16).
func pyFloatRepr(f float64) string {
	if math.IsInf(f, 0) {
		return map[bool]string{true: "inf", false: "-inf"}[f > 0]
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expText, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expText)
	sign := ""
	if strings.HasPrefix(mant, "-") {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := fmt.Sprintf("%+03d", exp)
		return sign + m + "e" + es
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

// auditDetails builds the allowlisted, content-free summary of a successful
// result, or reports false when the tool has none or it exceeds 2 KiB.
func auditDetails(tool string, result any) (string, bool) {
	details := map[string]any{}
	switch tool {
	case "create_group":
		if s, ok := auditResultString(result, "group_id"); ok {
			details["created_group_id"] = s
		}
	case "list_groups":
		if n, ok := auditResultLen(result, "groups"); ok {
			details["group_count"] = n
		}
	case "update_group_metadata":
		fields := []any{}
		for _, f := range []string{"description", "name"} {
			if _, ok := auditResultField(result, f); ok {
				fields = append(fields, f)
			}
		}
		details["updated_fields"] = fields
	case "get_users":
		if n, ok := auditResultLen(result, "users"); ok {
			details["member_count"] = n
		}
	case "delete_group", "join_group", "leave_group":
		details["completed"] = true
	case "get_all_messages", "get_latest_messages", "get_unread_messages", "get_messages_after", "search_messages":
		if n, ok := auditResultLen(result, "messages"); ok {
			details["message_count"] = n
		}
	case "send_message":
		for _, key := range []string{"message_id", "priority", "routing_reason"} {
			if v, ok := auditResultField(result, key); ok {
				if n, isNumber := v.(json.Number); isNumber {
					v = rawJSON(pyNumber(string(n)))
				}
				details[key] = v
			}
		}
		if n, ok := auditResultLen(result, "wakeup_targets"); ok {
			details["wakeup_target_count"] = n
		}
	}
	if len(details) == 0 {
		return "", false
	}
	// The original writes json.dumps(details, sort_keys=True,
	// separators=(",", ":"), ensure_ascii=False).
	keys := make([]string, 0, len(details))
	for k := range details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sorted := make(object, len(keys))
	for i, k := range keys {
		sorted[i] = field{k, details[k]}
	}
	text := pyCompact.encode(sorted)
	if len(text) > auditDetailsMaxBytes {
		return "", false
	}
	return text, true
}
