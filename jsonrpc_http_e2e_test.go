package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// startHTTPProcess runs `crosstalk-mcp serve --http 127.0.0.1:0` on dir and
// returns the process, its endpoint URL, read from its first stdout line,
// and its stderr so far. Later args override the --http address.
func startHTTPProcess(tb testing.TB, dir string, args ...string) (*exec.Cmd, string, *syncBuffer) {
	tb.Helper()
	cmd := exec.Command(builtBinary(tb), append([]string{"serve", "--http", "127.0.0.1:0"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CROSSTALK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CROSSTALK_GROUPS_DIR="+dir, "CROSSTALK_POLL_INTERVAL_SECONDS=0.05")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start serve --http: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	tb.Cleanup(stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("serve --http printed no URL: %v; stderr: %s", err, stderr.String())
	}
	return cmd, strings.TrimSpace(line), stderr
}

// TestHTTPAndStdioShareGroups runs one agent over HTTP and one over stdio on
// the same groups directory: each sees the other's messages, and the HTTP
// agent is woken by the stdio agent's mention.
func TestHTTPAndStdioShareGroups(t *testing.T) {
	dir := t.TempDir()
	_, url, _ := startHTTPProcess(t, dir)
	h := &httpTestClient{tb: t, url: url}
	h.initialize()
	p := startSession(t, "stdio", dir, "CROSSTALK_POLL_INTERVAL_SECONDS=0.05")

	groupID := p.createGroup("ctx-stdio")
	p.join(groupID, "ctx-stdio", "sam")
	var j struct {
		URI string `json:"wakeup_resource_uri"`
	}
	h.ok("join_group", map[string]any{"group_id": groupID, "context_id": "ctx-http", "name": "hana"}, &j)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := h.openStream(ctx)
	if msg := h.call("resources/subscribe", map[string]any{"uri": j.URI}); msg.Error != nil {
		t.Fatalf("subscribe over HTTP: %+v", msg.Error)
	}
	p.ok("send_message", map[string]any{"group_id": groupID, "context_id": "ctx-stdio", "name": "sam", "message": "@hana over to you"}, nil)
	waitForUpdate(t, stream, j.URI)
	var unread struct {
		Messages []struct {
			Message string `json:"message"`
		} `json:"messages"`
	}
	h.ok("get_unread_messages", map[string]any{"group_id": groupID, "context_id": "ctx-http", "name": "hana"}, &unread)
	if len(unread.Messages) != 1 || unread.Messages[0].Message != "@hana over to you" {
		t.Fatalf("HTTP agent's unread: got %+v; want the stdio agent's message", unread.Messages)
	}
	h.ok("send_message", map[string]any{"group_id": groupID, "context_id": "ctx-http", "name": "hana", "message": "@sam got it"}, nil)
	p.ok("get_unread_messages", map[string]any{"group_id": groupID, "context_id": "ctx-stdio", "name": "sam"}, &unread)
	if len(unread.Messages) != 1 || unread.Messages[0].Message != "@sam got it" {
		t.Fatalf("stdio agent's unread: got %+v; want the HTTP agent's reply", unread.Messages)
	}
}

// waitForUpdate waits for notifications/resources/updated on uri.
func waitForUpdate(t *testing.T, stream <-chan *rpcMessage, uri string) {
	t.Helper()
	timeout := time.After(e2eTimeout)
	for {
		select {
		case msg, open := <-stream:
			if !open {
				t.Fatalf("stream ended before an update of %s", uri)
			}
			var n notification
			json.Unmarshal(msg.Params, &n)
			if msg.Method == "notifications/resources/updated" && n.URI == uri {
				return
			}
		case <-timeout:
			t.Fatalf("got no update of %s within %v", uri, e2eTimeout)
		}
	}
}

// TestHTTPKillLosesNothingAcknowledged sends from concurrent HTTP clients,
// kills the server with SIGKILL mid-stream, and checks that every send the
// server answered is in the group after a restart.
func TestHTTPKillLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	cmd, url, _ := startHTTPProcess(t, dir)
	setup := &httpTestClient{tb: t, url: url}
	setup.initialize()
	g := setup.createGroup(map[string]any{"context_id": "ctx-0", "name": "kill"})
	setup.ok("join_group", map[string]any{"group_id": g, "context_id": "ctx-0", "name": "w0"}, nil)

	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &httpTestClient{tb: t, url: url}
			if !c.tryInitialize() {
				return
			}
			for i := 0; ; i++ {
				text := fmt.Sprintf("w%d-%d", w, i)
				if !c.trySend(g, fmt.Sprintf("ctx-w%d", w), text) {
					return // the server is gone
				}
				mu.Lock()
				acked[text] = true
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Kill() // SIGKILL: no shutdown code runs
	wg.Wait()
	cmd.Wait()
	if len(acked) == 0 {
		t.Fatal("no send was acknowledged before the kill; the test proves nothing")
	}

	_, url, _ = startHTTPProcess(t, dir)
	after := &httpTestClient{tb: t, url: url}
	after.initialize()
	var all struct {
		Messages []struct {
			Message string `json:"message"`
		} `json:"messages"`
	}
	after.ok("get_all_messages", map[string]any{"group_id": g, "context_id": "ctx-0", "name": "w0"}, &all)
	stored := map[string]bool{}
	for _, m := range all.Messages {
		stored[m.Message] = true
	}
	for text := range acked {
		if !stored[text] {
			t.Errorf("acknowledged send %q is missing after the kill", text)
		}
	}
	t.Logf("%d sends acknowledged before SIGKILL, %d stored", len(acked), len(stored))
}
