package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hookFixture is a groups directory where alice has written to a member
// whose context_id is a client's session id.
type hookFixture struct {
	st      *store
	groupID string
}

// newHookFixture creates a group by alice with memberID joined as bob, and
// points CROSSTALK_GROUPS_DIR at it.
func newHookFixture(t *testing.T, memberID string) *hookFixture {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("CROSSTALK_GROUPS_DIR", dir)
	t.Setenv("CROSSTALK_CONTEXT_ID", "")
	t.Setenv("CLAUDE_CODE_SESSION_ATTENDED", "") // tests run by a headless agent wait all the same
	st := newTestStore(t, dir)
	meta, err := st.createGroup("alice-ctx", "team", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range [][2]string{{"alice-ctx", "alice"}, {memberID, "bob"}} {
		if err := st.joinGroup(meta.groupID, m[0], m[1]); err != nil {
			t.Fatal(err)
		}
	}
	// Joining leaves nothing unread: the group is empty so far.
	return &hookFixture{st: st, groupID: meta.groupID}
}

// sendAs stores a message from alice.
func (f *hookFixture) sendAs(t *testing.T, text string) sent {
	t.Helper()
	out, err := f.st.sendMessage(f.groupID, outgoing{contextID: "alice-ctx", name: "alice", text: text, priority: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runHookCLI runs `crosstalk-mcp hook` through run, payload on stdin.
func runHookCLI(t *testing.T, payload []byte, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(append([]string{"hook"}, args...), bytes.NewReader(payload), &out, &errOut)
	return out.String(), errOut.String(), code
}

// hookShapes checks each client and event's documented output shape and
// returns the text the model would read.
var hookShapes = map[string]func(t *testing.T, out string) string{
	"claude":        func(t *testing.T, out string) string { return additionalContext(t, out, true) },
	"gemini":        func(t *testing.T, out string) string { return additionalContext(t, out, false) },
	"plain":         func(t *testing.T, out string) string { return out },
	"block":         func(t *testing.T, out string) string { return decision(t, out, "block", "reason") },
	"deny":          func(t *testing.T, out string) string { return decision(t, out, "deny", "reason") },
	"cursorContext": func(t *testing.T, out string) string { return onlyField(t, out, "additional_context") },
	"followup":      func(t *testing.T, out string) string { return onlyField(t, out, "followup_message") },
	"vscodeBlock": func(t *testing.T, out string) string {
		hso, _ := decodeOneObject(t, out)["hookSpecificOutput"].(map[string]any)
		if hso["decision"] != "block" || hso["hookEventName"] != "Stop" || len(hso) != 3 {
			t.Fatalf("got %q; want hookSpecificOutput with hookEventName Stop, decision block and reason", out)
		}
		text, _ := hso["reason"].(string)
		return text
	},
	"injectSteps": func(t *testing.T, out string) string {
		var v struct{ InjectSteps []map[string]string }
		if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.InjectSteps) != 1 || len(decodeOneObject(t, out)) != 1 {
			t.Fatalf("got %q (%v); want one injectSteps step", out, err)
		}
		return v.InjectSteps[0]["ephemeralMessage"]
	},
}

// hookContract maps each sample under testdata/hooks to its output shape.
var hookContract = map[string]string{
	"claude-code/SessionStart": "claude", "claude-code/UserPromptSubmit": "claude", "claude-code/PostToolUse": "claude", "claude-code/Stop": "block",
	"codex/SessionStart": "plain", "codex/UserPromptSubmit": "plain", "codex/PostToolUse": "claude", "codex/Stop": "block",
	"gemini/SessionStart": "gemini", "gemini/BeforeAgent": "gemini", "gemini/AfterTool": "gemini", "gemini/AfterAgent": "deny",
	"vscode/SessionStart": "claude", "vscode/UserPromptSubmit": "none", "vscode/PostToolUse": "claude", "vscode/Stop": "vscodeBlock",
	"cursor/sessionStart": "cursorContext", "cursor/stop": "followup", "antigravity/PreInvocation": "injectSteps",
}

func decodeOneObject(t *testing.T, out string) map[string]any {
	t.Helper()
	if strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("answer is not one line of JSON: %q", out)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("answer is not a JSON object: %v: %q", err, out)
	}
	return v
}

func additionalContext(t *testing.T, out string, withEventName bool) string {
	v := decodeOneObject(t, out)
	hso, _ := v["hookSpecificOutput"].(map[string]any)
	if len(v) != 1 || hso == nil {
		t.Fatalf("got %v; want only hookSpecificOutput", v)
	}
	if _, ok := hso["hookEventName"]; ok != withEventName {
		t.Errorf("hookEventName present = %v; want %v", ok, withEventName)
	}
	text, _ := hso["additionalContext"].(string)
	return text
}

func decision(t *testing.T, out, want, key string) string {
	v := decodeOneObject(t, out)
	if v["decision"] != want || len(v) != 2 {
		t.Fatalf("got %v; want decision %q and %s", v, want, key)
	}
	text, _ := v[key].(string)
	return text
}

func onlyField(t *testing.T, out, key string) string {
	v := decodeOneObject(t, out)
	text, ok := v[key].(string)
	if !ok || len(v) != 1 {
		t.Fatalf("got %v; want only %s", v, key)
	}
	return text
}

// TestHookContracts feeds every documented payload sample to `hook` for its
// client and checks the documented output shape, that the mail is in it,
// and that a second run prints no mail again.
func TestHookContracts(t *testing.T) {
	samples, err := filepath.Glob("testdata/hooks/*/*.json")
	if err != nil || len(samples) != len(hookContract) {
		t.Fatalf("got %d samples (%v); want %d", len(samples), err, len(hookContract))
	}
	for _, path := range samples {
		client := filepath.Base(filepath.Dir(path))
		event := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(client+"/"+event, func(t *testing.T) {
			shape := hookShapes[hookContract[client+"/"+event]]
			if shape == nil && hookContract[client+"/"+event] != "none" {
				t.Fatalf("no contract for %s/%s", client, event)
			}
			payload, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			memberID := hookPayload(mustDecodePayload(t, payload)).str(hookClients[client].sessionKeys...)
			f := newHookFixture(t, memberID)
			f.sendAs(t, "@bob please review PR 7")
			args := []string{"--client", client}
			if len(hookClients[client].eventKeys) == 0 { // the installed command names the event
				args = append(args, "--event", event)
			}
			out, stderr, code := runHookCLI(t, payload, args...)
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, stderr)
			}
			if shape == nil { // an event whose output never reaches the model
				if unread, _ := f.st.memberships(memberID); out != "" || unread[0].unread != 1 {
					t.Errorf("printed %q, %d unread; want nothing printed and the mail unread", out, unread[0].unread)
				}
				return
			}
			text := shape(t, out)
			// A Stop names the sender; the text comes through the tool.
			want := "@bob please review PR 7"
			if hookClients[client].events[event].kind == eventStop {
				want = "from alice"
			}
			if !strings.Contains(text, want) || !strings.Contains(text, f.groupID) {
				t.Errorf("text %q lacks %q or the group id", text, want)
			}
			start := hookClients[client].events[event].kind == eventStart
			if start && !strings.Contains(text, "your context_id is "+memberID) {
				t.Errorf("session start text %q does not tell the context_id", text)
			}
			out, _, _ = runHookCLI(t, payload, args...)
			if strings.Contains(out, "please review") || (!start && out != "") {
				t.Errorf("second run printed %q; want no mail again", out)
			}
		})
	}
}

func mustDecodePayload(t *testing.T, raw []byte) map[string]json.RawMessage {
	t.Helper()
	var p map[string]json.RawMessage
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHookMarksReadLikeGetUnread checks that what a hook printed is read and
// its wake event acknowledged, so get_unread_messages returns nothing.
func TestHookMarksReadLikeGetUnread(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	f.sendAs(t, "@bob one")
	payload := []byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`)
	if out, _, _ := runHookCLI(t, payload, "--client", "claude-code"); !strings.Contains(out, "@bob one") {
		t.Fatalf("got %q; want the message", out)
	}
	if msgs, err := f.st.unreadMessages(context.Background(), f.groupID, "sess-1", "bob", ""); err != nil || len(msgs) != 0 {
		t.Errorf("unread after hook: %d (%v); want 0", len(msgs), err)
	}
	ws, err := f.st.wakeups(f.groupID, "sess-1", 0)
	if err != nil || len(ws) != 1 || ws[0].readAt == nil {
		t.Fatalf("wake events %+v (%v); want one acknowledged", ws, err)
	}
	ds, err := deliveriesOf(f.st, f.groupID, "sess-1")
	if err != nil || len(ds) != 1 || ds[0].deliveredVia != viaHook || ds[0].state() != "read" {
		t.Errorf("deliveries %+v (%v); want one read, delivered by hook", ds, err)
	}
}

func deliveriesOf(st *store, groupID, contextID string) ([]delivery, error) {
	var ds []delivery
	err := st.withHandle(groupID, func(h *groupHandle) (err error) {
		ds, err = wakeupDeliveries(h.db, contextID, 0, false)
		return err
	})
	return ds, err
}

// TestHookBounds checks the cap of hookMaxMessages per answer, the "N
// more" line, and that what was not printed stays unread.
func TestHookBounds(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	for i := range 25 {
		f.sendAs(t, fmt.Sprintf("note %02d", i))
	}
	payload := []byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`)
	out, _, _ := runHookCLI(t, payload, "--client", "claude-code")
	text := additionalContext(t, out, true)
	if n := strings.Count(text, "- message "); n != hookMaxMessages {
		t.Errorf("printed %d messages; want %d", n, hookMaxMessages)
	}
	if !strings.Contains(text, "5 more: call get_unread_messages.") {
		t.Errorf("text lacks the rest count: %q", text[len(text)-80:])
	}
	msgs, err := f.st.unreadMessages(context.Background(), f.groupID, "sess-1", "bob", "")
	if err != nil || len(msgs) != 5 || msgs[0].text != "note 20" {
		t.Errorf("left unread %d (%v); want notes 20-24", len(msgs), err)
	}
}

// TestHookByteBound checks that big messages stop the answer near 8 KiB.
func TestHookByteBound(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	for range 4 {
		f.sendAs(t, strings.Repeat("x", 3000))
	}
	out, _, _ := runHookCLI(t, []byte(`{"session_id": "sess-1"}`), "--client", "codex", "--event", "UserPromptSubmit")
	if len(out) > hookMaxBytes+512 || !strings.Contains(out, "2 more: call get_unread_messages.") {
		t.Errorf("answer of %d bytes, tail %q; want at most about 8 KiB and 2 more", len(out), out[max(0, len(out)-60):])
	}
}

// TestHookWakeupsFirst checks that mail with a wake event comes before
// older mail without one.
func TestHookWakeupsFirst(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	if err := f.st.joinGroup(f.groupID, "carol-ctx", "carol"); err != nil {
		t.Fatal(err)
	}
	f.sendAs(t, "@carol not for bob's wakeup")
	f.sendAs(t, "@bob wake up")
	out, _, _ := runHookCLI(t, []byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`), "--client", "claude-code")
	text := additionalContext(t, out, true)
	if i, j := strings.Index(text, "@bob wake up"), strings.Index(text, "@carol"); i < 0 || j < 0 || i > j {
		t.Errorf("order in %q; want the wakeup first", text)
	}
}

// TestHookStopBlocksOnce checks that Stop keeps the agent going only while
// a wake event is pending, once per batch of mail.
func TestHookStopBlocksOnce(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	stop := []byte(`{"session_id": "sess-1", "hook_event_name": "Stop", "stop_hook_active": false}`)
	if out, _, _ := runHookCLI(t, stop, "--client", "claude-code"); out != "" {
		t.Fatalf("Stop with no mail printed %q", out)
	}
	f.sendAs(t, "@bob answer me")
	if out, _, _ := runHookCLI(t, stop, "--client", "claude-code"); !strings.Contains(decision(t, out, "block", "reason"), "get_unread_messages with group_id "+f.groupID) ||
		strings.Contains(out, "answer me") {
		t.Fatalf("Stop with a wakeup printed %q; want a block naming get_unread_messages, without the text", out)
	}
	if groups, err := f.st.memberships("sess-1"); err != nil || len(groups) != 1 || groups[0].unread != 1 || groups[0].wakeups != 0 {
		t.Errorf("memberships %+v (%v); want the message unread, its wake event acknowledged", groups, err)
	}
	again := []byte(`{"session_id": "sess-1", "hook_event_name": "Stop", "stop_hook_active": true}`)
	if out, _, _ := runHookCLI(t, again, "--client", "claude-code"); out != "" {
		t.Errorf("second Stop printed %q; want the agent let go", out)
	}
}

// TestHookAnswersExactly pins the exact JSON line every client and event
// prints, to the byte, for the text "T".
func TestHookAnswersExactly(t *testing.T) {
	const ctx = `{"hookSpecificOutput":{"additionalContext":"T","hookEventName":"%s"}}`
	want := map[string]string{
		"claude-code/SessionStart":     fmt.Sprintf(ctx, "SessionStart"),
		"claude-code/UserPromptSubmit": fmt.Sprintf(ctx, "UserPromptSubmit"),
		"claude-code/PostToolUse":      fmt.Sprintf(ctx, "PostToolUse"),
		"claude-code/Stop":             `{"decision":"block","reason":"T"}`,
		"claude-code/SubagentStop":     `{"decision":"block","reason":"T"}`,
		"codex/SessionStart":           "T",
		"codex/UserPromptSubmit":       "T",
		"codex/PostToolUse":            fmt.Sprintf(ctx, "PostToolUse"),
		"codex/Stop":                   `{"decision":"block","reason":"T"}`,
		"gemini/SessionStart":          `{"hookSpecificOutput":{"additionalContext":"T"}}`,
		"gemini/BeforeAgent":           `{"hookSpecificOutput":{"additionalContext":"T"}}`,
		"gemini/AfterTool":             `{"hookSpecificOutput":{"additionalContext":"T"}}`,
		"gemini/AfterAgent":            `{"decision":"deny","reason":"T"}`,
		"vscode/SessionStart":          fmt.Sprintf(ctx, "SessionStart"),
		"vscode/PostToolUse":           fmt.Sprintf(ctx, "PostToolUse"),
		"vscode/Stop":                  `{"hookSpecificOutput":{"decision":"block","hookEventName":"Stop","reason":"T"}}`,
		"cursor/sessionStart":          `{"additional_context":"T"}`,
		"cursor/stop":                  `{"followup_message":"T"}`,
		"antigravity/PreInvocation":    `{"injectSteps":[{"ephemeralMessage":"T"}]}`,
	}
	n := 0
	for _, client := range hookClientNames() {
		for event, ev := range hookClients[client].events {
			n++
			t.Run(client+"/"+event, func(t *testing.T) {
				if got, w := ev.render(event, "T"), want[client+"/"+event]+"\n"; got != w {
					t.Errorf("got %q; want %q", got, w)
				}
			})
		}
	}
	if n != len(want) {
		t.Errorf("got %d events; want %d", n, len(want))
	}
}

// TestHookEventNames checks which payload fields name the event and the
// session: VS Code's camelCase ones under claude-code too, Antigravity's
// first model call as a session start, and a payload naming no event says
// so on stderr.
func TestHookEventNames(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	f.sendAs(t, "@bob hi")
	// VS Code running Claude Code's hooks: answered as VS Code, whose
	// UserPromptSubmit output never reaches the model, so it prints nothing.
	if out, _, _ := runHookCLI(t, []byte(`{"sessionId": "sess-1", "hookEventName": "UserPromptSubmit"}`), "--client", "claude-code"); out != "" {
		t.Errorf("claude-code under VS Code at UserPromptSubmit printed %q; want nothing, the mail kept unread", out)
	}
	out, _, _ := runHookCLI(t, []byte(`{"sessionId": "sess-1", "hookEventName": "PostToolUse"}`), "--client", "claude-code")
	if !strings.Contains(additionalContext(t, out, true), "@bob hi") {
		t.Errorf("claude-code with camelCase fields printed %q; want the mail", out)
	}
	out, stderr, code := runHookCLI(t, []byte(`{"session_id": "sess-1"}`), "--client", "vscode")
	if out != "" || code != 0 || !strings.Contains(stderr, "no event name") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("no event name: out %q, stderr %q, exit %d; want nothing, one line why, 0", out, stderr, code)
	}
	first := []byte(`{"conversationId": "sess-1", "invocationNum": 0}`)
	out, _, _ = runHookCLI(t, first, "--client", "antigravity", "--event", "PreInvocation")
	if !strings.Contains(hookShapes["injectSteps"](t, out), "your context_id is sess-1") {
		t.Errorf("first PreInvocation printed %q; want the identity", out)
	}
	later := []byte(`{"conversationId": "sess-1", "invocationNum": 3}`)
	if out, _, _ = runHookCLI(t, later, "--client", "antigravity", "--event", "PreInvocation"); out != "" {
		t.Errorf("later PreInvocation with no mail printed %q; want nothing", out)
	}
}

// TestHookIdentity checks the fallbacks for the member's context_id and
// that a hook that cannot tell prints nothing and says why.
func TestHookIdentity(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	f.sendAs(t, "@bob hi")
	event := []string{"--client", "claude-code", "--event", "UserPromptSubmit"}
	out, stderr, code := runHookCLI(t, []byte(`{}`), event...)
	if out != "" || code != 0 || !strings.Contains(stderr, "cannot tell which member") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("no identity: out %q, stderr %q, exit %d; want nothing, one line why, 0", out, stderr, code)
	}
	if out, _, _ := runHookCLI(t, []byte(`{"session_id": "someone-else"}`), event...); out != "" {
		t.Fatalf("another session printed %q; want nothing", out)
	}
	t.Setenv("CROSSTALK_CONTEXT_ID", "sess-1")
	if out, _, _ := runHookCLI(t, nil, event...); !strings.Contains(out, "@bob hi") {
		t.Errorf("CROSSTALK_CONTEXT_ID fallback printed %q; want the message", out)
	}
}

// TestHookFailuresAreQuiet checks that bad input never breaks a client.
func TestHookFailuresAreQuiet(t *testing.T) {
	newHookFixture(t, "sess-1")
	for name, args := range map[string][]string{
		"unknown client": {"--client", "emacs"},
		"bad payload":    {"--client", "claude-code"},
	} {
		t.Run(name, func(t *testing.T) {
			out, stderr, code := runHookCLI(t, []byte(`{not json`), args...)
			if out != "" || code != 0 || strings.Count(stderr, "\n") != 1 {
				t.Errorf("out %q, stderr %q, exit %d; want nothing, one line, 0", out, stderr, code)
			}
		})
	}
}

// TestHookNothingPendingIsFast checks the idle path's cost with a few
// groups; the bound is generous for a loaded machine.
func TestHookNothingPendingIsFast(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	for range 5 {
		meta, err := f.st.createGroup("alice-ctx", "other", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.st.joinGroup(meta.groupID, "sess-1", "bob"); err != nil {
			t.Fatal(err)
		}
	}
	payload := []byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`)
	start := time.Now()
	out, stderr, _ := runHookCLI(t, payload, "--client", "claude-code")
	if out != "" || stderr != "" {
		t.Fatalf("out %q, stderr %q; want nothing", out, stderr)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("idle hook took %v; want well under 500ms", d)
	}
}

// TestHookBigMessage checks that a message over the hook's budget is shown
// cut short with how to read it, stays unread, and neither silences the
// context hooks nor hides the mail behind it; Stop keeps the agent going
// once for it, not forever.
func TestHookBigMessage(t *testing.T) {
	huge := "@bob " + strings.Repeat("y", 20000)
	marker := fmt.Sprintf("Only the first %d of its %d bytes", hookPreviewBytes, len(huge))
	for _, event := range []string{"UserPromptSubmit", "PostToolUse"} {
		t.Run(event, func(t *testing.T) {
			f := newHookFixture(t, "sess-1")
			f.sendAs(t, huge)
			f.sendAs(t, "@bob after it")
			payload := []byte(`{"session_id": "sess-1", "hook_event_name": "` + event + `"}`)
			out, stderr, _ := runHookCLI(t, payload, "--client", "claude-code")
			if !strings.Contains(out, marker) || !strings.Contains(out, "after it") || len(out) > hookMaxBytes+512 {
				t.Fatalf("first %s: %d bytes %.300q (stderr %q); want the preview and the next message", event, len(out), out, stderr)
			}
			groups, err := f.st.memberships("sess-1")
			if err != nil || len(groups) != 1 || groups[0].unread != 1 {
				t.Fatalf("memberships %+v (%v); want one unread", groups, err)
			}
			if left, _, err := f.st.pendingMail(groups[0], "sess-1", hookMaxMessages+1); err != nil || len(left) != 0 {
				t.Fatalf("left pending %d (%v); want none, the preview delivered", len(left), err)
			}
			f.sendAs(t, "@bob newest")
			out, _, _ = runHookCLI(t, payload, "--client", "claude-code")
			// The preview was delivered once; the whole text waits for
			// get_unread_messages.
			if strings.Contains(out, marker) || strings.Contains(out, "after it") || !strings.Contains(out, "newest") {
				t.Errorf("second %s printed %.300q; want only the new mail", event, out)
			}
		})
	}
}

// TestHookShowsNewMailPastPreviews checks that messages a hook already
// showed cut short, unread but delivered, are not shown again and take
// none of a later answer's budget or "N more" count from newer mail.
func TestHookShowsNewMailPastPreviews(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	big := strings.Repeat("x", 10000)
	for range hookMaxBytes/hookPreviewBytes - 1 {
		f.sendAs(t, big)
	}
	payload := []byte(`{"session_id": "sess-1", "hook_event_name": "PostToolUse"}`)
	// The first answer fills up with previews and leaves the last ones.
	if out, _, _ := runHookCLI(t, payload, "--client", "claude-code"); !strings.Contains(out, "- message 1 ") || !strings.Contains(out, "more: call") {
		t.Fatalf("first hook printed %.300q; want previews and more", out)
	}
	// Newer mail that wakes someone else sorts after the previews.
	if err := f.st.joinGroup(f.groupID, "carol-ctx", "carol"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.sendMessage(f.groupID, outgoing{contextID: "alice-ctx", name: "alice", text: "the build is green", priority: "normal", wake: []string{"carol-ctx"}}); err != nil {
		t.Fatal(err)
	}
	out, stderr, _ := runHookCLI(t, payload, "--client", "claude-code")
	if !strings.Contains(out, "the build is green") || strings.Contains(out, "- message 1 ") || strings.Contains(out, "more: call") {
		t.Errorf("second hook printed %.300q (stderr %q); want the rest and the new message, nothing again", out, stderr)
	}
}

// TestHookCommandsSkipDamagedGroups checks that a group file no server can
// use costs hook, status and wait one stderr line each, not their answer.
func TestHookCommandsSkipDamagedGroups(t *testing.T) {
	for name, content := range map[string][]byte{"garbage": []byte("not a database at all, just text"), "zero-byte": nil} {
		t.Run(name, func(t *testing.T) {
			f := newHookFixture(t, "sess-1")
			bad := filepath.Join(f.st.dir, "grp_"+strings.Repeat("0", 32)+".sqlite3")
			if err := os.WriteFile(bad, content, 0o644); err != nil {
				t.Fatal(err)
			}
			agePastGrace(t, bad)
			f.sendAs(t, "@bob still here")
			var out, errOut bytes.Buffer
			if code := run([]string{"status", "--context-id", "sess-1"}, nil, &out, &errOut); code != 0 || !strings.Contains(out.String(), "1 unread message") ||
				strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), "skipping damaged group file") {
				t.Errorf("status: exit %d, stdout %q, stderr %q; want the group and one line", code, out.String(), errOut.String())
			}
			out.Reset()
			errOut.Reset()
			if code := run([]string{"wait", "--context-id", "sess-1", "--timeout", "20s"}, strings.NewReader(""), &out, &errOut); code != waitWoke ||
				!strings.Contains(errOut.String(), "still here") {
				t.Errorf("wait: exit %d, stderr %q; want woken by the message", code, errOut.String())
			}
			f.sendAs(t, "@bob and here") // wait delivered the first
			stdout, stderr, _ := runHookCLI(t, []byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`), "--client", "claude-code")
			if !strings.Contains(stdout, "and here") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("hook: stdout %q, stderr %q; want the message and one line", stdout, stderr)
			}
		})
	}
}

// TestHookCommandsNeedTheGroupsDirectory checks that hook, wait, status and
// doctor never create a missing groups directory, from the environment or
// --groups-dir, and say so in one line that names the settings to fix; hook
// and wait still exit 0.
func TestHookCommandsNeedTheGroupsDirectory(t *testing.T) {
	t.Setenv("CROSSTALK_CONTEXT_ID", "sess-1")
	payload := `{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"hook", []string{"hook", "--client", "claude-code"}, 0},
		{"wait", []string{"wait", "--timeout", "5s"}, 0},
		{"status", []string{"status"}, 1},
		{"doctor", []string{"doctor"}, 1},
	} {
		for _, viaFlag := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/flag=%v", tc.name, viaFlag), func(t *testing.T) {
				missing := filepath.Join(t.TempDir(), "typo")
				args := tc.args
				t.Setenv("CROSSTALK_GROUPS_DIR", missing)
				if viaFlag {
					t.Setenv("CROSSTALK_GROUPS_DIR", t.TempDir())
					args = append(args, "--groups-dir", missing)
				}
				var out, errOut bytes.Buffer
				code := run(args, strings.NewReader(payload), &out, &errOut)
				if code != tc.code || out.Len() != 0 || strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), missing) ||
					!strings.Contains(errOut.String(), "point CROSSTALK_GROUPS_DIR or --groups-dir at the server's") {
					t.Errorf("exit %d, stdout %q, stderr %q; want %d, nothing, one line naming the directory and the settings", code, out.String(), errOut.String(), tc.code)
				}
				if _, err := os.Stat(missing); err == nil {
					t.Errorf("%s created %s", tc.name, missing)
				}
			})
		}
	}
}

// TestHookBoundsLongNames sends from a member whose name is longer than a
// hook's whole budget: its header is cut short, so neither its message nor
// the one after it is hidden from the hook.
func TestHookBoundsLongNames(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	long := strings.Repeat("m", 9000)
	if err := f.st.joinGroup(f.groupID, "mallory-ctx", long); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.sendMessage(f.groupID, outgoing{contextID: "mallory-ctx", name: long, text: "hi all", priority: "normal"}); err != nil {
		t.Fatal(err)
	}
	f.sendAs(t, "@bob the real question")
	out, errOut, _ := runHookCLI(t, []byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`), "--client", "claude-code")
	if out == "" {
		t.Fatalf("hook printed nothing (stderr %q) with 2 unread messages; want both shown", errOut)
	}
	if text := additionalContext(t, out, true); !strings.Contains(text, "hi all") || !strings.Contains(text, "the real question") || len(text) > hookMaxBytes+1024 {
		t.Errorf("hook printed %d bytes; want both messages within the bound", len(text))
	}
}

// TestHookSessionStartBoundsGroupNames gives the member's group a name
// longer than a hook's whole budget, which its creator may set: the session
// start answer still stays within the bound, with the mail in it.
func TestHookSessionStartBoundsGroupNames(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	long := strings.Repeat("n", 100000)
	if _, err := f.st.updateGroupMetadata(f.groupID, "alice-ctx", &long, nil); err != nil {
		t.Fatal(err)
	}
	f.sendAs(t, "@bob the real question")
	out, errOut, _ := runHookCLI(t, []byte(`{"session_id": "sess-1", "hook_event_name": "SessionStart"}`), "--client", "claude-code")
	if text := additionalContext(t, out, true); !strings.Contains(text, "the real question") || len(text) > hookMaxBytes+2048 {
		t.Errorf("session start printed %d bytes (stderr %q); want the mail within the bound", len(text), errOut)
	}
}

// TestHookSkipsSubagents runs Claude Code's PostToolUse as it fires inside
// a subagent, with the parent's session id and an agent_id: what it prints
// reaches only the subagent's model, so the mail must stay unread for the
// member's own next hook.
func TestHookSkipsSubagents(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	f.sendAs(t, "@bob please review PR 7")
	sub := []byte(`{"session_id": "sess-1", "agent_id": "a7784052ceb8a4d1a", "agent_type": "Explore", "hook_event_name": "PostToolUse", "tool_name": "Grep"}`)
	if out, stderr, _ := runHookCLI(t, sub, "--client", "claude-code"); out != "" {
		t.Errorf("subagent's hook printed %q (stderr %q); want nothing", out, stderr)
	}
	main := []byte(`{"session_id": "sess-1", "hook_event_name": "PostToolUse", "tool_name": "Agent"}`)
	if out, _, _ := runHookCLI(t, main, "--client", "claude-code"); !strings.Contains(out, "please review PR 7") {
		t.Errorf("member's own hook printed %q; want the mail", out)
	}
}

// TestHookSessionStartFitsClaudeCode starts a session of a member of many
// groups with more mail than a hook shows: identity and mail together stay
// within the 10,000 characters past which Claude Code hands the model a
// 2 KB preview of a hook's context instead of the mail marked read.
func TestHookSessionStartFitsClaudeCode(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	for i := range 20 {
		meta, err := f.st.createGroup("alice-ctx", fmt.Sprintf("acme-platform-migration-workstream-%02d", i), "")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.st.joinGroup(meta.groupID, "sess-1", "claude-backend-reviewer"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		f.sendAs(t, fmt.Sprintf("@bob status %d: ", i)+strings.Repeat("lorem ipsum ", 55))
	}
	out, stderr, _ := runHookCLI(t, []byte(`{"session_id": "sess-1", "hook_event_name": "SessionStart"}`), "--client", "claude-code")
	text := additionalContext(t, out, true)
	if n := len([]rune(text)); n > 10000 || !strings.Contains(text, "@bob status 0") {
		t.Errorf("session start printed %d characters (stderr %q); want at most 10000, with mail", n, stderr)
	}
}

// TestHookAnswersAnUnclosedPayload writes the whole payload but never
// closes the hook's stdin, as Claude Code has been seen to do: the hook
// answers once the JSON object is complete, instead of stalling the
// session until its timeout kills it.
func TestHookAnswersAnUnclosedPayload(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	f.sendAs(t, "@bob please review PR 7")
	stdin, client := io.Pipe()
	defer client.Close()
	go client.Write([]byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}` + "\n"))
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"hook", "--client", "claude-code"}, stdin, &stdout, &stderr) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		client.Close()
		<-done
		t.Fatal("hook still reading its payload 5s after it was written whole")
	}
	if !strings.Contains(stdout.String(), "please review PR 7") {
		t.Errorf("hook printed %q (stderr %q); want the mail", stdout.String(), stderr.String())
	}
}
