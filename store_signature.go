package main

import (
	"os"
	"time"
)

// groupSignature is what the file system says about a group's database and
// its WAL: identity, size and modification time of each. Every commit,
// whoever makes it, writes one of them, so while the signature stays the
// same the subscription poller can skip the group without opening it: an
// idle poll costs two stat calls per group and no handle cache churn.
type groupSignature struct {
	db, wal os.FileInfo // nil for a missing file or an empty WAL
	// settled is set when both files were last modified well before the
	// signature was read: two commits can fall within one timestamp tick
	// (milliseconds on Linux; a second or two on ext3, HFS+, FAT and some
	// network volumes), and a WAL rewritten from its start keeps its size.
	settled bool
}

// signatureSettle is the quiet time after which a file's timestamp is
// trusted to show every later write: times with a fraction of a second have
// a tick of at most 10 ms; whole seconds may mean a 1 or 2 s tick.
const (
	signatureSettle       = 200 * time.Millisecond
	signatureSettleCoarse = 3 * time.Second
)

// readGroupSignature stats the database at path and its WAL. ok is false
// when the database cannot be stat'ed (deleted, or an I/O error): the
// caller must then look at the group itself.
func readGroupSignature(path string, now time.Time) (sig groupSignature, ok bool) {
	db, err := os.Stat(path)
	if err != nil {
		return groupSignature{}, false
	}
	sig.db = db
	// An empty WAL holds nothing committed: a reader's first open creates
	// one, and a truncating checkpoint empties it after writing the database.
	latest, settle := db.ModTime(), signatureSettleCoarse
	if wal, err := os.Stat(path + "-wal"); err == nil && wal.Size() > 0 {
		sig.wal = wal
		if wal.ModTime().After(latest) {
			latest = wal.ModTime()
		}
		if wal.ModTime().Nanosecond() != 0 {
			settle = signatureSettle
		}
	}
	if db.ModTime().Nanosecond() != 0 {
		settle = signatureSettle
	}
	sig.settled = now.Sub(latest) > settle
	return sig, true
}

// sameFile reports whether a file is unchanged between two stat results:
// the same file, size and modification time, or missing both times.
func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// identical reports whether two readings are the same in every respect,
// settledness included.
func (sig groupSignature) identical(o groupSignature) bool {
	return sig.settled == o.settled && sameFile(sig.db, o.db) && sameFile(sig.wal, o.wal)
}

// unchangedSince reports whether sig proves that nothing was committed
// since prev was read: both are readable, the files are the same, and the
// earlier reading was already settled.
func (sig groupSignature) unchangedSince(prev groupSignature) bool {
	return prev.settled && sameFile(sig.db, prev.db) && sameFile(sig.wal, prev.wal)
}
