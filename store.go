package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// store keeps one SQLite database per group in dir, plus the group catalog in
// observability.sqlite3. Several server processes, Python or Go, may share dir
// at once, so every write is an IMMEDIATE transaction and nothing is cached
// that another process could change, except open database handles, which are
// checked against the file's identity before each use.
//
// Lock order: s.mu, then a handle's inUse (read), then its writeTurn. acquire
// takes inUse under s.mu so that a handle cannot be evicted between lookup
// and use, and a write transaction takes writeTurn while inUse is held.
// Nothing takes s.mu while holding inUse or writeTurn; a handle is closed
// (inUse for writing) only after it has left s.handles, outside s.mu.
// A handle's sendsMu is taken alone or inside its writeTurn, never around it.
// catalogMu guards only the catalog's two fields, never held with the others.
type store struct {
	dir string
	now func() time.Time

	mu      sync.Mutex
	handles map[string]*groupHandle

	catalogMu   sync.Mutex
	catalogDB   *sql.DB     // nil until first use
	catalogFile os.FileInfo // the file catalogDB opened

	damaged damagedWarnings // unusable group files already reported

	// acks counts the write transactions of this process that acknowledged
	// a wake event, so that a subscription held back from notifying again
	// (wakeupRenotifyGap) sees that its member has read meanwhile.
	acks atomic.Int64
}

// maxOpenGroups bounds the file descriptors held for cached group handles;
// the least recently used handle is closed beyond it.
const maxOpenGroups = 32

// groupHandle is the open database of one group file: a small pool for
// reads and one dedicated connection for this process's write transactions.
type groupHandle struct {
	// inUse is held for reading while an operation uses db and for writing
	// while db is closed, so a handle is never closed under a running query.
	inUse    sync.RWMutex
	db       *sql.DB
	path     string // the database file
	info     os.FileInfo
	lastUsed time.Time

	// writeTurn, held by putting its one value, serializes write
	// transactions on conn, whose prepared statements stmts keeps:
	// preparing a statement costs more than running it, and a send runs
	// about ten. It is a channel so that a queued send can stop waiting
	// when it is answered or its context ends (sendQueued).
	writeTurn chan struct{}
	conn      *sql.Conn
	stmts     map[string]*sql.Stmt

	// sends are this process's sends waiting for writeTurn, which whoever
	// takes it stores in one transaction (sendQueued).
	sendsMu sync.Mutex
	sends   []*queuedSend
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

// writeLocked runs fn in one BEGIN IMMEDIATE transaction on the write
// connection, whose writeTurn the caller holds.
func (h *groupHandle) writeLocked(fn func(tx groupTx) error) error {
	if h.conn == nil {
		conn, err := h.db.Conn(context.Background())
		if err != nil {
			return err
		}
		h.conn, h.stmts = conn, map[string]*sql.Stmt{}
	}
	tx := groupTx{h}
	if err := tx.beginImmediate(); err != nil {
		return err
	}
	// A group deleted while this waited for the lock takes no write: its
	// file is gone, so a commit would be acknowledged and lost with it.
	info, err := os.Stat(h.path)
	if err != nil || !os.SameFile(info, h.info) {
		err = groupNotFound(strings.TrimSuffix(filepath.Base(h.path), ".sqlite3"))
	} else {
		err = fn(tx)
	}
	if err == nil {
		_, err = tx.Exec("COMMIT")
	}
	if err != nil {
		// After a failed COMMIT SQLite may still hold the transaction open.
		tx.Exec("ROLLBACK")
	}
	return err
}

// writeLockWait bounds beginImmediate's wait for SQLite's write lock. A
// holder keeps it for one transaction (about a millisecond a send), so a
// longer wait means it is stuck; the caller's busy retry takes over.
const writeLockWait = 250 * time.Millisecond

// beginImmediate starts a write transaction, trying again every millisecond
// while another connection holds the lock. SQLite's busy handler sleeps up
// to 100 ms between tries, so the lock would sit free while every waiter
// sleeps (p99 of a burst of 8 processes' sends: about 130 ms, not 30 ms).
// 1 ms is as soon as Go's timers wake on Linux. The handler is off only for
// BEGIN: in a file with a rollback journal (restored from a VACUUM INTO
// backup, say) COMMIT waits through it for readers to let go.
func (t groupTx) beginImmediate() error {
	if _, err := t.Exec("PRAGMA busy_timeout(0)"); err != nil {
		return err
	}
	defer t.Exec("PRAGMA " + busyTimeout)
	return pollLock(writeLockWait, func() error { _, err := t.Exec("BEGIN IMMEDIATE"); return err })
}

// pollLock calls begin every millisecond while it answers busy, for up to
// wait, and returns its last answer; beginImmediate says why not SQLite's
// busy handler.
func pollLock(wait time.Duration, begin func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := begin()
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// writeGroup runs fn in a write transaction on group id.
func (s *store) writeGroup(id string, fn func(tx groupTx) error) error {
	return s.withHandle(id, func(h *groupHandle) error {
		h.writeTurn <- struct{}{}
		defer func() { <-h.writeTurn }()
		return h.writeLocked(fn)
	})
}

// newStore creates dir if needed; the catalog is opened on first use. now
// is the store's clock: time.Now, or a test's.
func newStore(dir string, now func() time.Time) (*store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create groups directory: %w", err)
	}
	return &store{dir: dir, now: now, handles: map[string]*groupHandle{}}, nil
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
	s.closeCatalog()
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

func (s *store) timestamp() string { return formatTimestamp(s.now()) }

// validateGroupID accepts only the ids create_group makes: "grp_" and 32
// lowercase hex digits. It runs before any path is built from an id, and it
// is the one definition of a group id.
func validateGroupID(id string) error {
	if len(id) != 36 || !strings.HasPrefix(id, "grp_") || strings.Trim(id[4:], "0123456789abcdef") != "" {
		return validationErrorf("Invalid group_id.")
	}
	return nil
}

func (s *store) groupPath(id string) string { return groupFile(s.dir, id) }

// groupFile is the database file of group id in dir; id must already be a
// valid group id.
func groupFile(dir, id string) string { return filepath.Join(dir, id+".sqlite3") }

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
	if isReadOnly(err) {
		// A connection SQLite opened read-only stays so (isReadOnly): try
		// once more on a fresh handle, which works if the cause is gone. A
		// failed operation wrote nothing, so it can run again.
		s.forget(id)
		if h, aerr := s.acquire(id); aerr == nil {
			err = fn(h)
			h.inUse.RUnlock()
		}
	}
	if err != nil && !isBusy(err) && !s.groupExists(id) {
		// Another process deleted the group under this operation.
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
	var stale []*groupHandle // closed outside s.mu
	s.mu.Lock()
	h := s.handles[id]
	if h != nil && !os.SameFile(h.info, info) {
		stale, h = append(stale, h), nil
	}
	if h == nil {
		// One connection is kept for writes; the others serve reads, such
		// as the subscription poller's, without waiting for a write.
		unlockSidecars(path)
		db := openSQLite(sqliteDSN(path, "rw"), 3)
		h = &groupHandle{db: db, info: info, path: path, writeTurn: make(chan struct{}, 1)}
		s.handles[id] = h
		if len(s.handles) > maxOpenGroups {
			stale = append(stale, s.evictLocked(id))
		}
	}
	h.lastUsed = time.Now()
	h.inUse.RLock()
	s.mu.Unlock()
	for _, old := range stale {
		old.close()
	}
	return h, nil
}

// evictLocked removes the least recently used handle but keep's and
// returns it for closing outside s.mu.
func (s *store) evictLocked(keep string) *groupHandle {
	oldestID := ""
	for id, h := range s.handles {
		if id != keep && (oldestID == "" || h.lastUsed.Before(s.handles[oldestID].lastUsed)) {
			oldestID = id
		}
	}
	h := s.handles[oldestID]
	delete(s.handles, oldestID)
	return h
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

func (s *store) groupExists(id string) bool { return groupFileExists(s.dir, id) }

// groupFileExists reports whether dir holds the database file of a valid
// group id; the dashboard tells a deleted group by it.
func groupFileExists(dir, id string) bool {
	if validateGroupID(id) != nil {
		return false
	}
	info, err := os.Stat(groupFile(dir, id))
	return err == nil && info.Mode().IsRegular()
}

// groupIDOfFile returns the group id a database file name stands for; ok is
// false for any name that is not a valid id plus ".sqlite3".
func groupIDOfFile(name string) (id string, ok bool) {
	id, ok = strings.CutSuffix(name, ".sqlite3")
	return id, ok && validateGroupID(id) == nil
}
