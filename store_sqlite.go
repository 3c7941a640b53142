package main

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteDSN builds a modernc.org/sqlite data source name for an SQLite URI.
// Per-connection settings must live in the DSN because database/sql pools
// connections; mode "rw" never creates a file, so a group deleted by another
// process cannot be resurrected by a new pooled connection.
func sqliteDSN(path, mode string) string {
	p := filepath.ToSlash(path)
	if filepath.VolumeName(path) != "" {
		p = "/" + p
	}
	q := url.Values{"mode": {mode}, "_pragma": {busyTimeout}, "_txlock": {"immediate"}}
	return "file:" + (&url.URL{Path: p}).EscapedPath() + "?" + q.Encode()
}

// busyTimeout is the busy_timeout of every connection, but for a write
// connection's BEGIN IMMEDIATE (beginImmediate); busyRetryWindow says why.
const busyTimeout = "busy_timeout(100)"

// openSQLite returns a pool of at most conns connections, all kept idle, on
// dsn. It opens no connection yet, and cannot fail: sql.Open checks only
// that the driver is registered, and this one registers on import.
func openSQLite(dsn string, conns int) *sql.DB {
	db, _ := sql.Open("sqlite", dsn)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db
}

// busyRetryWindow is how long a whole operation is retried while SQLite
// reports busy or locked: its busy handler is unfair between processes, so
// each attempt waits only 100 ms (busy_timeout), with jittered backoff.
const busyRetryWindow = 3 * time.Second

// isBusy reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED, in any
// extended form, or errGroupBusy, a send's spent window.
func isBusy(err error) bool {
	code := sqliteCode(err)
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED || errors.Is(err, errGroupBusy)
}

// sqliteCode returns the primary result code of the SQLite error in err's
// chain (its extended forms share the low byte), or 0 when there is none.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// isReadOnly reports whether err is SQLite's SQLITE_READONLY in any extended
// form. A connection SQLite opened read-only (a read-only mount, mode 0444)
// stays so for good, so its handle must be reopened to write again.
func isReadOnly(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_READONLY }

// isCantOpen reports whether err is SQLite's SQLITE_CANTOPEN in any extended
// form: for a file that exists, most often one this user may not read.
func isCantOpen(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CANTOPEN }

// unlockSidecars gives the -wal and -shm files of a writable database at
// path its mode: SQLite creates them with the database's, so a spell at 0444
// left a read-only -wal or -shm that keeps every later connection read-only.
func unlockSidecars(path string) {
	if db, err := os.Stat(path); err == nil && db.Mode().Perm()&0o200 != 0 {
		os.Chmod(path+"-wal", db.Mode().Perm()) // neither may exist; another user's stays as it is
		os.Chmod(path+"-shm", db.Mode().Perm())
	}
}

// retryBusy runs op until it succeeds, fails with anything but busy/locked,
// or busyRetryWindow has passed, sleeping with doubling backoff and jitter
// between attempts so that competing processes spread out.
func retryBusy(op func() error) error { return retryBusyContext(context.Background(), op) }

// retryBusyContext is retryBusy that also stops, with ctx's cause, when ctx
// ends, and whose window ends at ctx's deadline if that comes first.
func retryBusyContext(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(busyRetryWindow)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	delay := 25 * time.Millisecond
	for {
		err := op()
		remaining := time.Until(deadline)
		if err == nil || !isBusy(err) || remaining <= 0 {
			return err
		}
		pause := min(delay/2+rand.N(delay/2+1), remaining)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		delay = min(delay*2, 400*time.Millisecond)
	}
}

// rowScanner is the Scan of an *sql.Row.
type rowScanner interface{ Scan(dest ...any) error }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// collectRows returns scan of each of rows, in order, or nothing on any
// error, and closes rows; err is the error of the query that returned them.
func collectRows[T any](rows *sql.Rows, err error, scan func(row rowScanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// mapSlice returns f of each item of s, in order, as make and a loop would:
// empty, not nil, for an empty s. The slices package has no map.
func mapSlice[T, V any](s []T, f func(T) V) []V {
	out := make([]V, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}

// setOf is the set of keys: nil for nil keys, so that where a nil list
// means every one (a watch of every group), its set does too.
func setOf[K comparable](keys []K) map[K]bool {
	if keys == nil {
		return nil
	}
	set := make(map[K]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return set
}
