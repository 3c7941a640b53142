package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// observeDemo is the sample deployment behind "crosstalk-mcp observe --demo":
// a temporary groups directory written by a real MCP stdio session of this
// binary, so every row shown went through the paths a real client uses. The
// agents share the session, since every tool call names its caller.
type observeDemo struct {
	dir      string
	keep     bool
	agents   []demoAgent
	groupIDs []string // release train first, then the incident room

	// The session, one request at a time from one goroutine (the seeding,
	// then the trickle). Its command runs under stop's context, whose end
	// closes the child's stdin; exec kills a child still running 5 s later.
	cmd    *exec.Cmd
	enc    *json.Encoder // one JSON-RPC message a line, to stdin
	dec    *json.Decoder // the server's replies and notifications
	nextID int64

	stop    context.CancelFunc
	trickle sync.WaitGroup // the goroutine sending new messages
}

// demoAgent is one of the demo's callers.
type demoAgent struct {
	name, contextID string
}

// demoTimeout bounds one tool call, generously as the child shares the
// machine with a browser: a slower call means it is stuck.
const demoTimeout = 30 * time.Second

// demoTrickleInterval is how often the demo sends a new message, so the live
// view visibly moves without flooding the chat.
const demoTrickleInterval = 4 * time.Second

// demoAgentNames are the demo's agents; the first creates the groups.
var demoAgentNames = []string{"Architect", "Reviewer", "Tester", "On-call"}

// startObserveDemo creates the demo directory, starts an audited MCP session
// of binary on it, seeds it, and trickles messages every interval until close
// or the end of ctx.
func startObserveDemo(ctx context.Context, binary string, keep bool, interval time.Duration) (*observeDemo, error) {
	dir, err := os.MkdirTemp("", "crosstalk-demo-")
	if err != nil {
		return nil, fmt.Errorf("create demo directory: %w", err)
	}
	ctx, stop := context.WithCancel(ctx)
	d := &observeDemo{dir: dir, keep: keep, cmd: exec.CommandContext(ctx, binary), stop: stop}
	d.agents = mapSlice(demoAgentNames, func(name string) demoAgent { return demoAgent{name, newContextID()} })
	if err := d.startSession(); err != nil {
		d.close()
		return nil, err
	}
	if err := d.seed(); err != nil {
		d.close()
		return nil, fmt.Errorf("seed demo: %w", err)
	}
	d.trickle.Go(func() { d.sendTrickle(ctx, interval) })
	return d, nil
}

// observeGroupsDir returns the directory "observe" shows and what to do on
// exit: with --demo a fresh demo directory (removed then unless --keep),
// otherwise the configured groups directory.
func (c observeCommand) observeGroupsDir(ctx context.Context, opts observeOptions) (string, func(), error) {
	if !opts.demo && opts.groupsDir != "" {
		return opts.groupsDir, func() {}, nil
	} else if !opts.demo {
		dir, err := c.groupsDir()
		return dir, func() {}, err
	}
	binary, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("find this binary to run the demo agents: %w", err)
	}
	d, err := startObserveDemo(ctx, binary, opts.keep, demoTrickleInterval)
	if err != nil {
		return "", nil, err
	}
	fate := map[bool]string{false: "removed on exit; --keep keeps it", true: "kept on exit"}[opts.keep]
	fmt.Fprintf(c.stderr, "Demo: %d agents writing to %s (%s)\n", len(d.agents), d.dir, fate)
	return d.dir, func() {
		if err := d.close(); err != nil {
			fmt.Fprintf(c.stderr, "crosstalk-mcp observe: %v\n", err)
		} else if opts.keep {
			fmt.Fprintf(c.stderr, "Demo data kept in %s; view it again with --groups-dir %s\n", d.dir, d.dir)
		}
	}, nil
}

// newContextID returns a random UUID-shaped context id, like real clients'.
func newContextID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// startSession runs d.cmd as an audited MCP stdio server on d.dir and
// completes the initialize handshake.
func (d *observeDemo) startSession() error {
	inherited := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CROSSTALK_") })
	d.cmd.Env = append(inherited, "CROSSTALK_GROUPS_DIR="+d.dir, auditRetentionVar+"=inf")
	stdin, err := d.cmd.StdinPipe()
	stdout, outErr := d.cmd.StdoutPipe()
	if err = cmp.Or(err, outErr); err != nil {
		return fmt.Errorf("demo session: %w", err)
	}
	d.cmd.Cancel, d.cmd.WaitDelay = stdin.Close, 5*time.Second
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("start demo session: %w", err)
	}
	d.enc, d.dec = json.NewEncoder(stdin), json.NewDecoder(stdout)
	_, err = d.request("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "crosstalk-demo", "version": "1"}})
	if err == nil {
		err = d.enc.Encode(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	}
	return err
}

// request sends one request and reads messages until its response,
// skipping interleaved notifications. A child silent for demoTimeout is
// stuck: the timer ends the session's context, stopping the child as on
// close, which ends the read; later calls then fail at once.
func (d *observeDemo) request(method string, params any) (json.RawMessage, error) {
	d.nextID++
	id := d.nextID
	if err := d.enc.Encode(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return nil, fmt.Errorf("demo session: write: %w", err)
	}
	stuck := time.AfterFunc(demoTimeout, d.stop)
	defer stuck.Stop()
	for {
		var m struct {
			ID     *int64          `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct{ Message string }
		}
		err := d.dec.Decode(&m)
		if err != nil && !stuck.Stop() {
			return nil, fmt.Errorf("demo session: %s: no reply within %v", method, demoTimeout)
		}
		if err != nil {
			return nil, fmt.Errorf("demo session: %s: session ended: %w", method, err)
		}
		if m.ID == nil || *m.ID != id {
			continue
		}
		if m.Error != nil {
			return nil, fmt.Errorf("demo session: %s: %s", method, m.Error.Message)
		}
		return m.Result, nil
	}
}

// errDemoTool reports a tool result with isError set; the demo makes some
// on purpose so the dashboard has failures to show.
var errDemoTool = errors.New("tool returned an error")

// in calls one MCP tool as agent a, on group id unless it is empty, and
// returns the text of its result.
func (d *observeDemo) in(a demoAgent, tool, id string, more map[string]any) (string, error) {
	args := map[string]any{"context_id": a.contextID, "name": a.name, "caller_name": a.name}
	if id != "" {
		args["group_id"] = id
	}
	maps.Copy(args, more)
	raw, err := d.request("tools/call", map[string]any{"name": tool, "arguments": args})
	if err != nil {
		return "", err
	}
	var res struct {
		Content []struct{ Text string } `json:"content"`
		IsError bool                    `json:"isError"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return "", fmt.Errorf("demo agent %s: decode %s: %w", a.name, tool, err)
	}
	if res.IsError {
		return "", fmt.Errorf("demo agent %s: %s: %w", a.name, tool, errDemoTool)
	}
	for _, c := range res.Content {
		return c.Text, nil
	}
	return "", nil
}

// createGroup makes a group as agent a and has every member join it.
func (d *observeDemo) createGroup(a demoAgent, name, description string, members ...demoAgent) (string, error) {
	var created struct {
		GroupID string `json:"group_id"`
	}
	text, err := d.in(a, "create_group", "", map[string]any{"name": name, "description": description})
	if err == nil {
		err = json.Unmarshal([]byte(text), &created)
	}
	for _, m := range members {
		if err == nil {
			_, err = d.in(m, "join_group", created.GroupID, nil)
		}
	}
	if err != nil {
		return "", err
	}
	d.groupIDs = append(d.groupIDs, created.GroupID)
	return created.GroupID, nil
}

// seed writes the opening conversation: an exchange with mentions, an
// urgent explicit wakeup, a search, reads, and two failing calls.
func (d *observeDemo) seed() error {
	arch, rev, test, oncall := d.agents[0], d.agents[1], d.agents[2], d.agents[3]
	release, err := d.createGroup(arch, "Release train", "Coordinating the 1.2 release", arch, rev, test)
	if err != nil {
		return err
	}
	incident, err := d.createGroup(oncall, "Incident room", "Production incidents and their follow-ups", oncall, arch)
	if err != nil {
		return err
	}
	for _, step := range []struct {
		by       demoAgent
		tool, id string
		more     map[string]any
	}{
		{arch, "send_message", release, map[string]any{"message": "@Reviewer the migration plan for 1.2 is ready; can you check the rollback section?"}},
		{rev, "get_unread_messages", release, nil},
		{rev, "send_message", release, map[string]any{"message": "Looks good. One question: does the rollback keep the audit history?", "priority": "high"}},
		{test, "send_message", release, map[string]any{"message": "Build 412 fails on arm64; this blocks the release.", "priority": "urgent", "wake_context_ids": []string{arch.contextID}}},
		{rev, "search_messages", release, map[string]any{"query": "%rollback%"}},
		{oncall, "send_message", incident, map[string]any{"message": "@Architect disk usage on the build host is at 91%; can the release wait an hour?"}},
		{arch, "get_unread_messages", incident, nil},
		{arch, "send_message", incident, map[string]any{"message": "Yes, we are blocked on arm64 anyway."}},
		// Two calls that fail on purpose.
		{test, "update_group_metadata", release, map[string]any{"name": "Tester's train"}},
		{rev, "get_all_messages", "grp_" + strings.Repeat("0", 32), nil},
	} {
		_, err := d.in(step.by, step.tool, step.id, step.more)
		if failing := step.tool == "update_group_metadata" || step.tool == "get_all_messages"; failing && !errors.Is(err, errDemoTool) {
			return fmt.Errorf("%s by %s: got %v; want a tool error", step.tool, step.by.name, err)
		} else if !failing && err != nil {
			return err
		}
	}
	return nil
}

// demoLines are the trickle's messages, sent in turn by rotating agents.
var demoLines = []string{
	"Re-ran the arm64 job with the cache cleared; still red.",
	"@Tester can you attach the failing test log?",
	"Log attached. It times out in the SQLite busy test.",
	"I think the busy timeout is too short on that runner.",
	"Raised it to 10 s; rebuilding now.",
	"arm64 is green. @all ready to tag 1.2?",
	"Tag it. I will post the release notes.",
}

// sendTrickle sends one message every interval in the release train, and has
// the next agent read its unread messages, until ctx ends.
func (d *observeDemo) sendTrickle(ctx context.Context, interval time.Duration) {
	members := d.agents[:3]
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		priority := map[bool]string{false: "normal", true: "high"}[i%5 == 4]
		line := fmt.Sprintf("%s (#%d)", demoLines[i%len(demoLines)], i+1)
		// A failed call (the session died, say) only pauses the trickle.
		d.in(members[i%3], "send_message", d.groupIDs[0], map[string]any{"message": line, "priority": priority})
		d.in(members[(i+1)%3], "get_unread_messages", d.groupIDs[0], nil)
	}
}

// close stops the trickle and the session, then removes the directory
// unless the user asked to keep it.
func (d *observeDemo) close() error {
	d.stop()
	d.trickle.Wait()
	d.cmd.Wait() // "not started" when startSession failed early
	if d.keep {
		return nil
	}
	if err := os.RemoveAll(d.dir); err != nil {
		return fmt.Errorf("remove demo directory: %w", err)
	}
	return nil
}
