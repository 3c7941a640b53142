package main

import (
	"os"
	"time"
)

// groupSignature is what the file system says about a group's database and
// its WAL: identity, size and modification time of each. Every commit,
// whoever makes it, writes the WAL (or, after a checkpoint, the database),
// so while the signature stays the same nothing was committed, and the
// subscription poller can skip the group without opening it. That keeps an
// idle poll at two stat calls per group, and keeps the poller from cycling
// hundreds of subscribed groups through the store's handle cache.
type groupSignature struct {
	// db and wal are the files' stat results, nil for a missing file
	// (and for an empty WAL, see readGroupSignature).
	db, wal os.FileInfo
	// settled is set when both files were last modified well before the
	// signature was read. Two commits can fall within one timestamp tick
	// (a few milliseconds on Linux, whose file times follow the scheduler
	// tick; a second or two on ext3, HFS+, FAT and some network volumes),
	// and a WAL rewritten from its start keeps its size; only a signature
	// whose files have been quiet for longer than the tick proves that
	// nothing changed since.
	settled bool
}

// signatureSettle is the quiet time after which a file's timestamp is
// trusted to show every later write. Times with a fraction of a second come
// from a file system with fine timestamps, whose tick is at most 10 ms;
// whole seconds may mean 1 or 2 s granularity, so such files must be quiet
// for longer than that.
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
	// one, and a truncating checkpoint empties it after writing the
	// database, whose own stamp then changes.
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
