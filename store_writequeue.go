package main

// A group's write queue is the cross-process queue in front of its SQLite
// write lock: an exclusive lock on a side file, "<group>.sqlite3-wq", taken
// before BEGIN IMMEDIATE and released after COMMIT or ROLLBACK. SQLite's
// busy handler sleeps up to 100 ms between tries, so the lock sits free
// while every waiter sleeps (p99 of sends from 4 processes: about 100 ms).
// It is an optimization only: writers that do not take it (the Python
// original, a platform without flock) still serialize on SQLite's lock.
//
// The side file never outlives its group: it is created only for an
// existing group, and deleteGroup and acquire remove it once the database
// is gone. Its name does not end in ".sqlite3", so no group glob takes it.

import (
	"errors"
	"io/fs"
	"os"
	"time"
)

// writeQueueSuffix names a group's side file after its database file, like
// SQLite's -wal and -shm.
const writeQueueSuffix = "-wq"

// writeQueueWait bounds a wait in the queue. A holder keeps it for one
// transaction (about a millisecond a send), so a longer wait means it is
// stuck (stopped, or waiting on a writer that does not queue); the waiter
// then relies on SQLite's busy handling, correct without the queue.
const writeQueueWait = 250 * time.Millisecond

// lockWriteQueue waits for the turn to write of the group whose database
// file db was opened with identity info, and returns the function that
// gives it up. When the queue cannot be used (no locking on this platform,
// the side file cannot be created, the group is gone, or the wait is spent)
// it returns a no-op, and the caller relies on SQLite's lock alone.
func lockWriteQueue(db string, info os.FileInfo) (unlock func()) {
	fd, err := openQueueFile(db+writeQueueSuffix, false)
	if errors.Is(err, fs.ErrNotExist) {
		fd, err = openQueueFile(db+writeQueueSuffix, true)
		// A group deleted between the caller's check and the creation
		// must not be left with a side file.
		if now, serr := os.Stat(db); err == nil && (serr != nil || !os.SameFile(now, info)) {
			closeQueueFile(fd)
			removeWriteQueue(db)
			return func() {}
		}
	}
	if err != nil {
		return func() {}
	}
	return lockQueueFile(fd, writeQueueWait)
}

// removeWriteQueue deletes the side file of the database at dbPath, if any.
// Callers run it after the database itself is gone.
func removeWriteQueue(dbPath string) {
	if err := os.Remove(dbPath + writeQueueSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		logf("remove write queue of %s: %v", dbPath, err)
	}
}
