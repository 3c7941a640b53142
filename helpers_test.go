package main

import (
	"bytes"
	"context"
	"database/sql"
	"sync"
	"testing"
)

// syncBuffer is an io.Writer that is safe to read while another goroutine or
// process writes to it, such as a server's stdout or stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// holdWriteLock takes the write lock of the SQLite database at path on a
// connection of its own, as another process would, until release is called
// or the test ends. Release may be called from any goroutine and more than
// once; a failed ROLLBACK is reported as a test error.
func holdWriteLock(tb testing.TB, path string) (release func()) {
	tb.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path, "rw"))
	if err != nil {
		tb.Fatalf("open %s: %v", path, err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		db.Close()
		tb.Fatalf("connection to %s: %v", path, err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		conn.Close()
		db.Close()
		tb.Fatalf("BEGIN IMMEDIATE on %s: %v", path, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				tb.Errorf("ROLLBACK on %s: %v", path, err)
			}
			conn.Close()
			db.Close()
		})
	}
	tb.Cleanup(release)
	return release
}
