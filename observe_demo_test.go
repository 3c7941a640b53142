package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestObserveDemo runs the demo through real MCP sessions of the built
// binary for a few seconds and checks what it wrote: groups, messages with a
// mention and an urgent wakeup, a search, failing calls in the audit log, a
// trickle of new messages, and a directory that is gone afterwards unless
// kept.
func TestObserveDemo(t *testing.T) {
	binary := builtBinary(t)
	for _, keep := range []bool{false, true} {
		t.Run(map[bool]string{false: "removed", true: "kept"}[keep], func(t *testing.T) {
			d, err := startObserveDemo(context.Background(), binary, keep, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			dir := d.dir
			if keep {
				t.Cleanup(func() { os.RemoveAll(dir) })
			}
			groups, _ := filepath.Glob(filepath.Join(dir, "grp_*.sqlite3"))
			if len(groups) != 2 || len(d.groupIDs) != 2 {
				t.Fatalf("got %d group files and ids %v; want the release train and the incident room", len(groups), d.groupIDs)
			}
			release := openTestDB(t, groupFile(dir, d.groupIDs[0]), "ro")
			seeded := queryInt(t, release, "SELECT COUNT(*) FROM messages")
			if seeded < 3 {
				t.Errorf("got %d seeded messages in the release train; want at least 3", seeded)
			}
			if n := queryInt(t, release, "SELECT COUNT(*) FROM group_members"); n != 3 {
				t.Errorf("got %d release train members; want 3", n)
			}
			if n := queryInt(t, release, "SELECT COUNT(*) FROM messages WHERE routing_reason = 'mentioned' AND mentions LIKE ?", "%"+d.agents[1].contextID+"%"); n == 0 {
				t.Error("no message mentions the Reviewer")
			}
			if n := queryInt(t, release, "SELECT COUNT(*) FROM wakeup_events WHERE priority = 'urgent' AND relevance = 'explicit'"); n != 1 {
				t.Errorf("got %d urgent explicit wakeups; want 1", n)
			}
			if n := queryInt(t, release, "SELECT COUNT(*) FROM wakeup_events WHERE acknowledged_at IS NOT NULL"); n == 0 {
				t.Error("no wakeup was acknowledged by a read")
			}
			deadline := time.Now().Add(20 * time.Second)
			for queryInt(t, release, "SELECT COUNT(*) FROM messages") < seeded+3 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if n := queryInt(t, release, "SELECT COUNT(*) FROM messages"); n < seeded+3 {
				t.Errorf("got %d messages after the trickle ran; want at least %d", n, seeded+3)
			}
			audit := openTestDB(t, filepath.Join(dir, catalogFileName), "ro")
			for query, want := range map[string]int64{
				"SELECT COUNT(*) FROM tool_calls WHERE tool_name = 'create_group' AND outcome = 'success'":                         2,
				"SELECT COUNT(*) FROM tool_calls WHERE tool_name = 'search_messages' AND name = 'Reviewer'":                        1,
				"SELECT COUNT(*) FROM tool_calls WHERE outcome = 'error' AND error_category = 'authorization'":                     1,
				"SELECT COUNT(*) FROM tool_calls WHERE tool_name = 'get_all_messages' AND outcome = 'error' AND name = 'Reviewer'": 1,
			} {
				if got := queryInt(t, audit, query); got != want {
					t.Errorf("%s: got %d; want %d", query, got, want)
				}
			}
			if err := d.close(); err != nil {
				t.Fatal(err)
			}
			_, err = os.Stat(dir)
			if keep && err != nil {
				t.Errorf("--keep: the demo directory is gone: %v", err)
			}
			if !keep && !os.IsNotExist(err) {
				t.Errorf("got stat error %v after close; want the demo directory removed", err)
			}
		})
	}
}

// TestObserveDemoStoppedWhileSeeding: the signal handler came only once the
// demo was seeded, so a Ctrl-C or SIGTERM in its first moments (or while a
// stuck seeding call waited out its 30 s) killed the process and left the
// temporary directory behind, databases and all.
func TestObserveDemoStoppedWhileSeeding(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM on Windows")
	}
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	tmp := t.TempDir()
	cmd := exec.Command(builtBinary(t), "observe", "--demo", "--silent", "--port", fmt.Sprint(port))
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var demo []string
	for deadline := time.Now().Add(10 * time.Second); len(demo) == 0 && time.Now().Before(deadline); {
		demo, _ = filepath.Glob(filepath.Join(tmp, "crosstalk-demo-*"))
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	if len(demo) == 0 {
		t.Fatal("the demo directory never appeared")
	}
	if err != nil {
		t.Errorf("got %v; want exit status 0 after a SIGTERM", err)
	}
	if _, err := os.Stat(demo[0]); !os.IsNotExist(err) {
		t.Errorf("got stat error %v after a SIGTERM while seeding; want the demo directory removed", err)
	}
}
