package main

import (
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// isReadOnly reports whether err is SQLite's SQLITE_READONLY in any extended
// form. SQLite opens a file it may not write (a read-only mount, mode 0444)
// read-only and keeps that connection read-only for good, so a handle that
// reports it must be dropped and reopened: otherwise the process keeps
// failing long after the file became writable again.
func isReadOnly(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_READONLY
}

// dropReadOnlyCatalog closes the cached catalog handle when err says SQLite
// opened it read-only, so that the next use opens it afresh (isReadOnly).
func (s *store) dropReadOnlyCatalog(err error) {
	if !isReadOnly(err) {
		return
	}
	s.catalogMu.Lock()
	defer s.catalogMu.Unlock()
	if s.catalogDB != nil {
		s.catalogDB.Close()
		s.catalogDB = nil
	}
}
