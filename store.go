package main

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// store keeps one SQLite database per group in dir, plus the group catalog in
// observability.sqlite3. Several server processes, Python or Go, may share dir
// at once, so every write is an IMMEDIATE transaction and nothing is cached
// that another process could change, except open database handles, which are
// checked against the file's identity before each use.
type store struct {
	dir string
	now func() time.Time

	mu      sync.Mutex
	handles map[string]*groupHandle

	catalogMu sync.Mutex
	catalogDB *sql.DB // nil until first use
}

// groupHandle is the open database of one group file: a small pool for
// reads and one dedicated connection for this process's write transactions.
type groupHandle struct {
	// inUse is held for reading while an operation uses db and for writing
	// while db is closed, so a handle is never closed under a running query.
	inUse    sync.RWMutex
	db       *sql.DB
	info     os.FileInfo
	lastUsed time.Time

	// writeMu serializes write transactions on conn, the connection whose
	// prepared statements stmts keeps: preparing a statement costs more
	// than running it, and a send runs about ten.
	writeMu sync.Mutex
	conn    *sql.Conn
	stmts   map[string]*sql.Stmt
}

// groupTx is a write transaction on a group handle's dedicated connection.
type groupTx struct{ h *groupHandle }

// stmt returns the prepared statement for q on the write connection.
func (t groupTx) stmt(q string) (*sql.Stmt, error) {
	if st := t.h.stmts[q]; st != nil {
		return st, nil
	}
	st, err := t.h.conn.PrepareContext(context.Background(), q)
	if err != nil {
		return nil, err
	}
	t.h.stmts[q] = st
	return st, nil
}

func (t groupTx) Exec(q string, args ...any) (sql.Result, error) {
	st, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

func (t groupTx) Query(q string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}

// QueryRow is sql.Tx.QueryRow on a prepared statement; a preparation error
// surfaces from Scan.
func (t groupTx) QueryRow(q string, args ...any) rowScanner {
	st, err := t.stmt(q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRow(args...)
}

// rowScanner is the Scan of an *sql.Row.
type rowScanner interface{ Scan(dest ...any) error }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// write runs fn in one BEGIN IMMEDIATE transaction on the write connection:
// a deferred transaction that reads and then writes fails at once with
// SQLITE_BUSY_SNAPSHOT when another process committed in between.
func (h *groupHandle) write(fn func(tx groupTx) error) error {
	ctx := context.Background()
	h.writeMu.Lock()
	defer h.writeMu.Unlock()
	if h.conn == nil {
		conn, err := h.db.Conn(ctx)
		if err != nil {
			return err
		}
		h.conn, h.stmts = conn, map[string]*sql.Stmt{}
	}
	tx := groupTx{h}
	if _, err := tx.Exec("BEGIN IMMEDIATE"); err != nil {
		return err
	}
	err := fn(tx)
	if err == nil {
		_, err = tx.Exec("COMMIT")
	}
	if err != nil {
		// After a failed COMMIT SQLite may still hold the transaction open.
		tx.Exec("ROLLBACK")
	}
	return err
}

// writeGroup runs fn in a write transaction on group id.
func (s *store) writeGroup(id string, fn func(tx groupTx) error) error {
	return s.withHandle(id, func(h *groupHandle) error { return h.write(fn) })
}

const (
	groupSchemaVersion = 1
	catalogFileName    = "observability.sqlite3"

	// maxOpenGroups bounds the file descriptors held for cached group
	// handles; the least recently used handle is closed beyond it.
	maxOpenGroups = 32

	// busyRetryWindow is how long a whole operation is retried while SQLite
	// reports the database busy or locked. SQLite's own busy handler is not
	// fair between processes, so each attempt waits only 100 ms
	// (busy_timeout) and the retry loop adds backoff with jitter.
	busyRetryWindow = 3 * time.Second

	wakeupReminderInterval      = 300 * time.Second
	acknowledgedWakeupRetention = 7 * 24 * time.Hour
)

// newStore creates dir if needed. The catalog is opened on first use, so
// that starting a server costs no database work before initialize.
func newStore(dir string) (*store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create groups directory: %w", err)
	}
	return &store{dir: dir, now: time.Now, handles: map[string]*groupHandle{}}, nil
}

// catalog returns the catalog database, creating its file and table on
// first use. A failure is not remembered: the next call tries again.
func (s *store) catalog() (*sql.DB, error) {
	s.catalogMu.Lock()
	defer s.catalogMu.Unlock()
	if s.catalogDB != nil {
		return s.catalogDB, nil
	}
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(s.dir, catalogFileName), "rwc"))
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	db.SetMaxOpenConns(2)
	err = retryBusy(func() error {
		// auto_vacuum only takes effect before the file's first table; both
		// settings persist in the file, like the original's catalog.
		for _, q := range []string{
			"PRAGMA auto_vacuum=INCREMENTAL",
			"PRAGMA journal_mode=WAL",
			"CREATE TABLE IF NOT EXISTS groups (group_id TEXT PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL, created_at TEXT, updated_at TEXT NOT NULL)",
		} {
			if _, err := db.Exec(q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialize catalog: %w", err)
	}
	s.catalogDB = db
	return db, nil
}

// close releases every cached database handle.
func (s *store) close() {
	s.mu.Lock()
	handles := s.handles
	s.handles = map[string]*groupHandle{}
	s.mu.Unlock()
	for _, h := range handles {
		h.close()
	}
	s.catalogMu.Lock()
	if s.catalogDB != nil {
		s.catalogDB.Close()
		s.catalogDB = nil
	}
	s.catalogMu.Unlock()
}

func (h *groupHandle) close() {
	h.inUse.Lock()
	defer h.inUse.Unlock()
	for _, st := range h.stmts {
		st.Close()
	}
	if h.conn != nil {
		h.conn.Close()
	}
	h.db.Close()
}

// timestamp returns the current time in the on-disk format.
func (s *store) timestamp() string { return formatTimestamp(s.now()) }

// sqliteDSN builds a modernc.org/sqlite data source name for an SQLite URI.
// Per-connection settings must live in the DSN because database/sql pools
// connections; mode "rw" never creates a file, so a group deleted by another
// process cannot be resurrected by a new pooled connection.
func sqliteDSN(path, mode string) string {
	p := filepath.ToSlash(path)
	if filepath.VolumeName(path) != "" {
		p = "/" + p
	}
	q := url.Values{}
	q.Set("mode", mode)
	q.Add("_pragma", "busy_timeout(100)")
	q.Set("_txlock", "immediate")
	return "file:" + (&url.URL{Path: p}).EscapedPath() + "?" + q.Encode()
}

// validateGroupID accepts only the ids create_group makes: "grp_" and 32
// lowercase hex digits. It runs before any path is built from an id.
func validateGroupID(id string) error {
	if len(id) != 36 || !strings.HasPrefix(id, "grp_") {
		return validationErrorf("Invalid group_id.")
	}
	for _, c := range id[4:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return validationErrorf("Invalid group_id.")
		}
	}
	return nil
}

func (s *store) groupPath(id string) string { return groupPath(s.dir, id) }

// groupPath is the database file of group id in dir; id must already be a
// valid group id. The dashboard, which has a directory but no store, uses it
// directly.
func groupPath(dir, id string) string { return filepath.Join(dir, id+".sqlite3") }

// withGroup runs fn with the open database of an existing group.
func (s *store) withGroup(id string, fn func(db *sql.DB) error) error {
	return s.withHandle(id, func(h *groupHandle) error { return fn(h.db) })
}

// withHandle runs fn with the handle of an existing group.
func (s *store) withHandle(id string, fn func(h *groupHandle) error) error {
	h, err := s.acquire(id)
	if err != nil {
		return err
	}
	err = fn(h)
	h.inUse.RUnlock()
	if err != nil && !isBusy(err) && !s.groupExists(id) {
		// The file went away under this operation: another process
		// deleted the group. Report that, not the SQLite error.
		return groupNotFound(id)
	}
	return err
}

// acquire returns the cached handle for group id, read-locked, reopening it
// when the file on disk is no longer the one the handle was opened on.
func (s *store) acquire(id string) (*groupHandle, error) {
	if err := validateGroupID(id); err != nil {
		return nil, err
	}
	path := s.groupPath(id)
	info, err := os.Stat(path)
	if err != nil || !info.Mode().IsRegular() {
		s.forget(id)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil, groupNotFound(id)
		}
		return nil, fmt.Errorf("stat group %s: %w", id, err)
	}
	var stale []*groupHandle
	s.mu.Lock()
	h := s.handles[id]
	if h != nil && !os.SameFile(h.info, info) {
		stale = append(stale, h)
		h = nil
	}
	if h == nil {
		db, err := sql.Open("sqlite", sqliteDSN(path, "rw"))
		if err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("open group %s: %w", id, err)
		}
		// One connection is kept for writes; the others serve reads, such
		// as the subscription poller's, without waiting for a write.
		db.SetMaxOpenConns(3)
		db.SetMaxIdleConns(3)
		h = &groupHandle{db: db, info: info}
		s.handles[id] = h
		stale = append(stale, s.evictLocked(id)...)
	}
	h.lastUsed = time.Now()
	h.inUse.RLock()
	s.mu.Unlock()
	for _, old := range stale {
		old.close()
	}
	return h, nil
}

// evictLocked removes the least recently used handles beyond maxOpenGroups,
// never keep's, and returns them for closing outside s.mu.
func (s *store) evictLocked(keep string) []*groupHandle {
	var evicted []*groupHandle
	for len(s.handles) > maxOpenGroups {
		oldestID := ""
		for id, h := range s.handles {
			if id != keep && (oldestID == "" || h.lastUsed.Before(s.handles[oldestID].lastUsed)) {
				oldestID = id
			}
		}
		evicted = append(evicted, s.handles[oldestID])
		delete(s.handles, oldestID)
	}
	return evicted
}

// forget closes and drops the cached handle of group id, if any.
func (s *store) forget(id string) {
	s.mu.Lock()
	h := s.handles[id]
	delete(s.handles, id)
	s.mu.Unlock()
	if h != nil {
		h.close()
	}
}

// groupExists reports whether the database file of a valid group id exists.
func (s *store) groupExists(id string) bool { return groupExists(s.dir, id) }

// groupExists reports whether dir holds the database file of a valid group
// id; the dashboard tells a deleted group by it.
func groupExists(dir, id string) bool {
	if validateGroupID(id) != nil {
		return false
	}
	info, err := os.Stat(groupPath(dir, id))
	return err == nil && info.Mode().IsRegular()
}

// isBusy reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED, in any
// extended form.
func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}

// retryBusy runs op until it succeeds, fails with anything but busy/locked,
// or busyRetryWindow has passed, sleeping with doubling backoff and jitter
// between attempts so that competing processes spread out.
func retryBusy(op func() error) error {
	deadline := time.Now().Add(busyRetryWindow)
	delay := 25 * time.Millisecond
	for {
		err := op()
		if err == nil || !isBusy(err) {
			return err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return err
		}
		sleep := delay/2 + rand.N(delay/2+1)
		time.Sleep(min(sleep, remaining))
		delay = min(delay*2, 400*time.Millisecond)
	}
}

// inTx runs fn in one IMMEDIATE transaction (the DSN's _txlock): a deferred
// transaction that reads and then writes fails at once with
// SQLITE_BUSY_SNAPSHOT when another process committed in between.
func inTx(db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

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

// groupMeta is a group's metadata as get_group_metadata and the catalog
// report it. createdAt is nil only for catalog rows written without one.
type groupMeta struct {
	groupID     string
	name        string
	description string
	createdAt   *string
	updatedAt   *string
}

// createGroup makes a new group database owned by contextID. A failure
// removes every file it created, so a retried call leaves no orphan.
func (s *store) createGroup(contextID, name, description string) (groupMeta, error) {
	id := "grp_" + randomHex(16)
	path := s.groupPath(id)
	if err := s.initGroup(path, contextID, name, description); err != nil {
		removeDatabaseFiles(path)
		return groupMeta{}, fmt.Errorf("create group %s: %w", id, err)
	}
	meta, err := s.groupMetadata(id)
	if err != nil {
		return groupMeta{}, err
	}
	s.upsertCatalog(meta)
	return meta, nil
}

func (s *store) initGroup(path, contextID, name, description string) error {
	db, err := sql.Open("sqlite", sqliteDSN(path, "rwc"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("PRAGMA journal_mode=WAL"); err != nil {
		return err
	}
	return inTx(db, func(tx *sql.Tx) error {
		for _, q := range groupSchema {
			if _, err := tx.Exec(q); err != nil {
				return err
			}
		}
		now := s.timestamp()
		if _, err := tx.Exec("INSERT OR IGNORE INTO group_metadata(id, name, description, creator_context_id, created_at, updated_at) VALUES (1, ?, ?, ?, ?, ?)",
			name, description, contextID, now, now); err != nil {
			return err
		}
		if _, err := tx.Exec("INSERT OR IGNORE INTO group_state(id) VALUES (1)"); err != nil {
			return err
		}
		_, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", groupSchemaVersion))
		return err
	})
}

// removeDatabaseFiles deletes a database and the -wal and -shm files SQLite
// keeps beside it in WAL mode.
func removeDatabaseFiles(path string) error {
	var errs []error
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// upsertCatalog records meta in the catalog. The catalog is only an index
// that listGroups repairs, so a failure here does not fail the operation.
func (s *store) upsertCatalog(meta groupMeta) {
	updated := ""
	if meta.updatedAt != nil {
		updated = *meta.updatedAt
	}
	err := retryBusy(func() error {
		cat, err := s.catalog()
		if err != nil {
			return err
		}
		_, err = cat.Exec("INSERT INTO groups(group_id, name, description, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "+
			"ON CONFLICT(group_id) DO UPDATE SET name = excluded.name, description = excluded.description, "+
			"created_at = excluded.created_at, updated_at = excluded.updated_at",
			meta.groupID, meta.name, meta.description, meta.createdAt, updated)
		return err
	})
	if err != nil {
		logf("update catalog for %s: %v", meta.groupID, err)
	}
}

// listGroups returns every group database in dir with its catalog metadata,
// sorted by id. Stale catalog rows are removed and missing ones added.
func (s *store) listGroups() ([]groupMeta, error) {
	names, err := filepath.Glob(filepath.Join(s.dir, "grp_*.sqlite3"))
	if err != nil {
		return nil, err
	}
	onDisk := map[string]bool{}
	for _, name := range names {
		id := strings.TrimSuffix(filepath.Base(name), ".sqlite3")
		if validateGroupID(id) == nil {
			onDisk[id] = true
		}
	}
	catalog := map[string]groupMeta{}
	cat, err := s.catalog()
	if err != nil {
		return nil, err
	}
	rows, err := cat.Query("SELECT group_id, name, description, created_at, updated_at FROM groups")
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	for rows.Next() {
		var m groupMeta
		if err := rows.Scan(&m.groupID, &m.name, &m.description, &m.createdAt, &m.updatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read catalog: %w", err)
		}
		catalog[m.groupID] = m
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	for id := range catalog {
		if !onDisk[id] {
			if _, err := cat.Exec("DELETE FROM groups WHERE group_id = ?", id); err != nil {
				return nil, fmt.Errorf("remove stale catalog row %s: %w", id, err)
			}
		}
	}
	groups := make([]groupMeta, 0, len(onDisk))
	for id := range onDisk {
		m, ok := catalog[id]
		if !ok {
			var err error
			if m, err = s.groupMetadata(id); err == nil {
				s.upsertCatalog(m)
			} else {
				m = groupMeta{groupID: id}
			}
		}
		groups = append(groups, m)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].groupID < groups[j].groupID })
	return groups, nil
}

// groupMetadata reads a group's metadata row.
func (s *store) groupMetadata(id string) (groupMeta, error) {
	m := groupMeta{groupID: id}
	err := s.withGroup(id, func(db *sql.DB) error {
		var created, updated string
		err := db.QueryRow("SELECT name, description, created_at, updated_at FROM group_metadata WHERE id = 1").
			Scan(&m.name, &m.description, &created, &updated)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		m.createdAt, m.updatedAt = &created, &updated
		return err
	})
	return m, err
}

// updateGroupMetadata changes name and/or description; only the creator may.
func (s *store) updateGroupMetadata(id, contextID string, name, description *string) (groupMeta, error) {
	err := s.writeGroup(id, func(tx groupTx) error {
		var curName, curDesc, creator string
		err := tx.QueryRow("SELECT name, description, creator_context_id FROM group_metadata WHERE id = 1").Scan(&curName, &curDesc, &creator)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && creator != contextID) {
			return authorizationErrorf("Only the context that created this group can update its metadata.")
		}
		if err != nil {
			return err
		}
		if name != nil {
			curName = *name
		}
		if description != nil {
			curDesc = *description
		}
		if _, err := tx.Exec("UPDATE group_metadata SET name = ?, description = ?, updated_at = ? WHERE id = 1",
			curName, curDesc, s.timestamp()); err != nil {
			return err
		}
		return bumpRevisions(tx, revMetadata)
	})
	if err != nil {
		return groupMeta{}, err
	}
	meta, err := s.groupMetadata(id)
	if err != nil {
		return groupMeta{}, err
	}
	s.upsertCatalog(meta)
	return meta, nil
}

// deleteGroup removes a group's database, sidecar files and catalog row;
// only the creator may. This process closes its own handle first, because a
// deleted file written through an old handle would lose those writes.
func (s *store) deleteGroup(id, contextID string) error {
	if err := validateGroupID(id); err != nil {
		return err
	}
	if !s.groupExists(id) {
		return &domainError{category: categoryNotFound,
			msg: "Group does not exist: " + id + ". It may already have been deleted."}
	}
	var creator string
	err := s.withGroup(id, func(db *sql.DB) error {
		err := db.QueryRow("SELECT creator_context_id FROM group_metadata WHERE id = 1").Scan(&creator)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if creator == "" || creator != contextID {
		return authorizationErrorf("Only the context that created this group can delete it.")
	}
	s.forget(id)
	if err := removeDatabaseFiles(s.groupPath(id)); err != nil {
		return fmt.Errorf("delete group %s: %w", id, err)
	}
	if err := retryBusy(func() error {
		cat, err := s.catalog()
		if err != nil {
			return err
		}
		_, err = cat.Exec("DELETE FROM groups WHERE group_id = ?", id)
		return err
	}); err != nil {
		logf("remove catalog row for %s: %v", id, err)
	}
	return nil
}

// revision names a group_state counter that observers poll.
type revision int

const (
	revMessage revision = 1 << iota
	revMember
	revWakeup
	revMetadata
)

// bumpRevisions advances the group_state counters named by which.
func bumpRevisions(tx groupTx, which revision) error {
	var fields []string
	for _, r := range []struct {
		bit   revision
		field string
	}{{revMessage, "message_revision"}, {revMember, "member_revision"}, {revWakeup, "wakeup_revision"}, {revMetadata, "metadata_revision"}} {
		if which&r.bit != 0 {
			fields = append(fields, r.field+" = "+r.field+" + 1")
		}
	}
	if len(fields) == 0 {
		return nil
	}
	_, err := tx.Exec("UPDATE group_state SET " + strings.Join(fields, ", ") + " WHERE id = 1")
	return err
}

// member is one row of get_users.
type member struct {
	contextID       string
	name            string
	joinedAt        string
	latestMessageID *int64
}

// users lists a group's members ordered by context id.
func (s *store) users(id string) ([]member, error) {
	var members []member
	err := s.withGroup(id, func(db *sql.DB) error {
		rows, err := db.Query("SELECT context_id, name, joined_at, latest_message_id FROM group_members ORDER BY context_id")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var m member
			if err := rows.Scan(&m.contextID, &m.name, &m.joinedAt, &m.latestMessageID); err != nil {
				return err
			}
			members = append(members, m)
		}
		return rows.Err()
	})
	return members, err
}

// joinGroup adds contextID as a member with every existing message unread,
// or renames an existing member.
func (s *store) joinGroup(id, contextID, name string) error {
	return s.writeGroup(id, func(tx groupTx) error {
		var one int
		err := tx.QueryRow("SELECT 1 FROM group_members WHERE context_id = ?", contextID).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.Exec("INSERT INTO group_members(context_id, name, joined_at, unread_count) SELECT ?, ?, ?, COUNT(*) FROM messages",
				contextID, name, s.timestamp()); err != nil {
				return err
			}
			if _, err := tx.Exec("INSERT INTO member_unread_messages(context_id, message_id) SELECT ?, id FROM messages", contextID); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			if _, err := tx.Exec("UPDATE group_members SET name = ? WHERE context_id = ?", name, contextID); err != nil {
				return err
			}
		}
		return bumpRevisions(tx, revMember)
	})
}

// leaveGroup removes a member, its unread rows and its wake events. With
// checkName false the stored identity is used (resources/unsubscribe).
func (s *store) leaveGroup(id, contextID, name string, checkName bool) error {
	return s.writeGroup(id, func(tx groupTx) error {
		if checkName {
			if _, err := requireMember(tx, contextID, name); err != nil {
				return err
			}
		} else {
			var one int
			err := tx.QueryRow("SELECT 1 FROM group_members WHERE context_id = ?", contextID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return authorizationErrorf("Context is not a member of this group.")
			}
			if err != nil {
				return err
			}
		}
		if _, err := tx.Exec("DELETE FROM group_members WHERE context_id = ?", contextID); err != nil {
			return err
		}
		if _, err := tx.Exec("DELETE FROM member_unread_messages WHERE context_id = ?", contextID); err != nil {
			return err
		}
		res, err := tx.Exec("DELETE FROM wakeup_events WHERE context_id = ?", contextID)
		if err != nil {
			return err
		}
		which := revMember
		if n, _ := res.RowsAffected(); n > 0 {
			which |= revWakeup
		}
		return bumpRevisions(tx, which)
	})
}

// requireMember returns the member's latest sent message id, or the
// original's authorization errors when contextID has not joined under name.
func requireMember(tx groupTx, contextID, name string) (int64, error) {
	var joined string
	var latest sql.NullInt64
	err := tx.QueryRow("SELECT name, latest_message_id FROM group_members WHERE context_id = ?", contextID).Scan(&joined, &latest)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errNotJoined
	}
	if err != nil {
		return 0, err
	}
	if joined != name {
		return 0, errNameMismatch
	}
	return latest.Int64, nil
}

// randomHex returns n random bytes as lowercase hex, like uuid4().hex.
func randomHex(n int) string {
	b := make([]byte, n)
	crand.Read(b)
	return hex.EncodeToString(b)
}
