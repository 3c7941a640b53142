package main

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestBusyRetry(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the 3 s retry window")
	}
	for _, tt := range []struct {
		name   string
		hold   time.Duration
		isBusy bool
	}{
		{"held 200 ms is waited for", 200 * time.Millisecond, false},
		{"held past writeLockWait is retried into success", writeLockWait + 400*time.Millisecond, false},
		{"held past the retry window is busy", busyRetryWindow + 500*time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			g := mustCreateGroup(t, s, "alice")
			mustJoin(t, s, g, "alice", "Alice")
			released := time.AfterFunc(tt.hold, holdWriteLock(t, s.store.groupPath(g)))
			defer released.Stop()
			start := time.Now()
			out, isErr := callTool(t, s, "send_message", map[string]any{"group_id": g, "context_id": "alice", "name": "Alice", "message": "hi"})
			elapsed := time.Since(start)
			if isErr != tt.isBusy {
				t.Fatalf("got %v (isError %v); want isError %v", out, isErr, tt.isBusy)
			}
			if tt.isBusy && out["error"] != errGroupBusy.msg {
				t.Errorf("got %v; want %q", out["error"], errGroupBusy.msg)
			}
			if !tt.isBusy && elapsed < tt.hold/2 {
				t.Errorf("succeeded after %v; want it to wait for the %v lock", elapsed, tt.hold)
			}
			if tt.isBusy && (elapsed < busyRetryWindow || elapsed > busyRetryWindow+2*time.Second) {
				t.Errorf("gave up after %v; want about %v", elapsed, busyRetryWindow)
			}
		})
	}
}

// TestCommitWaitsForReaders sends to a group while another connection reads
// it over and over, each read holding its lock 40 ms. In a group file with a
// rollback journal (as one restored from a VACUUM INTO backup is) COMMIT
// must wait for the reader to let go, as SQLite's busy handler makes it;
// failing at once and retrying the whole send rarely finds the file free.
func TestCommitWaitsForReaders(t *testing.T) {
	for _, mode := range []string{"wal", "delete"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			first := newTestStore(t, dir)
			g := newTestGroup(t, first, "readers", "alice", "bob")
			first.close()
			if got := queryRows(t, openTestDB(t, groupFile(dir, g), "rw"), "PRAGMA journal_mode = "+mode); len(got) != 1 || got[0] != mode {
				t.Fatalf("PRAGMA journal_mode = %s: got %v", mode, got)
			}
			conn, err := openTestDB(t, groupFile(dir, g), "rw").Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
					}
					// A deferred transaction holds the read lock from its SELECT to its COMMIT.
					conn.ExecContext(context.Background(), "BEGIN DEFERRED")
					conn.ExecContext(context.Background(), "SELECT COUNT(*) FROM messages")
					time.Sleep(40 * time.Millisecond)
					conn.ExecContext(context.Background(), "COMMIT")
				}
			}()
			defer func() { close(stop); <-done; conn.Close() }()
			st := newTestStore(t, dir)
			for i := range 5 {
				start := time.Now()
				if _, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: fmt.Sprint("send ", i), priority: "normal"}); err != nil {
					t.Fatalf("send %d: got %v after %v; want it stored once the reader lets go", i, err, time.Since(start))
				}
			}
		})
	}
}
