package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

const (
	// groupSchemaVersion is the user_version of a group database.
	groupSchemaVersion = 1
	// catalogFileName is the file that holds the group catalog beside the
	// audit log's tables.
	catalogFileName = "observability.sqlite3"
)

// groupSchema is the original's group database layout, version 1.
var groupSchema = []string{
	`CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sender_context_id TEXT NOT NULL,
    sender_name TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at TEXT NOT NULL,
    priority TEXT NOT NULL DEFAULT 'normal',
    mentions TEXT NOT NULL DEFAULT '[]',
    wakeup_targets TEXT NOT NULL DEFAULT '[]',
    routing_reason TEXT NOT NULL DEFAULT 'fallback'
)`,
	`CREATE INDEX IF NOT EXISTS messages_by_sender_and_id ON messages(sender_context_id, id)`,
	`CREATE TABLE IF NOT EXISTS group_message_metrics (
    metric TEXT NOT NULL,
    value TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (metric, value)
)`,
	`CREATE TABLE IF NOT EXISTS group_metadata (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    creator_context_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS group_members (
    context_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    joined_at TEXT NOT NULL,
    latest_message_id INTEGER,
    unread_count INTEGER NOT NULL DEFAULT 0
)`,
	`CREATE TABLE IF NOT EXISTS member_unread_messages (
    context_id TEXT NOT NULL,
    message_id INTEGER NOT NULL,
    PRIMARY KEY (context_id, message_id)
)`,
	`CREATE INDEX IF NOT EXISTS member_unread_messages_by_message ON member_unread_messages(message_id)`,
	`CREATE TABLE IF NOT EXISTS wakeup_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id INTEGER NOT NULL,
    context_id TEXT NOT NULL,
    relevance TEXT NOT NULL,
    priority TEXT NOT NULL DEFAULT 'normal',
    created_at TEXT NOT NULL,
    acknowledged_at TEXT,
    last_notified_at TEXT,
    UNIQUE(message_id, context_id)
)`,
	`CREATE INDEX IF NOT EXISTS wakeup_events_by_context ON wakeup_events(context_id, id)`,
	`CREATE TABLE IF NOT EXISTS group_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    message_revision INTEGER NOT NULL DEFAULT 0,
    member_revision INTEGER NOT NULL DEFAULT 0,
    wakeup_revision INTEGER NOT NULL DEFAULT 0,
    metadata_revision INTEGER NOT NULL DEFAULT 0
)`,
	// The trigram index makes LIKE '%x%' searches indexable; detail='none'
	// keeps it small because only rowids are needed.
	`CREATE VIRTUAL TABLE IF NOT EXISTS message_search USING fts5(content, content='messages', content_rowid='id', tokenize='trigram', detail='none')`,
	`CREATE TRIGGER IF NOT EXISTS messages_search_after_insert
AFTER INSERT ON messages BEGIN
    INSERT INTO message_search(rowid, content) VALUES (new.id, new.content);
END`,
	`CREATE TRIGGER IF NOT EXISTS messages_search_after_delete
AFTER DELETE ON messages BEGIN
    INSERT INTO message_search(message_search, rowid, content) VALUES ('delete', old.id, old.content);
END`,
	`CREATE TRIGGER IF NOT EXISTS messages_search_after_content_update
AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO message_search(message_search, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO message_search(rowid, content) VALUES (new.id, new.content);
END`,
}

// initGroup creates group id's database with its schema and metadata. It
// is built under a temporary name and renamed (buildGroupFile), so no
// server ever sees the file without its schema.
func (s *store) initGroup(id, contextID, name, description string) error {
	return buildGroupFile(s.dir, id, func(tx *sql.Tx) error {
		if err := execAll(tx, groupSchema...); err != nil {
			return err
		}
		now := s.timestamp()
		if _, err := tx.Exec("INSERT OR IGNORE INTO group_metadata(id, name, description, creator_context_id, created_at, updated_at) VALUES (1, ?, ?, ?, ?, ?)",
			name, description, contextID, now, now); err != nil {
			return err
		}
		return execAll(tx, "INSERT OR IGNORE INTO group_state(id) VALUES (1)", fmt.Sprintf("PRAGMA user_version = %d", groupSchemaVersion))
	})
}

// catalog returns the catalog database, creating its file and table on
// first use, and afresh once the file is deleted or replaced. A failure is
// not remembered: the next call tries again.
func (s *store) catalog() (*sql.DB, error) {
	s.catalogMu.Lock()
	defer s.catalogMu.Unlock()
	path := filepath.Join(s.dir, catalogFileName)
	if s.catalogDB != nil {
		if info, err := os.Stat(path); err == nil && os.SameFile(info, s.catalogFile) {
			return s.catalogDB, nil
		}
		s.catalogDB.Close() // the file was deleted or replaced: rows written to it are lost
		s.catalogDB = nil
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil { // removed since start-up, as clearing ~/.cache does
		return nil, fmt.Errorf("create groups directory: %w", err)
	}
	unlockSidecars(path)
	db := openSQLite(sqliteDSN(path, "rwc"), 2)
	err := retryBusy(func() error {
		// auto_vacuum only takes effect before the file's first table, and
		// setting it takes the write lock, which an audit clean-up may hold
		// for seconds: it is set in a new file only. Both settings persist
		// in the file, like the original's catalog.
		tables, err := tableNames(context.Background(), db)
		if err != nil {
			return err
		}
		stmts := []string{"PRAGMA journal_mode=WAL",
			"CREATE TABLE IF NOT EXISTS groups (group_id TEXT PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL, created_at TEXT, updated_at TEXT NOT NULL)"}
		if len(tables) == 0 {
			stmts = slices.Insert(stmts, 0, "PRAGMA auto_vacuum=INCREMENTAL")
		}
		return execAll(db, stmts...)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialize catalog: %w", err)
	}
	s.catalogDB = db
	s.catalogFile, _ = os.Stat(path)
	return db, nil
}

// closeCatalog closes the cached catalog handle, if any.
func (s *store) closeCatalog() {
	s.catalogMu.Lock()
	defer s.catalogMu.Unlock()
	if s.catalogDB != nil {
		s.catalogDB.Close()
		s.catalogDB = nil
	}
}

// queryer is what *sql.DB, *sql.Conn and *sql.Tx offer.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// queryAll runs query and turns every row into a T with scan.
func queryAll[T any](ctx context.Context, q queryer, scan func(rowScanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	return collectRows(rows, err, scan)
}

// tableNames lists the tables of a database.
func tableNames(ctx context.Context, q queryer) (map[string]bool, error) {
	return nameSet(ctx, q, "list tables", "SELECT name FROM sqlite_master WHERE type = 'table'")
}

// columnNames lists the columns of table.
func columnNames(ctx context.Context, q queryer, table string) (map[string]bool, error) {
	return nameSet(ctx, q, "list columns of "+table, "SELECT name FROM pragma_table_info(?)", table)
}

// nameSet returns the names query lists; what says what failed.
func nameSet(ctx context.Context, q queryer, what, query string, args ...any) (map[string]bool, error) {
	list, err := queryAll(ctx, q, func(row rowScanner) (name string, err error) { return name, row.Scan(&name) }, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return setOf(list), nil
}

// execAll runs queries on db in order, stopping at the first failure.
func execAll(db interface {
	Exec(query string, args ...any) (sql.Result, error)
}, queries ...string) error {
	for _, q := range queries {
		if _, err := db.Exec(q); err != nil {
			return err
		}
	}
	return nil
}
