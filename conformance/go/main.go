// Command conformance drives the crosstalk-mcp binary with the official MCP
// Go SDK client at its defaults, the way a Go host would: the client must
// settle on protocol 2026-07-28 through server/discover (not fall back to
// initialize), two agents in two server processes on one groups directory
// exchange a message, and the recipient receives its wakeup through
// subscriptions/listen.
//
// With CROSSTALK_TRANSPORT=http the recipient (beta) connects over Streamable
// HTTP to `crosstalk-mcp serve --http` on the same groups directory, while
// alpha stays on stdio: the exchange and the wakeup then cross transports.
//
// Usage: go run . -bin /path/to/crosstalk-mcp (or CROSSTALK_BIN). Output: one
// "ok"/"not ok" line per check, then "N passed, M failed" alone on the last
// line; the exit status is 0 only when nothing failed.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// timeout bounds every request and the wait for a wakeup: generous, because
// CI machines are slow and the server polls SQLite for changes.
const timeout = 20 * time.Second

var passed, failed int

func check(ok bool, what string, detail ...any) bool {
	if ok {
		passed++
		fmt.Println("ok - " + what)
	} else {
		failed++
		fmt.Println("not ok - "+what+":", fmt.Sprint(detail...))
	}
	return ok
}

// agent is one MCP client with its own server process.
type agent struct {
	label   string
	session *mcp.ClientSession
	updates chan *mcp.ResourceUpdatedNotificationParams
}

func connect(ctx context.Context, bin, dir, label string) (*agent, error) {
	a := &agent{label: label, updates: make(chan *mcp.ResourceUpdatedNotificationParams, 16)}
	client := mcp.NewClient(&mcp.Implementation{Name: "crosstalk-go-conformance-" + label, Version: "1.0.0"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			a.updates <- req.Params
		},
	})
	var transport mcp.Transport
	if label == "beta" && os.Getenv("CROSSTALK_TRANSPORT") == "http" {
		url, err := serveHTTP(bin, dir)
		if err != nil {
			return nil, err
		}
		transport = &mcp.StreamableClientTransport{Endpoint: url}
	} else {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "CROSSTALK_GROUPS_DIR="+dir, "CROSSTALK_POLL_INTERVAL_SECONDS=0.1")
		cmd.Stderr = os.Stderr
		transport = &mcp.CommandTransport{Command: cmd}
	}
	s, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", label, err)
	}
	a.session = s
	return a, nil
}

// httpServer is the `serve --http` process of an HTTP run, killed by main.
var httpServer *exec.Cmd

// serveHTTP starts `crosstalk-mcp serve --http` on a free loopback port over
// dir and returns the endpoint URL it prints first.
func serveHTTP(bin, dir string) (string, error) {
	cmd := exec.Command(bin, "serve", "--http", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "CROSSTALK_GROUPS_DIR="+dir, "CROSSTALK_POLL_INTERVAL_SECONDS=0.1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start serve --http: %w", err)
	}
	httpServer = cmd
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("serve --http printed no URL: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// call runs a tool and returns its structured content decoded as an object,
// checking it equals the JSON of the text block.
func (a *agent) call(ctx context.Context, name string, args map[string]any) (map[string]any, *mcp.CallToolResult, error) {
	args["caller_name"] = "go-conformance-" + a.label
	res, err := a.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return nil, nil, err
	}
	var structured map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &structured)
	var text map[string]any
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			_ = json.Unmarshal([]byte(tc.Text), &text)
			break
		}
	}
	tj, _ := json.Marshal(text)
	sj, _ := json.Marshal(structured)
	check(structured != nil && string(tj) == string(sj), a.label+" "+name+": structuredContent equals the text block", "structured ", string(sj), " text ", string(tj))
	return structured, res, nil
}

func main() {
	bin := flag.String("bin", os.Getenv("CROSSTALK_BIN"), "server binary")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "conformance: set -bin or CROSSTALK_BIN")
		os.Exit(2)
	}
	err := run(*bin)
	if httpServer != nil {
		httpServer.Process.Kill()
		httpServer.Wait()
	}
	if err != nil {
		check(false, "run completes", err)
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func run(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "crosstalk-go-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	alpha, err := connect(ctx, bin, dir, "alpha")
	if err != nil {
		return err
	}
	defer alpha.session.Close()
	beta, err := connect(ctx, bin, dir, "beta")
	if err != nil {
		return err
	}
	defer beta.session.Close()

	for _, a := range []*agent{alpha, beta} {
		init := a.session.InitializeResult()
		check(init != nil && init.ProtocolVersion == "2026-07-28", a.label+" settles on 2026-07-28 through server/discover", init)
		check(init != nil && init.ServerInfo != nil && init.ServerInfo.Name == "crosstalk", a.label+" reads serverInfo from the discover result _meta", init)
		check(init != nil && init.Capabilities != nil && init.Capabilities.Tools != nil && init.Capabilities.Resources != nil, a.label+" sees tools and resources capabilities", init)
	}

	tools, err := alpha.session.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	check(len(tools.Tools) == 15, "tools/list lists 15 tools", len(tools.Tools))
	for _, t := range tools.Tools {
		check(t.Title != "" && t.OutputSchema != nil && t.Annotations != nil && t.Annotations.OpenWorldHint != nil && !*t.Annotations.OpenWorldHint,
			"tool "+t.Name+" has a title, an outputSchema and annotations with openWorldHint false", "title ", t.Title, " annotations ", t.Annotations, " outputSchema ", t.OutputSchema != nil)
	}

	created, _, err := alpha.call(ctx, "create_group", map[string]any{"context_id": "alpha-ctx", "name": "go conformance"})
	if err != nil {
		return fmt.Errorf("create_group: %w", err)
	}
	group, _ := created["group_id"].(string)
	if !check(strings.HasPrefix(group, "grp_"), "create_group returns a group id", created) {
		return fmt.Errorf("no group")
	}
	if _, _, err := alpha.call(ctx, "join_group", map[string]any{"group_id": group, "context_id": "alpha-ctx", "name": "alpha"}); err != nil {
		return fmt.Errorf("alpha join_group: %w", err)
	}
	joined, res, err := beta.call(ctx, "join_group", map[string]any{"group_id": group, "context_id": "beta-ctx", "name": "beta"})
	if err != nil {
		return fmt.Errorf("beta join_group: %w", err)
	}
	uri, _ := joined["wakeup_resource_uri"].(string)
	var link *mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			link = l
		}
	}
	check(link != nil && link.URI == uri, "join_group carries the wakeup URI as a resource_link", res.Content)

	// Subscribe under 2026-07-28 opens a subscriptions/listen stream.
	if err := beta.session.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		return fmt.Errorf("beta subscribe %s: %w", uri, err)
	}
	// The SDK does not wait for the acknowledgement; give the listen a
	// moment to be registered before the message that should wake beta.
	time.Sleep(500 * time.Millisecond)
	sent, _, err := alpha.call(ctx, "send_message", map[string]any{"group_id": group, "context_id": "alpha-ctx", "name": "alpha", "message": "hello @beta"})
	if err != nil {
		return fmt.Errorf("send_message: %w", err)
	}
	targets, _ := sent["wakeup_targets"].([]any)
	check(len(targets) == 1 && targets[0] == "beta-ctx", "send_message targets beta", sent)

	select {
	case u := <-beta.updates:
		check(u.URI == uri, "beta receives its wakeup through subscriptions/listen", u)
	case <-time.After(timeout):
		check(false, "beta receives its wakeup through subscriptions/listen", "nothing within ", timeout)
	}

	unread, _, err := beta.call(ctx, "get_unread_messages", map[string]any{"group_id": group, "context_id": "beta-ctx", "name": "beta"})
	if err != nil {
		return fmt.Errorf("get_unread_messages: %w", err)
	}
	msgs, _ := unread["messages"].([]any)
	check(len(msgs) == 1, "beta reads the one message", unread)

	failure, fres, err := beta.call(ctx, "get_group_metadata", map[string]any{"group_id": "grp_00000000000000000000000000000000"})
	if err != nil {
		return fmt.Errorf("get_group_metadata on a missing group: %w", err)
	}
	_, hasError := failure["error"].(string)
	check(fres.IsError && hasError, "a failing tool is an isError result whose structuredContent carries the error", failure)

	if err := beta.session.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		check(false, "unsubscribe cancels the listen", err)
	}
	return nil
}
