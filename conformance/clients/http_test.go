package clients

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startServeHTTP runs `crosstalk-mcp serve --http 127.0.0.1:0` on s's groups
// directory with the per-agent tokens file and returns the URL it prints;
// the test's end stops it with SIGTERM, as a user would.
func startServeHTTP(t *testing.T, s *session, tokensFile string) string {
	cmd := exec.Command(crosstalkBin, "serve", "--http", "127.0.0.1:0", "--tokens-file", tokensFile)
	cmd.Env, cmd.Stderr = s.env, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	url := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		if lines.Scan() {
			url <- strings.TrimSpace(lines.Text())
		}
		close(url)
	}()
	select {
	case u, ok := <-url:
		if !ok || !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.HasSuffix(u, "/mcp") {
			t.Fatalf("serve --http printed %q; want its http://127.0.0.1:PORT/mcp", u)
		}
		return u
	case <-time.After(startLimit):
		t.Fatalf("serve --http printed no URL within %v", startLimit)
	}
	return ""
}

// TestHTTPAgentTokenIdentity is scenario i: Claude Code reaches
// `serve --http` as a user configures it (an "http" server in .mcp.json
// with an Authorization header) with bob's per-agent token from
// `crosstalk-mcp tokens add`, which may speak only for bob's context_id.
// The model tries to send as alice and to read alice's unread mail: both
// must come back to it as the server's authorization refusal, naming the
// token, and change nothing (the forged message is in no one's history,
// alice's mail stays unread and its text never reaches the model). Then it
// sends as bob, which must arrive in alice's unread mail over stdio.
func TestHTTPAgentTokenIdentity(t *testing.T) {
	t.Parallel()
	forged, secret := "FORGED-"+newUUID(t)[:8], "SECRET-"+newUUID(t)[:8]
	var s *session
	var private string // alice and carol's group, which bob is not in
	s = newSession(t, func(n int, r modelRequest) modelReply {
		as := func(id, name string, extra ...string) map[string]any {
			args := map[string]any{"group_id": s.group.id, "context_id": id, "name": name, "caller_name": "bob"}
			for i := 0; i+1 < len(extra); i += 2 {
				args[extra[i]] = extra[i+1]
			}
			return args
		}
		switch n {
		case 0:
			return modelReply{toolName: "mcp__crosstalk__send_message", toolInput: as("alice", "alice", "message", "@bob "+forged)}
		case 1:
			args := as("alice", "alice")
			args["group_id"] = private
			return modelReply{toolName: "mcp__crosstalk__get_unread_messages", toolInput: args}
		case 2:
			return modelReply{toolName: "mcp__crosstalk__send_message", toolInput: as(s.group.bob, "bob", "message", "@alice "+s.marker)}
		}
		return modelReply{text: "Done."}
	})
	// Alice has mail from carol, in a group bob is not in, that bob's
	// token must not read as alice.
	alice := s.group.alice
	var created struct {
		GroupID string `json:"group_id"`
	}
	alice.tool("create_group", map[string]any{"context_id": "alice", "name": "private"}, &created)
	private = created.GroupID
	for _, who := range []string{"alice", "carol"} {
		alice.tool("join_group", map[string]any{"group_id": private, "context_id": who, "name": who}, nil)
	}
	alice.tool("send_message", map[string]any{"group_id": private, "context_id": "carol", "name": "carol", "message": "@alice " + secret}, nil)

	tokensFile := filepath.Join(filepath.Dir(s.groups), "tokens")
	add := exec.Command(crosstalkBin, "tokens", "add", "bob", "--context-id", s.id, "--tokens-file", tokensFile)
	add.Env = s.env
	out, err := add.Output()
	token := strings.TrimSpace(string(out))
	if err != nil || len(token) != 43 {
		t.Fatalf("tokens add: %v; printed %q", err, out)
	}
	url := startServeHTTP(t, s, tokensFile)
	s.writeJSON(filepath.Join(s.project, ".mcp.json"), map[string]any{"mcpServers": map[string]any{
		"crosstalk": map[string]any{"type": "http", "url": url, "headers": map[string]any{"Authorization": "Bearer " + token}}}})

	// `claude -p`, where no waiter runs. A stream-json session here exits
	// only 30 s after its input closes: Claude Code waits for its
	// asyncRewake waiter, which only the stdio server's exit ends
	// (endClientWaiters), and over HTTP there is none.
	if runBounded(t, s, "i HTTP per-agent token", s.claudeArgs("-p", "Send alice a message."), 60*time.Second) {
		t.Fatalf("claude -p did not finish within 60 s (%d model requests); hooks:\n%s", len(s.model.snapshot()), s.hookLines())
	}

	refusal := "Token bob may not act as context_id alice"
	sends := s.resultsOf("mcp__crosstalk__send_message")
	reads := s.resultsOf("mcp__crosstalk__get_unread_messages")
	if len(sends) != 2 || len(reads) != 1 {
		t.Fatalf("the model got %d send_message and %d get_unread_messages results; want 2 and 1 (is the HTTP server connected?)", len(sends), len(reads))
	}
	for _, r := range []toolResult{sends[0], reads[0]} {
		if !r.isError || !strings.Contains(r.content, refusal) {
			t.Errorf("acting as alice with bob's token: the model got is_error %v, %.400s; want the refusal %q", r.isError, r.content, refusal)
		}
	}
	if sends[1].isError || !strings.Contains(sends[1].content, "message_id") {
		t.Errorf("sending as bob with bob's token: the model got is_error %v, %.400s; want the message sent", sends[1].isError, sends[1].content)
	}
	if c := s.model.contexts(secret); len(c) > 0 {
		t.Errorf("alice's mail reached bob's model through a refused read: %s", c[0])
	}

	var unread, privateUnread, all struct {
		Messages []struct {
			Text      string `json:"message"`
			ContextID string `json:"context_id"`
		} `json:"messages"`
	}
	alice.tool("get_unread_messages", map[string]any{"group_id": s.group.id, "context_id": "alice", "name": "alice"}, &unread)
	var got []string
	for _, m := range unread.Messages {
		got = append(got, m.ContextID+": "+m.Text)
	}
	joined := strings.Join(got, "\n")
	if !strings.Contains(joined, s.id+": @alice "+s.marker) {
		t.Errorf("alice's unread mail does not hold bob's permitted send; it holds:\n%s", joined)
	}
	alice.tool("get_unread_messages", map[string]any{"group_id": private, "context_id": "alice", "name": "alice"}, &privateUnread)
	if len(privateUnread.Messages) != 1 || privateUnread.Messages[0].Text != "@alice "+secret {
		t.Errorf("alice's mail from carol is not unread as it was after bob's refused read; unread: %+v", privateUnread.Messages)
	}
	alice.tool("get_all_messages", map[string]any{"group_id": s.group.id, "context_id": "alice", "name": "alice"}, &all)
	for _, m := range all.Messages {
		if strings.Contains(m.Text, forged) {
			t.Errorf("the refused send as alice is in the group's history: %s: %s", m.ContextID, m.Text)
		}
	}
	t.Logf("RESULT i HTTP per-agent token: %d model requests; refusals %v/%v; permitted send arrived %v",
		len(s.model.snapshot()), sends[0].isError, reads[0].isError, strings.Contains(joined, s.marker))
}
