package main

import (
	"errors"
	"io/fs"
	"os"
	"time"
)

// writeQueue is the cross-process queue in front of one group's SQLite
// write lock: a blocking exclusive lock on a side file, "<group>.sqlite3-wq",
// taken before BEGIN IMMEDIATE and released after COMMIT or ROLLBACK.
//
// SQLite's busy handler polls the write lock, sleeping 1 to 100 ms between
// tries, so with several writer processes the lock sits free while every
// waiter sleeps, and an unlucky writer can miss it for a whole busy timeout
// (the p99 of one-at-a-time sends from 4 processes was about 100 ms). A
// waiter blocked in the kernel on the side file instead wakes as soon as the
// holder finishes. The queue is an optimization only: writers that do not
// take it (the Python original, or a platform without file locks) still
// serialize on SQLite's own lock, just less fairly.
//
// The side file must never outlive its group. It is created only after the
// group's database exists and only when this process writes to the group;
// after creating it the database is checked again, and the file is removed
// if the group was deleted meanwhile. deleteGroup removes it after the
// database, and a process that finds a group gone removes a side file left
// by a writer (such as the original) that does not know about it. Its name
// does not end in ".sqlite3", so the original's "grp_*.sqlite3" glob and
// the dashboard's group pattern never take it for a group.
type writeQueue struct {
	path string      // the side file
	db   string      // the group's database file
	info os.FileInfo // identity of the database the handle was opened on
}

// writeQueueSuffix names a group's side file after its database file, like
// SQLite's -wal and -shm.
const writeQueueSuffix = "-wq"

// writeQueueWait bounds how long a writer waits in the queue. A process
// holds the queue only around one transaction (about a millisecond per
// send), so a longer wait means the holder is stuck (stopped, or waiting on
// a writer that does not queue); the waiter then goes on to SQLite's busy
// handling, which is correct without the queue.
const writeQueueWait = 250 * time.Millisecond

func newWriteQueue(dbPath string, info os.FileInfo) *writeQueue {
	return &writeQueue{path: dbPath + writeQueueSuffix, db: dbPath, info: info}
}

// lock waits for this group's turn to write and returns the function that
// gives it up. When the queue cannot be used (no locking on this platform,
// the side file cannot be created, the group is gone, or the wait is spent)
// it returns a no-op, and the caller relies on SQLite's lock alone.
func (q *writeQueue) lock() (unlock func()) {
	if q == nil {
		return func() {}
	}
	fd, err := openQueueFile(q.path, false)
	if errors.Is(err, fs.ErrNotExist) {
		fd, err = q.create()
	}
	if err != nil {
		return func() {}
	}
	return lockQueueFile(fd, writeQueueWait)
}

// create makes the side file and then checks that the group's database is
// still the one this handle writes to: a group deleted between the caller's
// check and the creation must not be left with a side file.
func (q *writeQueue) create() (queueFD, error) {
	fd, err := openQueueFile(q.path, true)
	if err != nil {
		return fd, err
	}
	if info, err := os.Stat(q.db); err != nil || !os.SameFile(info, q.info) {
		closeQueueFile(fd)
		removeWriteQueue(q.db)
		return fd, fs.ErrNotExist
	}
	return fd, nil
}

// removeWriteQueue deletes the side file of the database at dbPath, if any.
// Callers run it after the database itself is gone.
func removeWriteQueue(dbPath string) {
	if err := os.Remove(dbPath + writeQueueSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		logf("remove write queue of %s: %v", dbPath, err)
	}
}
