// Package clients proves crosstalk-mcp's delivery on the real agent client
// programs, with only the model replaced. Each scenario runs a client
// pinned in package.json (the Claude Code CLI, and for scenario c also the
// Codex CLI) against a fake model API on loopback (fakemodel_test.go:
// Anthropic Messages for Claude Code, OpenAI Responses for Codex, both
// streamed as server-sent events), with the hooks that `crosstalk-mcp
// hooks install --scope project` writes and the MCP server configured as
// a user would (.mcp.json; Codex's config.toml), in a throwaway HOME and
// project directory. The fake model records every request body, exactly
// what a model would see, and answers from a small per-scenario script;
// another agent, alice, sends "@bob MARKER" through the built binary over
// stdio (crosstalk_test.go). Each scenario asserts that the unique marker
// stands exactly once in what the model received (the most occurrences in
// any one request, since each request repeats the conversation) and
// reports the delay from the send being answered to the first model
// request that carries it, on a line starting "RESULT". The fake model
// acts where a model would: told by a Stop hook to read its mail, it calls
// get_unread_messages. Each scenario then ends its client as a user would
// and asserts that no `crosstalk-mcp wait` of the session outlives it by
// more than 3 s; scenario b also that one waiter runs, however many hook
// runs armed one.
//
// The scenarios: a, `claude -p` with mail pending at start (a2: no -p, but
// its output redirected, which is as headless); b, a
// stream-json session getting mail between turns; c, the model calling
// wait_for_messages with the mail arriving 3 s later (Claude Code and
// Codex); d, mail arriving during a turn, so that Stop finds it pending
// (d2: under -p, where only the Stop hook can deliver it; for Codex, d is
// mail arriving before the model's next tool call, which PostToolUse
// shows, and d2 mail arriving during its last answer, which Stop tells of);
// e, an interactive session in a pseudo-terminal (pty_linux_test.go) woken
// while idle; f and g, --resume (scenarios_test.go); h, the model reading
// its receipts (receipts_test.go); i, Claude Code connected to `serve
// --http` with a per-agent token, which may not speak as another context_id
// (http_test.go); j, a stream-json session whose input closes during a
// turn, whose last waiter may start after the stdio server has ended.
//
// Run it with `make conformance-clients` from the repository root, or by
// hand:
//
//	cd conformance/clients && npm ci && go test -count=1 -v .
//
// CROSSTALK_BIN names the crosstalk-mcp binary (default: one built from
// ../..); CLAUDE_BIN and CODEX_BIN override the npm-installed clients;
// CLIENTS_LOG_DIR keeps Claude Code's debug logs and every request body
// there. Bob's context_id is the client's own session id, which the hooks
// read from their payload: Claude Code is started with --session-id, and
// the fake Codex model reads its id from the SessionStart hook's text.
// Nothing leaves loopback: the environment turns off Claude Code's
// telemetry, updates and other nonessential traffic; Codex's config.toml
// turns off its plugin and app sync (github.com, chatgpt.com) and its
// metrics export (ab.chatgpt.com); and the fake API answers every path it
// is asked. (Checked with strace -e connect,sendto on both clients.) The scenarios run in parallel; a run
// takes about 25 s (40 s with make's build and npm ci).
package clients

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

var crosstalkBin, claudeBin string

func TestMain(m *testing.M) {
	code, err := setUp(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance/clients:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// setUp finds or builds the two programs, then runs the tests.
func setUp(m *testing.M) (int, error) {
	crosstalkBin = os.Getenv("CROSSTALK_BIN")
	if crosstalkBin == "" {
		dir, err := os.MkdirTemp("", "crosstalk-clients-bin")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		crosstalkBin = filepath.Join(dir, "crosstalk-mcp")
		build := exec.Command("go", "build", "-o", crosstalkBin, ".")
		build.Dir, build.Stdout, build.Stderr = filepath.Join("..", ".."), os.Stderr, os.Stderr
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if err := build.Run(); err != nil {
			return 0, fmt.Errorf("build crosstalk-mcp: %w", err)
		}
	}
	claudeBin = os.Getenv("CLAUDE_BIN")
	if claudeBin == "" {
		claudeBin = nativeClaude()
	}
	for _, p := range []*string{&crosstalkBin, &claudeBin} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return 0, err
		}
		if _, err := os.Stat(abs); err != nil {
			return 0, fmt.Errorf("%w (run npm ci in conformance/clients for Claude Code)", err)
		}
		*p = abs
	}
	return m.Run(), nil
}

// nativeClaude is the platform's binary that npm installed with the
// pinned package, which the package's postinstall copies over its
// bin/claude.exe; the binary itself is used, so that a machine whose npm
// skips install scripts runs the same program.
func nativeClaude() string {
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	native := filepath.Join("node_modules", "@anthropic-ai", "claude-code-"+runtime.GOOS+"-"+arch, "claude")
	if _, err := os.Stat(native); err == nil {
		return native
	}
	return filepath.Join("node_modules", ".bin", "claude")
}

// dummyKey is the API key the fake model accepts; it never leaves loopback.
const dummyKey = "sk-ant-api03-conformance-clients-dummy-key-0000000000000000AA"

// session is one scenario's throwaway world: HOME, project directory,
// groups directory, fake model and group.
type session struct {
	t       *testing.T
	home    string
	project string
	groups  string
	model   *fakeModel
	group   *group
	id      string // the Claude Code session id, bob's context_id
	marker  string
	env     []string
}

// newSession lays out HOME and the project, installs the hooks with
// crosstalk-mcp itself, configures the MCP server and joins alice and bob.
func newSession(t *testing.T, script modelScript) *session {
	root := t.TempDir()
	s := &session{t: t, home: filepath.Join(root, "home"), project: filepath.Join(root, "project"),
		groups: filepath.Join(root, "groups"), id: newUUID(t), marker: "MARKER-" + newUUID(t)[:8]}
	for _, d := range []string{s.home, s.project, s.groups, filepath.Join(s.home, ".claude")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.model = newFakeModel(t, s.readsWhenTold(script))
	if dir := os.Getenv("CLIENTS_LOG_DIR"); dir != "" {
		s.model.dump = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	}
	s.env = []string{
		"HOME=" + s.home, "PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm-256color", "LANG=C.UTF-8",
		"TMPDIR=" + root, "USER=clients", "SHELL=/bin/sh",
		"CROSSTALK_GROUPS_DIR=" + s.groups,
		"ANTHROPIC_BASE_URL=" + s.model.url, "ANTHROPIC_API_KEY=" + dummyKey,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1", "DISABLE_BUG_COMMAND=1", "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
		"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1", "IS_SANDBOX=1",
	}
	install := exec.Command(crosstalkBin, "hooks", "install", "--client", "claude-code", "--scope", "project")
	install.Dir, install.Env = s.project, s.env
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("hooks install: %v\n%s", err, out)
	}
	s.writeJSON(filepath.Join(s.project, ".mcp.json"), map[string]any{"mcpServers": map[string]any{
		"crosstalk": map[string]any{"type": "stdio", "command": crosstalkBin, "args": []string{},
			"env": map[string]any{"CROSSTALK_GROUPS_DIR": s.groups}}}})
	// The user's settings trust the project's MCP server; the project's
	// settings file holds only what hooks install wrote.
	s.writeJSON(filepath.Join(s.home, ".claude", "settings.json"), map[string]any{
		"enableAllProjectMcpServers": true, "skipDangerousModePermissionPrompt": true,
		"permissions": map[string]any{"defaultMode": "bypassPermissions"}})
	// The global config marks onboarding done, the project trusted and
	// the API key approved, which the interactive mode would ask about.
	s.writeJSON(filepath.Join(s.home, ".claude.json"), map[string]any{
		"hasCompletedOnboarding": true, "lastOnboardingVersion": "2.1.332", "theme": "dark",
		"bypassPermissionsModeAccepted": true, "numStartups": 1,
		"customApiKeyResponses": map[string]any{"approved": []string{dummyKey[len(dummyKey)-20:]}, "rejected": []string{}},
		"projects": map[string]any{s.project: map[string]any{"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true,
			"allowedTools": []string{}, "enabledMcpjsonServers": []string{"crosstalk"}}}})
	s.group = newGroup(t, crosstalkBin, s.env, s.id)
	return s
}

func (s *session) writeJSON(path string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func newUUID(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// claudeArgs are the flags every scenario passes: the session id that
// makes bob's context_id known in advance, and no permission prompts.
func (s *session) claudeArgs(extra ...string) []string {
	return append([]string{"--session-id", s.id, "--dangerously-skip-permissions",
		"--debug-file", s.debugLog()}, extra...)
}

// command is Claude Code with the session's environment, in the project,
// in a process group of its own so that it and its hooks can be ended.
func (s *session) command(args ...string) *exec.Cmd {
	cmd := exec.Command(claudeBin, args...)
	cmd.Dir, cmd.Env = s.project, s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// kill ends the process group the harness started for cmd.
func kill(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// outcome is one scenario's result as the report table shows it.
type outcome struct {
	result string // passed, failed or hung
}

// sentBy returns the time a scenario's model handler sent its mail on
// sentAt, or the zero time if it never did (report then shows no latency).
func sentBy(sentAt <-chan time.Time) time.Time {
	select {
	case sent := <-sentAt:
		return sent
	default:
		return time.Time{}
	}
}

// report logs the scenario's figures and, on a wrong count, what the
// model saw around each marker.
func (s *session) report(name string, sent time.Time, o outcome) {
	d := s.model.delivered(s.marker)
	if o.result == "passed" && d.count != 1 {
		o.result = "failed"
	}
	delay := "never"
	if !d.first.IsZero() && !sent.IsZero() {
		delay = fmt.Sprintf("%d ms", d.first.Sub(sent).Milliseconds())
	}
	s.t.Logf("RESULT %s: %s; marker count %d; delay %s; marker per main request %v; %d requests",
		name, o.result, d.count, delay, d.perMain, len(s.model.snapshot()))
	if d.count != 1 {
		for i, src := range s.model.sources(s.marker) {
			s.t.Logf("occurrence %d: %s", i+1, src)
		}
		for i, c := range s.model.contexts(s.marker) {
			s.t.Logf("the model saw (%d): %s", i+1, c)
		}
		s.t.Errorf("the marker reached the model %d times; want exactly 1", d.count)
	}
}

// stopNoticeText is how a Crosstalk Stop hook asks the model to read its
// new mail; the fake model then calls get_unread_messages, as a model
// would.
const stopNoticeText = "Read it with get_unread_messages"

// readsWhenTold answers a request whose last message is a Crosstalk Stop
// hook's notice, and not yet a tool result, with the get_unread_messages
// call it asks for; every other request goes to script.
func (s *session) readsWhenTold(script modelScript) modelScript {
	return func(n int, r modelRequest) modelReply {
		var body struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if json.Unmarshal(r.body, &body) == nil && len(body.Messages) > 0 {
			last := string(body.Messages[len(body.Messages)-1])
			if strings.Contains(last, stopNoticeText) && !strings.Contains(last, `"tool_result"`) {
				return modelReply{toolName: "mcp__crosstalk__get_unread_messages",
					toolInput: map[string]any{"group_id": s.group.id, "context_id": s.group.bob, "name": "bob", "caller_name": "bob"}}
			}
		}
		return script(n, r)
	}
}

// waitersLeft counts the crosstalk-mcp waiters of this session still
// running limit after its client ended, polling so that a passing run
// takes no longer than it must.
func (s *session) waitersLeft(limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		n := 0
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			args := strings.Split(string(b), "\x00")
			if len(args) > 2 && args[0] == crosstalkBin && args[1] == "wait" && strings.Contains(string(b), s.groups) {
				n++
			}
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkWaiters asserts that no waiter of the session outlives it by more
// than waiterLimit, and logs how many were left.
func (s *session) checkWaiters(name string) {
	n := s.waitersLeft(waiterLimit)
	s.t.Logf("RESULT %s: %d crosstalk-mcp wait processes alive %v after the session ended", name, n, waiterLimit)
	if n != 0 {
		s.t.Errorf("%d crosstalk-mcp wait processes outlived the session by %v; want 0", n, waiterLimit)
	}
}

// debugLog is where Claude Code writes its debug log: in the throwaway
// HOME, or in $CLIENTS_LOG_DIR, named after the test, to keep it.
func (s *session) debugLog() string {
	if dir := os.Getenv("CLIENTS_LOG_DIR"); dir != "" {
		return filepath.Join(dir, strings.ReplaceAll(s.t.Name(), "/", "_")+".log")
	}
	return filepath.Join(s.home, "claude-debug.log")
}

// hasMarker reports whether a main request carries the marker.
func (s *session) hasMarker(r modelRequest) bool {
	return r.main && strings.Contains(string(r.body), s.marker)
}

// hookLines returns the debug log's lines about hooks finishing or
// failing, for a failure message.
func (s *session) hookLines() string {
	b, _ := os.ReadFile(s.debugLog())
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "finished with status") || strings.Contains(line, "[ERROR]") || strings.Contains(line, "syncRewake") {
			out = append(out, line[:min(len(line), 400)])
		}
	}
	return strings.Join(out, "\n")
}

// toolResult is what the client gave the model back for one tool call.
type toolResult struct {
	content string // the tool_result's content, as JSON
	isError bool
}

// resultsOf returns, in call order, the tool_results the client sent for
// the model's calls of the named tool, from the latest main request that
// carries any.
func (s *session) resultsOf(tool string) []toolResult {
	reqs := s.model.snapshot()
	for i := len(reqs) - 1; i >= 0; i-- {
		var body struct {
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if !reqs[i].main || json.Unmarshal(reqs[i].body, &body) != nil {
			continue
		}
		ids := map[string]bool{}
		var found []toolResult
		for _, m := range body.Messages {
			var blocks []struct {
				Type      string          `json:"type"`
				ID        string          `json:"id"`
				Name      string          `json:"name"`
				ToolUseID string          `json:"tool_use_id"`
				Content   json.RawMessage `json:"content"`
				IsError   bool            `json:"is_error"`
			}
			if json.Unmarshal(m.Content, &blocks) != nil {
				continue
			}
			for _, b := range blocks {
				if b.Type == "tool_use" && b.Name == tool {
					ids[b.ID] = true
				}
				if b.Type == "tool_result" && ids[b.ToolUseID] {
					found = append(found, toolResult{string(b.Content), b.IsError})
				}
			}
		}
		if len(found) > 0 {
			return found
		}
	}
	return nil
}

// resultOf returns the content of the tool_result the client sent for the
// model's last call of the named tool, as JSON, or "".
func (s *session) resultOf(tool string) string {
	if r := s.resultsOf(tool); len(r) > 0 {
		return r[len(r)-1].content
	}
	return ""
}
