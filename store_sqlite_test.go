package main

import (
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
