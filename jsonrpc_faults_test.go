package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// auditedChild starts the built binary with auditing on and returns it with
// its pipes; the handshake is already written.
func auditedChild(t *testing.T, dir string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(builtBinary(t))
	cmd.Env = append(os.Environ(), "CROSSTALK_GROUPS_DIR="+dir, "CROSSTALK_POLL_INTERVAL_SECONDS=3600",
		"CROSSTALK_OBSERVABILITY_RETENTION_DAYS=inf")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-03-26"}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	return cmd, stdin, stdout, stderr
}

// waitExit waits for cmd and returns its exit status, or -1 with the signal
// that killed it.
func waitExit(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(e2eTimeout):
		t.Fatal("the server did not exit")
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return -1, ws.Signal().String()
	}
	return ws.ExitStatus(), ""
}

// callAndRead sends n list_groups calls to an auditedChild and reads the
// initialize answer and the n answers, so that exactly n calls have run.
func callAndRead(t *testing.T, stdin io.Writer, r *bufio.Reader, n int) {
	t.Helper()
	for i := range n {
		io.WriteString(stdin, crashCall(i+1, "list_groups", map[string]any{})+"\n")
	}
	for range n + 1 { // the initialize answer, then the calls'
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatalf("read answer: %v", err)
		}
	}
}

// TestE2EClientClosedStdout shows that a client closing its end of stdout
// ends the session like EOF, not with a silent SIGPIPE death: every call
// that ran is audited, one line on stderr says why, and the exit status is
// exitClientGone.
func TestE2EClientClosedStdout(t *testing.T) {
	dir := t.TempDir()
	cmd, stdin, stdout, stderr := auditedChild(t, dir)
	r := bufio.NewReader(stdout)
	const answered = 3
	callAndRead(t, stdin, r, answered)
	stdout.Close()
	// This call runs, but its answer cannot be written.
	io.WriteString(stdin, crashCall(99, "list_groups", map[string]any{})+"\n")
	code, sig := waitExit(t, cmd)
	if code != exitClientGone {
		t.Fatalf("exit: got status %d (signal %q); want %d; stderr: %s", code, sig, exitClientGone, stderr.String())
	}
	if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n") + 1; lines != 1 || !strings.Contains(stderr.String(), "stdout") {
		t.Errorf("stderr: got %q; want one line about stdout", stderr.String())
	}
	if n := observabilityInt(t, dir, "SELECT COUNT(*) FROM tool_calls"); n != answered+1 {
		t.Errorf("audit rows: got %d; want %d (every call that ran)", n, answered+1)
	}
}

// TestE2ESignalUnderLoad sends SIGTERM while calls keep arriving: no call is
// started after the signal, every call that was answered has its audit row,
// and the server exits 0.
func TestE2ESignalUnderLoad(t *testing.T) {
	rounds := 5
	if testing.Short() {
		rounds = 1
	}
	for round := range rounds {
		dir := t.TempDir()
		cmd, stdin, stdout, stderr := auditedChild(t, dir)
		// The flood stops below auditQueueSize: past it the audit log drops
		// events by design (it never blocks a call), which is not the case
		// this test is about.
		go func() {
			w := bufio.NewWriter(stdin)
			for i := 1; i < auditQueueSize-64; i++ {
				w.WriteString(crashCall(i, "list_groups", map[string]any{}) + "\n")
				if i%16 == 0 && w.Flush() != nil {
					return
				}
			}
			w.Flush()
		}()
		answeredCh := make(chan int, 1)
		firstAnswer := make(chan struct{})
		go func() {
			r := bufio.NewReader(stdout)
			n := 0
			for {
				line, err := r.ReadString('\n')
				if strings.Contains(line, `"result": {"content"`) {
					if n++; n == 1 {
						close(firstAnswer)
					}
				}
				if err != nil {
					answeredCh <- n
					return
				}
			}
		}()
		// Signal only once calls are being answered: a SIGTERM before
		// runStdio installs its handler (on a loaded machine, start-up
		// can outlast a fixed sleep) kills the process as for any program.
		select {
		case <-firstAnswer:
		case <-time.After(e2eTimeout):
			t.Fatalf("round %d: no call answered within %v", round, e2eTimeout)
		}
		time.Sleep(time.Duration(5+round*17) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGTERM)
		code, sig := waitExit(t, cmd)
		answered := <-answeredCh
		if code != 0 {
			t.Fatalf("round %d: exit got %d (signal %q); want 0; stderr: %s", round, code, sig, stderr.String())
		}
		audited := observabilityInt(t, dir, "SELECT COUNT(*) FROM tool_calls")
		t.Logf("round %d: %d calls answered, %d audited", round, answered, audited)
		if answered == 0 || audited != answered {
			t.Errorf("round %d: got %d audit rows for %d answered calls; want one each", round, audited, answered)
		}
	}
}

// TestE2ESignalRepeated sends SIGTERM again and again until the server
// exits, as a client (or an operator's kill by name) may while the first
// signal's orderly end is still writing audit rows: every signal must be
// handled like the first, so the server exits 0 with every answered call
// audited instead of being killed halfway through its shutdown.
func TestE2ESignalRepeated(t *testing.T) {
	dir := t.TempDir()
	cmd, stdin, stdout, stderr := auditedChild(t, dir)
	r := bufio.NewReader(stdout)
	const answered = 20
	callAndRead(t, stdin, r, answered)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		io.Copy(io.Discard, r)
	}()
	signals := 0
	for done := false; !done; {
		if cmd.Process.Signal(syscall.SIGTERM) == nil {
			signals++
		}
		select {
		case <-exited:
			done = true
		case <-time.After(time.Millisecond):
		}
	}
	code, sig := waitExit(t, cmd)
	if code != 0 {
		t.Fatalf("exit after %d SIGTERMs: got %d (signal %q); want 0; stderr: %s", signals, code, sig, stderr.String())
	}
	if n := observabilityInt(t, dir, "SELECT COUNT(*) FROM tool_calls"); n != answered {
		t.Errorf("audit rows after %d SIGTERMs: got %d; want %d", signals, n, answered)
	}
}

// TestE2ESignalDuringWait sends SIGTERM while a wait_for_messages call
// waits: the wait is ended and answered, with its audit row, before the
// process exits 0, long before its own timeout would have ended it.
func TestE2ESignalDuringWait(t *testing.T) {
	dir := t.TempDir()
	cmd, stdin, stdout, stderr := auditedChild(t, dir)
	r := bufio.NewReader(stdout)
	io.WriteString(stdin, crashCall(1, "create_group", map[string]any{"context_id": "w", "name": "w"})+"\n")
	var answer string
	for range 2 { // the initialize answer, then create_group's
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read answer: %v", err)
		}
		answer = line
	}
	text, _ := crashToolText(answer)
	var created struct {
		GroupID string `json:"group_id"`
	}
	json.Unmarshal([]byte(text), &created)
	io.WriteString(stdin, crashCall(4, "join_group", map[string]any{"group_id": created.GroupID, "context_id": "w", "name": "w"})+"\n")
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("read join_group's answer: %v", err)
	}
	io.WriteString(stdin, crashCall(2, "wait_for_messages", map[string]any{"group_id": created.GroupID,
		"context_id": "w", "name": "w", "timeout_seconds": 50})+"\n")
	// The wait is running once the answer to a later call arrives first.
	io.WriteString(stdin, crashCall(3, "list_groups", map[string]any{})+"\n")
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, `"id": 3`) {
		t.Fatalf("got %q, %v; want list_groups' answer", line, err)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(r)
	code, sig := waitExit(t, cmd)
	if code != 0 || time.Since(start) > 20*time.Second {
		t.Fatalf("exit got %d (signal %q) after %v; want 0 well before the wait's 50 s; stderr: %s",
			code, sig, time.Since(start), stderr.String())
	}
	if !strings.Contains(string(rest), `"id": 2`) {
		t.Errorf("output after SIGTERM: got %q; want the wait's answer", rest)
	}
	if n := observabilityInt(t, dir, "SELECT COUNT(*) FROM tool_calls"); n != 4 {
		t.Errorf("audit rows: got %d; want 4 (create, join, wait, list)", n)
	}
}

// TestE2ESignalWithStdoutFull stops a server whose client stopped reading
// stdout, so that the answer in hand is blocked in its write: SIGTERM still
// ends it, as it ends the original.
func TestE2ESignalWithStdoutFull(t *testing.T) {
	cmd := exec.Command(builtBinary(t))
	cmd.Env = append(os.Environ(), "CROSSTALK_GROUPS_DIR="+t.TempDir(), "CROSSTALK_POLL_INTERVAL_SECONDS=3600")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe() // stdout, never read
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); r.Close() })
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	for i := 1; i <= 100; i++ { // each answer is several KiB: the 64 KiB pipe fills
		fmt.Fprintf(stdin, `{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`+"\n", i)
	}
	time.Sleep(500 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(busyRetryWindow + 10*time.Second):
		t.Fatalf("the server did not exit within %v of SIGTERM with its stdout full", busyRetryWindow+10*time.Second)
	}
}
