package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cliRun is one finished run of the built binary.
type cliRun struct {
	stdout, stderr string
	code           int
	ended          time.Time
}

// startCLI runs the built binary with args and payload on stdin in groups
// directory dir; the returned channel yields its run once it exits.
func startCLI(t *testing.T, dir, payload string, args ...string) <-chan cliRun {
	t.Helper()
	cmd := exec.Command(builtBinary(t), args...)
	cmd.Env = envWithout("CROSSTALK_", "CROSSTALK_GROUPS_DIR="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(payload), &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan cliRun, 1)
	go func() {
		cmd.Wait()
		done <- cliRun{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode(), time.Now()}
	}()
	return done
}

// envWithout is this process's environment without the variables named
// with prefix, plus extra.
func envWithout(prefix string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func finishCLI(t *testing.T, ch <-chan cliRun) cliRun {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("command did not end")
	}
	return cliRun{}
}

// TestE2EHookAndWait runs the built binary as a client would: bob joins
// over MCP with its client session id as context_id, alice sends from
// another process, `wait` (asyncRewake) exits 2 with the message, a
// UserPromptSubmit hook prints it exactly once, and a Stop hook keeps the
// agent going once for new mail and then lets it stop.
func TestE2EHookAndWait(t *testing.T) {
	dir := t.TempDir()
	const session = "cc-3f1d2a7e-e2e"
	alice := startSession(t, "alice", dir)
	bob := startSession(t, "bob", dir)
	gid := alice.createGroup("alice-ctx")
	alice.join(gid, "alice-ctx", "alice")
	bob.join(gid, session, "bob")

	start := finishCLI(t, startCLI(t, dir, `{"session_id": "`+session+`", "hook_event_name": "SessionStart", "source": "startup"}`, "hook", "--client", "claude-code"))
	if !strings.Contains(start.stdout, "your context_id is "+session) || !strings.Contains(start.stdout, gid) {
		t.Fatalf("SessionStart printed %q; want the context_id and the group", start.stdout)
	}

	waiter := startCLI(t, dir, `{"session_id": "`+session+`", "hook_event_name": "Stop"}`, "wait", "--client", "claude-code", "--timeout", "60s")
	time.Sleep(300 * time.Millisecond) // let it block; an earlier send would be found by its first check anyway
	alice.ok("send_message", map[string]any{"group_id": gid, "context_id": "alice-ctx", "name": "alice", "message": "@bob please look at PR 9"}, nil)
	sentAt := time.Now()
	woke := finishCLI(t, waiter)
	t.Logf("send answered to wait exit: %v", woke.ended.Sub(sentAt))
	if woke.code != 2 || !strings.Contains(woke.stderr, "@bob please look at PR 9") || woke.stdout != "" {
		t.Fatalf("wait: exit %d, stdout %q, stderr %q; want 2 and the message on stderr", woke.code, woke.stdout, woke.stderr)
	}
	if d := woke.ended.Sub(sentAt); d > 5*time.Second {
		t.Errorf("wait ended %v after the send; want well under a second", d)
	}

	// The waiter delivered PR 9, so the next hook shows only newer mail.
	alice.ok("send_message", map[string]any{"group_id": gid, "context_id": "alice-ctx", "name": "alice", "message": "@bob and PR 10"}, nil)
	prompt := `{"session_id": "` + session + `", "hook_event_name": "UserPromptSubmit", "prompt": "go on"}`
	first := finishCLI(t, startCLI(t, dir, prompt, "hook", "--client", "claude-code"))
	var out struct {
		HookSpecificOutput struct {
			HookEventName     string `json:"hookEventName"`
			AdditionalContext string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal([]byte(first.stdout), &out); err != nil || out.HookSpecificOutput.HookEventName != "UserPromptSubmit" ||
		strings.Count(out.HookSpecificOutput.AdditionalContext, "@bob and PR 10") != 1 || strings.Contains(first.stdout, "PR 9") {
		t.Fatalf("hook printed %q (%v); want only the newer message, once, as additionalContext", first.stdout, err)
	}
	if second := finishCLI(t, startCLI(t, dir, prompt, "hook", "--client", "claude-code")); second.stdout != "" || second.code != 0 {
		t.Fatalf("second hook: exit %d, stdout %q; want nothing", second.code, second.stdout)
	}

	stop := `{"session_id": "` + session + `", "hook_event_name": "Stop", "stop_hook_active": false}`
	alice.ok("send_message", map[string]any{"group_id": gid, "context_id": "alice-ctx", "name": "alice", "message": "@bob one more thing"}, nil)
	blocked := finishCLI(t, startCLI(t, dir, stop, "hook", "--client", "claude-code"))
	// Claude Code shows a Stop reason twice, so it names the sender and
	// the tool, and the text comes once, through get_unread_messages.
	if !strings.Contains(blocked.stdout, `"decision":"block"`) || !strings.Contains(blocked.stdout, "from alice") ||
		!strings.Contains(blocked.stdout, "get_unread_messages with group_id "+gid) || strings.Contains(blocked.stdout, "one more thing") {
		t.Fatalf("Stop with new mail printed %q; want a block naming alice and get_unread_messages, without the text", blocked.stdout)
	}
	if again := finishCLI(t, startCLI(t, dir, strings.Replace(stop, "false", "true", 1), "hook", "--client", "claude-code")); again.stdout != "" {
		t.Fatalf("second Stop printed %q; want the agent let go", again.stdout)
	}
	var unread messagesReply
	bob.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": session, "name": "bob"}, &unread)
	if len(unread.Messages) != 1 || unread.Messages[0].Message != "@bob one more thing" {
		t.Errorf("get_unread_messages after the hooks: %+v; want the message the Stop hook named", unread.Messages)
	}
	status := finishCLI(t, startCLI(t, dir, "", "status", "--context-id", session))
	if !strings.Contains(status.stdout, "0 pending wakeups") || strings.Count(status.stdout, "by hook") != 1 || strings.Count(status.stdout, "by wait") != 1 {
		t.Errorf("status:\n%s\nwant one wake event delivered by wait, one by hook", status.stdout)
	}
}

// TestE2EWaitEndsOnSIGTERM stops a waiter with SIGTERM, as a client
// ending its session may: it exits 0, as at its timeout, and takes its slot
// file with it.
func TestE2EWaitEndsOnSIGTERM(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM")
	}
	dir := t.TempDir()
	cmd := exec.Command(builtBinary(t), "wait", "--context-id", "sess-term", "--timeout", "60s")
	cmd.Env = envWithout("CROSSTALK_", "CROSSTALK_GROUPS_DIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slot := waiterSlot(dir, "sess-term")
	waitUntil(t, "the waiter's slot file", func() bool { _, err := os.Stat(slot); return err == nil })
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("wait after SIGTERM: %v; want exit 0", err)
	}
	if _, err := os.Stat(slot); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("slot file after SIGTERM: %v; want it removed", err)
	}
}

// startClientWaiter starts the built waiter of contextID on dir, in an
// attended session whose client, as CLAUDE_PID says, is this test process;
// done receives its exit.
func startClientWaiter(t *testing.T, dir, contextID string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(builtBinary(t), "wait", "--context-id", contextID, "--timeout", "60s")
	cmd.Env = envWithout("CROSSTALK_", "CROSSTALK_GROUPS_DIR="+dir, "CLAUDE_PID="+strconv.Itoa(os.Getpid()), "CLAUDE_CODE_SESSION_ATTENDED=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, done
}

// TestE2EWaitEndsWithItsClientsServer runs a waiter whose client is this
// test process, as CLAUDE_PID says, and ends the client's stdio server
// while the waiter waits, or before it starts, as Claude Code may when its
// input closes during a turn: either way the waiter exits 0 within a few
// seconds, and takes its slot file with it.
func TestE2EWaitEndsWithItsClientsServer(t *testing.T) {
	const within = 3*livenessPoll + 2*time.Second
	for _, tc := range []struct {
		name        string
		serverFirst bool
	}{
		{"server ends while it waits", false},
		{"server ended before it started", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			server := startSession(t, "the client's server", dir)
			if tc.serverFirst {
				server.close()
			}
			cmd, done := startClientWaiter(t, dir, "sess-end")
			slot := waiterSlot(dir, "sess-end")
			if !tc.serverFirst {
				waitUntil(t, "the waiter's slot file", func() bool { _, err := os.Stat(slot); return err == nil })
				server.close()
			}
			start := time.Now()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("wait: %v; want exit 0", err)
				}
			case <-time.After(within):
				cmd.Process.Kill()
				<-done
				t.Fatalf("the waiter still ran %v after its client's server ended; want it ended", within)
			}
			t.Logf("the waiter ended %v after its client's server", time.Since(start).Round(time.Millisecond))
			if _, err := os.Stat(slot); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("slot file after the waiter ended: %v; want it removed", err)
			}
		})
	}
}

// TestE2EWaitOutlivesAReconnect ends the client's stdio server and starts
// another, as a client reconnecting its server does: a waiter that starts
// after that waits on, and ends with the new server.
func TestE2EWaitOutlivesAReconnect(t *testing.T) {
	dir := t.TempDir()
	startSession(t, "the client's first server", dir).close()
	server := startSession(t, "the client's second server", dir)
	cmd, done := startClientWaiter(t, dir, "sess-reconnect")
	select {
	case err := <-done:
		t.Fatalf("the waiter ended (%v) while the client's second server ran; want it waiting", err)
	case <-time.After(3 * livenessPoll):
	}
	server.close()
	select {
	case <-done:
	case <-time.After(3*livenessPoll + 2*time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("the waiter still ran after the second server ended; want it ended")
	}
}

// TestE2EClosedOutputs checks that the built binary is not killed by
// SIGPIPE when the client has closed the output it answers on: hook exits
// 0 and leaves the mail unread, wait still exits 2.
func TestE2EClosedOutputs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr bool // close stderr, not stdout
		code   int
	}{
		{"hook stdout", []string{"hook", "--client", "claude-code"}, false, 0},
		{"wait stderr", []string{"wait", "--client", "claude-code", "--timeout", "20s"}, true, waitWoke},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHookFixture(t, "sess-1")
			f.sendAs(t, "@bob do not lose me")
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
			defer w.Close()
			cmd := exec.Command(builtBinary(t), tc.args...)
			cmd.Env = envWithout("CROSSTALK_", "CROSSTALK_GROUPS_DIR="+f.st.dir)
			cmd.Stdin = strings.NewReader(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`)
			cmd.Stdout, cmd.Stderr = w, io.Discard
			if tc.stderr {
				cmd.Stdout, cmd.Stderr = io.Discard, w
			}
			cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Errorf("exit %d (%v); want %d, not a signal", code, cmd.ProcessState, tc.code)
			}
			if groups, err := f.st.memberships("sess-1"); err != nil || len(groups) != 1 || groups[0].unread != 1 {
				t.Errorf("memberships %+v (%v); want the message still unread", groups, err)
			}
		})
	}
}

// TestE2EInstalledHookFindsTheServersDirectory installs Claude Code's hooks
// in a project whose .mcp.json alone names the groups directory (with a
// space and a quote in it), runs the installed UserPromptSubmit command
// line with sh and no CROSSTALK_GROUPS_DIR, and sees the pending mail;
// uninstall then puts the settings file's bytes back.
func TestE2EInstalledHookFindsTheServersDirectory(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("runs the installed command line with sh")
	}
	f := newHookFixture(t, "sess-1")
	f.sendAs(t, "@bob found me")
	groups := filepath.Join(t.TempDir(), "team's groups")
	if err := os.Symlink(f.st.dir, groups); err != nil {
		t.Fatal(err)
	}
	project, home := t.TempDir(), t.TempDir()
	mcp := `{"mcpServers": {"crosstalk": {"command": "crosstalk-mcp", "env": {"CROSSTALK_GROUPS_DIR": ` + jsonLine(groups) + `}}}}`
	settings := filepath.Join(project, ".claude", "settings.json")
	const original = "{\n  \"model\": \"opus\"\n}\n"
	os.MkdirAll(filepath.Dir(settings), 0o755)
	if os.WriteFile(filepath.Join(project, ".mcp.json"), []byte(mcp), 0o644) != nil || os.WriteFile(settings, []byte(original), 0o644) != nil {
		t.Fatal("cannot write the project's files")
	}
	env := envWithout("CROSSTALK_", "HOME="+home)
	hooks := func(verb string) {
		cmd := exec.Command(builtBinary(t), "hooks", verb, "--client", "claude-code", "--scope", "project")
		cmd.Dir, cmd.Env = project, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hooks %s: %v\n%s", verb, err, out)
		}
	}
	hooks("install")
	var installed struct {
		Hooks map[string][]struct{ Hooks []struct{ Command string } }
	}
	raw, _ := os.ReadFile(settings)
	if err := json.Unmarshal(raw, &installed); err != nil || len(installed.Hooks["UserPromptSubmit"]) != 1 {
		t.Fatalf("installed settings (%v):\n%s", err, raw)
	}
	line := installed.Hooks["UserPromptSubmit"][0].Hooks[0].Command
	sh := exec.Command("sh", "-c", line)
	sh.Dir, sh.Env = project, env
	sh.Stdin = strings.NewReader(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`)
	out, err := sh.Output()
	if err != nil || !strings.Contains(string(out), "found me") {
		t.Errorf("sh -c %s: %v; printed %q; want the pending mail", line, err, out)
	}
	hooks("uninstall")
	if after, _ := os.ReadFile(settings); string(after) != original {
		t.Errorf("after uninstall:\n%q\nwant\n%q", after, original)
	}
}
