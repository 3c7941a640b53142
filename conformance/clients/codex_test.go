package clients

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// codexBin is the Codex CLI's native binary from the pinned npm package.
func codexBin(t *testing.T) string {
	if bin := os.Getenv("CODEX_BIN"); bin != "" {
		return bin
	}
	triple := map[string]string{"amd64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}[goarch()]
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[goarch()]
	bin, err := filepath.Abs(filepath.Join("node_modules", "@openai", "codex-linux-"+arch, "vendor", triple, "bin", "codex"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v (run npm ci in conformance/clients)", err)
	}
	return bin
}

// newCodexSession is newSession for Codex: a throwaway CODEX_HOME whose
// config.toml points a custom model_provider at the fake model, the MCP
// server, the project trusted; the hooks from `hooks install --client
// codex --scope project`.
func newCodexSession(t *testing.T, script modelScript) *session {
	root := t.TempDir()
	s := &session{t: t, home: filepath.Join(root, "home"), project: filepath.Join(root, "project"),
		groups: filepath.Join(root, "groups"), marker: "MARKER-" + newUUID(t)[:8]}
	codexHome := filepath.Join(s.home, ".codex")
	for _, d := range []string{s.project, s.groups, codexHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.model = newFakeModel(t, script)
	if dir := os.Getenv("CLIENTS_LOG_DIR"); dir != "" {
		s.model.dump = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	}
	s.env = []string{"HOME=" + s.home, "CODEX_HOME=" + codexHome, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
		"TMPDIR=" + root, "USER=clients", "SHELL=/bin/sh", "CROSSTALK_GROUPS_DIR=" + s.groups,
		"FAKE_MODEL_KEY=" + dummyKey, "RUST_LOG=warn"}
	install := exec.Command(crosstalkBin, "hooks", "install", "--client", "codex", "--scope", "project")
	install.Dir, install.Env = s.project, s.env
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("hooks install: %v\n%s", err, out)
	}
	config := fmt.Sprintf(`model = "gpt-fake"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.fake]
name = "fake"
base_url = "%s/v1"
wire_api = "responses"
env_key = "FAKE_MODEL_KEY"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.crosstalk]
command = %q
env = { CROSSTALK_GROUPS_DIR = %q }

[projects.%q]
trust_level = "trusted"

[features]
hooks = true
plugins = false
apps = false

[otel]
metrics_exporter = "none"
`, s.model.url, crosstalkBin, s.groups, s.project)
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

func goarch() string { return runtime.GOARCH }

// contextIDSaid finds the context_id the SessionStart hook told the model,
// as a model reads it.
var contextIDSaid = regexp.MustCompile(`your context_id is ([A-Za-z0-9_-]+)`)

// codexContextID returns the context_id the SessionStart hook told the
// model in r, its first request. Without one the test fails but goes on as
// "codex-bob", so that the tool path is still measured.
func codexContextID(t *testing.T, r modelRequest) string {
	if m := contextIDSaid.FindStringSubmatch(string(r.body)); m != nil {
		return m[1]
	}
	t.Errorf("the model's first request does not carry the SessionStart hook's context_id")
	return "codex-bob"
}

// awaitCodexExit reports whether codex exec, whose end closes done, exits
// within exitLimit, failing the test if it does not.
func awaitCodexExit(t *testing.T, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-time.After(exitLimit):
		t.Errorf("codex exec did not exit within %v of its last turn", exitLimit)
		return false
	}
}

// toolNamed returns the name under which a Responses request offers the
// tool, since clients name MCP tools differently: a namespaced tool
// (Codex's MCP servers) comes back as "namespace/name".
func toolNamed(r modelRequest, name string) string {
	var body struct {
		Tools []struct {
			Name  string `json:"name"`
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"tools"`
	}
	json.Unmarshal(r.body, &body)
	for _, t := range body.Tools {
		if strings.HasSuffix(t.Name, name) {
			return t.Name
		}
		for _, inner := range t.Tools {
			if inner.Name == name && strings.Contains(t.Name, "crosstalk") {
				return t.Name + "/" + inner.Name
			}
		}
	}
	return name
}

// codexResultOf returns the output Codex gave the model for its last call
// of the named tool (a Responses function_call, the MCP server's name in
// its namespace), from the latest request that carries one, or "".
func (s *session) codexResultOf(tool string) string {
	reqs := s.model.snapshot()
	for i := len(reqs) - 1; i >= 0; i-- {
		var body struct {
			Input []struct {
				Type   string `json:"type"`
				Name   string `json:"name"`
				CallID string `json:"call_id"`
				Output any    `json:"output"`
			} `json:"input"`
		}
		if !reqs[i].main || json.Unmarshal(reqs[i].body, &body) != nil {
			continue
		}
		calls := map[string]bool{}
		var found string
		for _, it := range body.Input {
			switch {
			case it.Type == "function_call" && it.Name == tool:
				calls[it.CallID] = true
			case it.Type == "function_call_output" && calls[it.CallID]:
				b, _ := json.Marshal(it.Output)
				found = string(b)
			}
		}
		if found != "" {
			return found
		}
	}
	return ""
}

// awaitCodexMail waits for a model request carrying s's marker and for
// codex exec to exit, and returns the outcome so far and when the mail was
// sent.
func awaitCodexMail(t *testing.T, s *session, done <-chan struct{}, sentAt <-chan time.Time) (outcome, time.Time) {
	o := outcome{result: "passed"}
	if _, ok := s.model.waitFor(startLimit, s.hasMarker); !ok {
		o.result = "failed"
		t.Errorf("no model request carried the mail within %v", startLimit)
	}
	if !awaitCodexExit(t, done) {
		o.result = "hung"
	}
	return o, sentBy(sentAt)
}

// startCodexExec runs `codex exec prompt` in s's project and returns a
// channel closed when it exits; the test's end kills it and logs its

// output.
func startCodexExec(t *testing.T, s *session, prompt string) <-chan struct{} {
	cmd := exec.Command(codexBin(t), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--dangerously-bypass-hook-trust", prompt)
	cmd.Dir, cmd.Env = s.project, s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		kill(cmd)
		<-done
		t.Logf("codex output:\n%s", tail(out.String()))
	})
	return done
}

// TestCodexModelWaitsForMessages is scenario c for Codex: the model,
// having read its context_id from the SessionStart hook, joins the group
// and calls wait_for_messages; mail arrives 3 s later.
func TestCodexModelWaitsForMessages(t *testing.T) {
	t.Parallel()
	var s *session
	bob := make(chan string, 1)
	s = newCodexSession(t, func(n int, r modelRequest) modelReply {
		switch n {
		case 0:
			id := codexContextID(t, r)
			bob <- id
			return modelReply{toolName: toolNamed(r, "join_group"), toolInput: map[string]any{"group_id": s.group.id, "context_id": id, "name": "bob", "caller_name": "bob"}}
		case 1:
			return modelReply{toolName: toolNamed(r, "wait_for_messages"), toolInput: s.group.waitArgs(30)}
		}
		return modelReply{text: "Done."}
	})
	s.group = newGroup(t, crosstalkBin, s.env, "")
	done := startCodexExec(t, s, "Wait for a Crosstalk message.")
	var id string
	select {
	case id = <-bob:
	case <-time.After(startLimit):
		t.Fatalf("no model request within %v", startLimit)
	}
	s.group.bob = id
	if !s.model.waitMains(2, startLimit) {
		t.Fatalf("join_group's result never reached the model")
	}
	time.Sleep(3 * time.Second)
	sent := s.group.send(s.marker)
	o := outcome{result: "passed"}
	if _, ok := s.model.waitFor(wakeLimit, s.hasMarker); !ok {
		o.result = "failed"
		t.Errorf("no model request carried the mail within %v of the send", wakeLimit)
	}
	s.settle()
	if !awaitCodexExit(t, done) {
		o.result = "hung"
	}
	// Codex's hooks show mail too (PostToolUse right after this call): the
	// mail must have come as the tool's result.
	if got := s.codexResultOf("wait_for_messages"); !strings.Contains(got, s.marker) {
		t.Errorf("wait_for_messages's output did not carry the mail: %.400s", got)
	}
	s.report("c Codex model calls wait_for_messages", sent, o)
}

// TestCodexMailAfterTool is scenario d for Codex: mail arrives while the
// model works on its turn; Codex's PostToolUse hook must show it with the
// next tool's result, once, and the turn then end without a Stop
// continuation.
func TestCodexMailAfterTool(t *testing.T) {
	t.Parallel()
	var s *session
	sentAt := make(chan time.Time, 1)
	var bob string
	s = newCodexSession(t, func(n int, r modelRequest) modelReply {
		switch n {
		case 0:
			bob = codexContextID(t, r)
			return modelReply{toolName: toolNamed(r, "join_group"), toolInput: map[string]any{"group_id": s.group.id, "context_id": bob, "name": "bob", "caller_name": "bob"}}
		case 1:
			s.group.bob = bob
			sentAt <- s.group.send(s.marker)
			return modelReply{toolName: toolNamed(r, "get_group_metadata"), toolInput: map[string]any{"group_id": s.group.id, "caller_name": "bob"}}
		}
		return modelReply{text: "Done."}
	})
	s.group = newGroup(t, crosstalkBin, s.env, "")
	done := startCodexExec(t, s, "Look at the Crosstalk group.")
	o, sent := awaitCodexMail(t, s, done, sentAt)
	// The hook, not a tool: the metadata call's output does not carry it,
	// and it stands in the request right after that call.
	if got := s.codexResultOf("get_group_metadata"); strings.Contains(got, s.marker) {
		t.Errorf("the mail came as get_group_metadata's output, not from the hook: %.400s", got)
	}
	if d := s.model.delivered(s.marker); len(d.perMain) < 3 || d.perMain[2] != 1 {
		t.Errorf("marker per main request %v; want it first in the third, the one after the tool call", d.perMain)
	}
	s.report("d Codex mail during a turn, PostToolUse", sent, o)
}

// TestCodexStopWithMailPending is scenario d2 for Codex: mail arrives
// while the model writes its last answer, with no tool call after it; the
// Stop hook must keep the turn going once with its notice, the model's
// get_unread_messages must carry the mail, exactly once, and the next Stop
// must let codex exec end (Codex has no waiter, so only Stop can deliver).
func TestCodexStopWithMailPending(t *testing.T) {
	t.Parallel()
	var s *session
	sentAt := make(chan time.Time, 1)
	var bob string
	s = newCodexSession(t, func(n int, r modelRequest) modelReply {
		var body struct {
			Input []json.RawMessage `json:"input"`
		}
		json.Unmarshal(r.body, &body)
		if k := len(body.Input); k > 0 && strings.Contains(string(body.Input[k-1]), stopNoticeText) {
			return modelReply{toolName: toolNamed(r, "get_unread_messages"), toolInput: map[string]any{"group_id": s.group.id, "context_id": bob, "name": "bob", "caller_name": "bob"}}
		}
		switch n {
		case 0:
			bob = codexContextID(t, r)
			return modelReply{toolName: toolNamed(r, "join_group"), toolInput: map[string]any{"group_id": s.group.id, "context_id": bob, "name": "bob", "caller_name": "bob"}}
		case 1:
			s.group.bob = bob
			sentAt <- s.group.send(s.marker)
		}
		return modelReply{text: "Done."}
	})
	s.group = newGroup(t, crosstalkBin, s.env, "")
	done := startCodexExec(t, s, "Join the Crosstalk group.")
	o, sent := awaitCodexMail(t, s, done, sentAt)
	if got := s.codexResultOf("get_unread_messages"); !strings.Contains(got, s.marker) {
		t.Errorf("no get_unread_messages the Stop notice asked for carried the mail: %.400s", got)
	}
	if d := s.model.delivered(s.marker); len(d.perMain) != 4 {
		t.Errorf("marker per main request %v; want 4 requests: join, the answer, the read the Stop notice asks for, its answer", d.perMain)
	}
	s.report("d2 Codex Stop with mail pending", sent, o)
}
