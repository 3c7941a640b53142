package clients

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// crosstalkClient drives the built crosstalk-mcp binary over stdio as a
// plain MCP client: the harness's other agent (alice), and the set-up.
type crosstalkClient struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	nextID int
}

// startCrosstalk runs `crosstalk-mcp` with env and initializes it.
func startCrosstalk(t *testing.T, bin string, env []string) *crosstalkClient {
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stderr = os.Stderr
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
	c := &crosstalkClient{t: t, cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
	c.lines.Buffer(make([]byte, 1<<20), 64<<20)
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "conformance-clients", "version": "1"}})
	c.notify("notifications/initialized")
	return c
}

func (c *crosstalkClient) notify(method string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Fatal(err)
	}
}

// call sends one request and returns its result, skipping notifications.
func (c *crosstalkClient) call(method string, params map[string]any) json.RawMessage {
	c.nextID++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.nextID, "method": method, "params": params})
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Fatal(err)
	}
	for c.lines.Scan() {
		var msg struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(c.lines.Bytes(), &msg); err != nil {
			c.t.Fatalf("crosstalk-mcp wrote %q: %v", c.lines.Text(), err)
		}
		if msg.ID == nil || *msg.ID != c.nextID {
			continue
		}
		if msg.Error != nil {
			c.t.Fatalf("%s: %s", method, msg.Error)
		}
		return msg.Result
	}
	c.t.Fatalf("%s: crosstalk-mcp closed stdout: %v", method, c.lines.Err())
	return nil
}

// tool calls one tool and decodes its structured result into out.
func (c *crosstalkClient) tool(name string, args map[string]any, out any) {
	args["caller_name"] = "conformance-clients"
	raw := c.call("tools/call", map[string]any{"name": name, "arguments": args})
	var res struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.IsError {
		c.t.Fatalf("%s: %s (%v)", name, raw, err)
	}
	if out != nil {
		if err := json.Unmarshal(res.StructuredContent, out); err != nil {
			c.t.Fatalf("%s: %s: %v", name, raw, err)
		}
	}
}

// group is a group with alice and bob joined, and the client alice sends
// with.
type group struct {
	id    string
	bob   string
	alice *crosstalkClient
}

// newGroup creates a group, joins alice and bob (bob's context_id is the
// Claude Code session id, which is what the hooks act for; "" leaves bob
// to join by himself) and returns it.
func newGroup(t *testing.T, bin string, env []string, bob string) *group {
	alice := startCrosstalk(t, bin, env)
	var created struct {
		GroupID string `json:"group_id"`
	}
	alice.tool("create_group", map[string]any{"context_id": "alice", "name": "clients"}, &created)
	alice.tool("join_group", map[string]any{"group_id": created.GroupID, "context_id": "alice", "name": "alice"}, nil)
	if bob != "" {
		alice.tool("join_group", map[string]any{"group_id": created.GroupID, "context_id": bob, "name": "bob"}, nil)
	}
	return &group{id: created.GroupID, bob: bob, alice: alice}
}

// send has alice write "@bob text" and returns when the send is answered.
func (g *group) send(text string) time.Time {
	var sent struct {
		MessageID     int      `json:"message_id"`
		WakeupTargets []string `json:"wakeup_targets"`
	}
	g.alice.tool("send_message", map[string]any{"group_id": g.id, "context_id": "alice", "name": "alice", "message": "@bob " + text}, &sent)
	at := time.Now()
	if len(sent.WakeupTargets) != 1 || sent.WakeupTargets[0] != g.bob {
		g.alice.t.Fatalf("send_message woke %v; want [%s]", sent.WakeupTargets, g.bob)
	}
	return at
}

// waitArgs are the arguments of the model's wait_for_messages call.
func (g *group) waitArgs(seconds int) map[string]any {
	return map[string]any{"group_id": g.id, "context_id": g.bob, "name": "bob", "caller_name": "bob", "timeout_seconds": seconds}
}
