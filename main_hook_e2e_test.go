package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
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
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CROSSTALK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CROSSTALK_GROUPS_DIR="+dir)
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

	prompt := `{"session_id": "` + session + `", "hook_event_name": "UserPromptSubmit", "prompt": "go on"}`
	first := finishCLI(t, startCLI(t, dir, prompt, "hook", "--client", "claude-code"))
	var out struct {
		HookSpecificOutput struct {
			HookEventName     string `json:"hookEventName"`
			AdditionalContext string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal([]byte(first.stdout), &out); err != nil || out.HookSpecificOutput.HookEventName != "UserPromptSubmit" ||
		strings.Count(out.HookSpecificOutput.AdditionalContext, "@bob please look at PR 9") != 1 {
		t.Fatalf("hook printed %q (%v); want the message once as additionalContext", first.stdout, err)
	}
	if second := finishCLI(t, startCLI(t, dir, prompt, "hook", "--client", "claude-code")); second.stdout != "" || second.code != 0 {
		t.Fatalf("second hook: exit %d, stdout %q; want nothing", second.code, second.stdout)
	}

	stop := `{"session_id": "` + session + `", "hook_event_name": "Stop", "stop_hook_active": false}`
	alice.ok("send_message", map[string]any{"group_id": gid, "context_id": "alice-ctx", "name": "alice", "message": "@bob one more thing"}, nil)
	blocked := finishCLI(t, startCLI(t, dir, stop, "hook", "--client", "claude-code"))
	if !strings.Contains(blocked.stdout, `"decision":"block"`) || !strings.Contains(blocked.stdout, "one more thing") {
		t.Fatalf("Stop with new mail printed %q; want a block with the message", blocked.stdout)
	}
	if again := finishCLI(t, startCLI(t, dir, strings.Replace(stop, "false", "true", 1), "hook", "--client", "claude-code")); again.stdout != "" {
		t.Fatalf("second Stop printed %q; want the agent let go", again.stdout)
	}
	var unread messagesReply
	bob.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": session, "name": "bob"}, &unread)
	if len(unread.Messages) != 0 {
		t.Errorf("get_unread_messages after the hooks: %d messages; want 0", len(unread.Messages))
	}
	status := finishCLI(t, startCLI(t, dir, "", "status", "--context-id", session))
	if !strings.Contains(status.stdout, "0 pending wakeups") || strings.Count(status.stdout, "by hook") != 2 {
		t.Errorf("status:\n%s\nwant two wake events delivered by hook", status.stdout)
	}
}
