package main

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// buildingPrefix starts the name of a group file under construction. Such a
// name never matches the group file pattern of this port (^grp_…\.sqlite3$)
// or the original's glob ("grp_*.sqlite3"), so no server, Go or Python,
// lists or opens a group before its schema is committed.
const buildingPrefix = ".creating-"

// groupPageSize is the page size of a new group file, a quarter of SQLite's
// default. A send adds a row per member to two per-member indexes, each on
// that member's own leaf, and the commit appends every page it touched to
// the WAL before the fsync: with 8 members 118 KiB at 4,096 bytes, 41 KiB
// at 1,024, and sends from 4 and 8 processes ran about 1.2× as fast
// (BenchmarkSendLoad). A Python server uses such a file as any other;
// older groups keep their page size, which WAL mode cannot change.
const groupPageSize = 1024

// buildingPath is where group id is built before it gets its final name.
func buildingPath(dir, id string) string {
	return filepath.Join(dir, buildingPrefix+id+".sqlite3")
}

// buildGroupFile creates group id's database under a temporary name in dir,
// runs fill on it in one transaction, and only then renames it, so that a
// crash leaves either no group or a complete one. The file is built with a
// rollback journal and switched to WAL last, so closing its only connection
// removes the -wal and -shm files and the rename moves one self-contained
// file. The directory is synced so that the name survives a power loss.
func buildGroupFile(dir, id string, fill func(tx *sql.Tx) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil { // removed since start-up, as catalog says
		return fmt.Errorf("create groups directory: %w", err)
	}
	tmp := buildingPath(dir, id)
	if err := removeDatabaseFiles(tmp); err != nil {
		return err
	}
	err := buildFile(tmp, fill)
	if err == nil {
		err = os.Rename(tmp, groupFile(dir, id))
	}
	if err != nil {
		removeDatabaseFiles(tmp)
		os.Remove(tmp + "-journal")
		return err
	}
	syncDir(dir)
	return nil
}

// buildFile creates the database at path, fills it and leaves it in WAL
// mode with no -wal or -shm file beside it.
func buildFile(path string, fill func(tx *sql.Tx) error) error {
	db := openSQLite(sqliteDSN(path, "rwc"), 1)
	defer db.Close()
	// synchronous=FULL, SQLite's default here, is set so that no build-time
	// setting can make the commit less durable than the rename.
	if err := execAll(db, fmt.Sprintf("PRAGMA page_size=%d", groupPageSize), "PRAGMA journal_mode=DELETE", "PRAGMA synchronous=FULL"); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	if err := inTx(db, fill); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return fmt.Errorf("switch to WAL: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("switch to WAL: journal mode is %s", mode)
	}
	if err := db.Close(); err != nil {
		return err
	}
	// A -wal file left by the close would hold data the renamed file lacks.
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write-ahead log of %s was not checkpointed", filepath.Base(path))
	}
	return nil
}

// syncDir flushes dir's entries to disk. Some systems (Windows) cannot sync
// a directory; there the rename is as durable as the file system makes it.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	d.Sync()
	d.Close()
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
