package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestE2ECommandLine checks exit statuses and the stamped version.
func TestE2ECommandLine(t *testing.T) {
	bin := builtBinary(t)
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"version", []string{"--version"}, 0, e2eVersion + "\ncompatible with crosstalk-mcp-server 1.1.10 (Python)\n", ""},
		{"unknown command", []string{"x"}, 2, "", "Unknown command: x; run 'crosstalk-mcp --help'\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Env = append(os.Environ(), "CROSSTALK_GROUPS_DIR="+t.TempDir())
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatalf("run: %v", err)
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.wantCode {
				t.Errorf("exit status: got %d; want %d", code, tc.wantCode)
			}
			if stdout.String() != tc.wantStdout {
				t.Errorf("stdout: got %q; want %q", stdout.String(), tc.wantStdout)
			}
			if stderr.String() != tc.wantStderr {
				t.Errorf("stderr: got %q; want %q", stderr.String(), tc.wantStderr)
			}
		})
	}

	t.Run("serverInfo version", func(t *testing.T) {
		p := startProcess(t, "P", t.TempDir())
		var init struct {
			ServerInfo struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"serverInfo"`
		}
		p.result("initialize", map[string]any{"protocolVersion": "2025-06-18"}, &init)
		if init.ServerInfo.Version != e2eVersion || init.ServerInfo.Name != "crosstalk" {
			t.Errorf("serverInfo: got %+v; want crosstalk %s", init.ServerInfo, e2eVersion)
		}
	})

	for _, tc := range []struct {
		name      string
		handshake bool
	}{{"EOF at once", false}, {"EOF after a session", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProcess(t, "P", t.TempDir(), pollEnv)
			if tc.handshake {
				p.initialize()
				p.createGroup("ctx-p")
			}
			code, err := p.close()
			if err != nil || code != 0 {
				t.Errorf("exit on stdin EOF: got %d (%v); want 0; stderr: %s", code, err, p.stderr.String())
			}
		})
	}
}

// TestE2ESignalEndsInOrder shows that SIGTERM ends the server like EOF:
// exit status 0, with every audit row queued so far written to disk.
func TestE2ESignalEndsInOrder(t *testing.T) {
	dir := t.TempDir()
	p := startSession(t, "audited", dir, "CROSSTALK_OBSERVABILITY_RETENTION_DAYS=inf")
	const calls = 5
	for range calls {
		if r := p.tool("list_groups", map[string]any{}); r.isError {
			t.Fatalf("list_groups: %s", r.text)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(e2eTimeout):
		t.Fatal("the server did not exit after SIGTERM")
	}
	if code, err := p.close(); code != 0 || err != nil {
		t.Fatalf("got exit %d (%v); want 0", code, err)
	}
	db := openTestDB(t, filepath.Join(dir, "observability.sqlite3"), "ro")
	if n := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); n != calls {
		t.Errorf("got %d audit rows after SIGTERM; want %d", n, calls)
	}
}
