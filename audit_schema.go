package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// auditResolution is one rollup resolution: the suffix of its two tables,
// analytics_<suffix> and analytics_latency_<suffix>, and its bucket width.
type auditResolution struct {
	suffix  string
	seconds int64
}

// auditResolutions are the rollup resolutions, finest first; every list of
// rollup tables derives from it. The last, auditCoarsest, sums all history
// in the fewest rows.
var (
	auditResolutions = []auditResolution{{"1m", 60}, {"1h", 3600}, {"1d", 86400}, {"30d", 30 * 86400}}
	auditCoarsest    = auditResolutions[len(auditResolutions)-1]
)

// auditSchemaVersion is the schema this program writes, in metadata and
// PRAGMA user_version.
const auditSchemaVersion = 2

// auditHistoryTables are the tables "Delete audit history" empties: the raw
// rows, their group-name snapshots, and everything derived from them. The
// group catalog and the metadata row stay.
var auditHistoryTables = func() []string {
	tables := []string{"tool_call_group_names", "tool_calls"}
	for _, r := range auditResolutions {
		tables = append(tables, "analytics_"+r.suffix, "analytics_latency_"+r.suffix)
	}
	return append(tables, "analytics_filter_values")
}()

// auditTables are the tables a complete version-2 audit schema has.
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

// prepare creates the directory and, unless the file is at version 2 with
// every table (so a lock held elsewhere holds up no start), sets its modes
// (auto-vacuum, which SQLite records only while the file has no tables, and
// WAL) and creates or upgrades the schema. It is a no-op while the path names the file it
// prepared; otherwise it opens the path afresh, as the file was deleted or
// replaced (rows written to the old one would be lost) or a write failed.
func (a *auditLog) prepare() error {
	if info, err := os.Stat(a.path); a.file != nil && err == nil && os.SameFile(info, a.file) {
		return nil
	}
	a.db.Close()
	unlockSidecars(a.path)
	a.db = openAuditDB(a.path)
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Dir(a.path), 0o755); err != nil {
		return fmt.Errorf("create audit directory: %w", err)
	}
	var current bool
	if err := a.db.QueryRowContext(ctx, "SELECT (SELECT user_version FROM pragma_user_version) = ? AND (SELECT COUNT(*) FROM sqlite_master "+
		"WHERE type = 'table' AND name IN ('"+strings.Join(auditTables, "', '")+"')) = ?", auditSchemaVersion, len(auditTables)).Scan(&current); err != nil {
		return fmt.Errorf("read audit schema version: %w", err)
	}
	if !current {
		if _, err := a.db.ExecContext(ctx, "PRAGMA auto_vacuum=INCREMENTAL; PRAGMA journal_mode=WAL"); err != nil {
			return fmt.Errorf("set audit file modes: %w", err)
		}
		if err := a.migrate(ctx); err != nil {
			return err
		}
	}
	a.file, _ = os.Stat(a.path) // nil, so prepared again, if it has gone since
	return nil
}

// migrate creates the version-2 schema, or upgrades an older one, in one
// transaction, and records the version. A new file is upgraded from the
// bare tables, its backfill counting no rows.
func (a *auditLog) migrate(ctx context.Context) error {
	tx, err := a.begin(ctx)
	if err != nil {
		return fmt.Errorf("begin audit schema transaction: %w", err)
	}
	defer tx.Rollback()
	// Re-read inside the write lock: another process may have just done this.
	tables, err := tableNames(ctx, tx)
	if err != nil {
		return err
	}
	if !tables["metadata"] {
		now := formatTimestamp(a.now())
		if _, err := tx.ExecContext(ctx, auditBaseSchema); err != nil {
			return fmt.Errorf("create audit schema: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO metadata(id, schema_version, created_at, audit_enabled_at) "+
			"VALUES (1, ?, ?, ?)", auditSchemaVersion, now, now); err != nil {
			return fmt.Errorf("create audit metadata: %w", err)
		}
	}
	if err := auditUpgrade(ctx, tx, tables); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("UPDATE metadata SET schema_version = %[1]d WHERE id = 1; "+
		"PRAGMA user_version = %[1]d", auditSchemaVersion)); err != nil {
		return fmt.Errorf("record audit schema version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit audit schema: %w", err)
	}
	return nil
}

// auditUpgrade brings a version-1 database (tool_calls without rollups), or
// a new one, to version 2. The rollups and filter values are backfilled only
// when the newest rollup table is missing, so nothing is counted twice; as in
// the original, a group is labelled with its greatest recorded name.
func auditUpgrade(ctx context.Context, tx *sql.Tx, tables map[string]bool) error {
	for _, script := range []string{auditRollupSchema(), auditIndexes} {
		if _, err := tx.ExecContext(ctx, script); err != nil {
			return fmt.Errorf("create audit rollups and indexes: %w", err)
		}
	}
	if tables["analytics_30d"] {
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
	return auditApplyRollups(ctx, tx, auditRollupStatements(nameColumn, "COALESCE(MAX(group_name), group_id)", "1", 1))
}
