package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

// e2eVersion is stamped into the test binary, so --version and
// serverInfo.version are checked against a value the default never has.
const e2eVersion = "9.9.9-test"

// e2eTimeout bounds every wait for an answer or a notification. It is
// generous because a 2-core machine running -race tests next to eight server
// processes can be slow; a broken feature fails by never answering, not by
// answering late.
const e2eTimeout = 60 * time.Second

var (
	binaryOnce sync.Once
	binaryDir  string
	binaryPath string
	binaryErr  error
)

// TestMain removes the binary that the end-to-end tests and benchmarks build.
// Returning from TestMain makes the test binary exit with m.Run's status.
func TestMain(m *testing.M) {
	m.Run()
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
}

// builtBinary builds crosstalk-mcp once per test run, the way it ships
// (CGO_ENABLED=0), with e2eVersion stamped in, and returns its path.
func builtBinary(tb testing.TB) string {
	tb.Helper()
	binaryOnce.Do(func() {
		binaryDir, binaryErr = os.MkdirTemp("", "crosstalk-e2e-")
		if binaryErr != nil {
			return
		}
		binaryPath = filepath.Join(binaryDir, "crosstalk-mcp")
		if runtime.GOOS == "windows" {
			binaryPath += ".exe"
		}
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+e2eVersion, "-o", binaryPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binaryErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if binaryErr != nil {
		tb.Fatalf("build binary: %v", binaryErr)
	}
	return binaryPath
}

// rpcMessage is any JSON-RPC message the server writes: a response or a
// notification.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// rpcRequest is a JSON-RPC request or, without an id, a notification.
type rpcRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int64  `json:"id,omitempty"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// notification is the params of notifications/resources/updated.
type notification struct {
	URI       string `json:"uri"`
	Priority  string `json:"priority"`
	Relevance string `json:"relevance"`
	// Meta carries a 2026-07-28 listen stream's subscription id.
	Meta map[string]json.RawMessage `json:"_meta"`
}

// mcpProcess is a running crosstalk-mcp binary driven over its stdio: one
// goroutine reads stdout, routing responses to the request that waits for
// them and collecting notifications, which arrive interleaved.
type mcpProcess struct {
	tb     testing.TB
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *syncBuffer
	nextID atomic.Int64

	writeMu sync.Mutex // keeps pipelined batches whole on stdin

	mu       sync.Mutex
	pending  map[int64]chan *rpcMessage
	notes    []*rpcMessage
	changed  chan struct{} // closed and replaced when a notification arrives
	protoErr []string      // stdout lines no request could claim
	done     chan struct{} // closed when stdout ends

	closeOnce sync.Once
	exitCode  int
	exitErr   error
}

// startProcess runs the built binary on groups directory dir. env adds
// variables; CROSSTALK_* variables of the test's own environment are dropped
// so that each process sees only what the test sets.
func startProcess(tb testing.TB, name, dir string, env ...string) *mcpProcess {
	tb.Helper()
	cmd := exec.Command(builtBinary(tb))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CROSSTALK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CROSSTALK_GROUPS_DIR="+dir)
	cmd.Env = append(cmd.Env, env...)
	p := &mcpProcess{tb: tb, name: name, cmd: cmd, stderr: &syncBuffer{},
		pending: map[int64]chan *rpcMessage{}, changed: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("%s: stdin pipe: %v", name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("%s: stdout pipe: %v", name, err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s: start: %v", name, err)
	}
	p.stdin = stdin
	go p.readLoop(stdout)
	tb.Cleanup(func() {
		if _, err := p.close(); err != nil {
			tb.Errorf("%s: %v", name, err)
		}
	})
	return p
}

// startSession starts a process and completes the MCP handshake.
func startSession(tb testing.TB, name, dir string, env ...string) *mcpProcess {
	tb.Helper()
	p := startProcess(tb, name, dir, env...)
	p.initialize()
	return p
}

func (p *mcpProcess) readLoop(stdout io.Reader) {
	defer close(p.done)
	r := bufio.NewReaderSize(stdout, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			p.dispatch(line)
		}
		if err != nil {
			return
		}
	}
}

func (p *mcpProcess) dispatch(line []byte) {
	msg := new(rpcMessage)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := json.Unmarshal(line, msg); err != nil {
		p.protoErr = append(p.protoErr, fmt.Sprintf("not JSON: %.200q", line))
		return
	}
	if msg.Method != "" && (msg.ID == nil || string(msg.ID) == "null") {
		p.notes = append(p.notes, msg)
		close(p.changed)
		p.changed = make(chan struct{})
		return
	}
	id, err := strconv.ParseInt(string(msg.ID), 10, 64)
	ch := p.pending[id]
	if err != nil || ch == nil {
		p.protoErr = append(p.protoErr, fmt.Sprintf("unclaimed: %.200q", line))
		return
	}
	delete(p.pending, id)
	ch <- msg
}

// send writes the requests in one write, so that a batch reaches the server
// pipelined, and returns one channel per request for its response. It is
// safe to call from any goroutine.
func (p *mcpProcess) send(reqs ...rpcRequest) ([]chan *rpcMessage, error) {
	var buf bytes.Buffer
	chans := make([]chan *rpcMessage, len(reqs))
	p.mu.Lock()
	for i := range reqs {
		reqs[i].JSONRPC = "2.0"
		if reqs[i].Method != "notifications/initialized" {
			reqs[i].ID = p.nextID.Add(1)
			chans[i] = make(chan *rpcMessage, 1)
			p.pending[reqs[i].ID] = chans[i]
		}
		line, err := json.Marshal(reqs[i])
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	p.mu.Unlock()
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	_, err := p.stdin.Write(buf.Bytes())
	return chans, err
}

// await waits for one response.
func (p *mcpProcess) await(ch chan *rpcMessage, timeout time.Duration) (*rpcMessage, error) {
	select {
	case msg := <-ch:
		return msg, nil
	case <-p.done:
		select {
		case msg := <-ch:
			return msg, nil
		default:
		}
		return nil, fmt.Errorf("%s: stdout closed before the response; stderr: %s", p.name, p.stderr.String())
	case <-time.After(timeout):
		return nil, fmt.Errorf("%s: no response within %v; stderr: %s", p.name, timeout, p.stderr.String())
	}
}

// call sends one request and returns its response.
func (p *mcpProcess) call(method string, params any) *rpcMessage {
	p.tb.Helper()
	chans, err := p.send(rpcRequest{Method: method, Params: params})
	if err != nil {
		p.tb.Fatalf("%s: write %s: %v", p.name, method, err)
	}
	msg, err := p.await(chans[0], e2eTimeout)
	if err != nil {
		p.tb.Fatalf("%s %s: %v", p.name, method, err)
	}
	return msg
}

// result sends a request that must succeed and decodes its result into v.
func (p *mcpProcess) result(method string, params any, v any) {
	p.tb.Helper()
	msg := p.call(method, params)
	if msg.Error != nil {
		p.tb.Fatalf("%s %s: got error %d %q; want a result", p.name, method, msg.Error.Code, msg.Error.Message)
	}
	if v != nil {
		if err := json.Unmarshal(msg.Result, v); err != nil {
			p.tb.Fatalf("%s %s: decode result %.200s: %v", p.name, method, msg.Result, err)
		}
	}
}

// initialize completes the legacy handshake at 2025-06-18.
func (p *mcpProcess) initialize() {
	p.tb.Helper()
	p.initializeAt("2025-06-18")
}

// initializeAt completes the legacy handshake asking for revision rev.
func (p *mcpProcess) initializeAt(rev string) {
	p.tb.Helper()
	p.result("initialize", map[string]any{"protocolVersion": rev, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "e2e", "version": "1"}}, nil)
	if _, err := p.send(rpcRequest{Method: "notifications/initialized"}); err != nil {
		p.tb.Fatalf("%s: write notifications/initialized: %v", p.name, err)
	}
}

// toolReply is a tools/call result: its text content and isError.
type toolReply struct {
	text    string
	isError bool
}

// toolRequest builds a tools/call request; caller_name is added because
// every tool requires it.
func toolRequest(name string, args map[string]any) rpcRequest {
	full := map[string]any{"caller_name": "e2e"}
	for k, v := range args {
		full[k] = v
	}
	return rpcRequest{Method: "tools/call", Params: map[string]any{"name": name, "arguments": full}}
}

// parseToolReply decodes a tools/call response.
func parseToolReply(msg *rpcMessage) (toolReply, error) {
	if msg.Error != nil {
		return toolReply{}, fmt.Errorf("JSON-RPC error %d %q", msg.Error.Code, msg.Error.Message)
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(msg.Result, &r); err != nil {
		return toolReply{}, fmt.Errorf("decode tool result: %w", err)
	}
	// From 2025-06-18 on, join_group adds a resource_link after the text.
	if len(r.Content) == 0 || r.Content[0].Type != "text" || len(r.Content) > 1 && r.Content[1].Type != "resource_link" {
		return toolReply{}, fmt.Errorf("tool result content %.200s: want one text item, then resource links", msg.Result)
	}
	return toolReply{text: r.Content[0].Text, isError: r.IsError}, nil
}

// tool calls a tool and returns its reply, successful or not.
func (p *mcpProcess) tool(name string, args map[string]any) toolReply {
	p.tb.Helper()
	req := toolRequest(name, args)
	reply, err := parseToolReply(p.call(req.Method, req.Params))
	if err != nil {
		p.tb.Fatalf("%s %s: %v", p.name, name, err)
	}
	return reply
}

// ok calls a tool that must succeed and decodes its JSON text into v.
func (p *mcpProcess) ok(name string, args map[string]any, v any) {
	p.tb.Helper()
	reply := p.tool(name, args)
	if reply.isError {
		p.tb.Fatalf("%s %s: got error %s; want success", p.name, name, reply.text)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(reply.text), v); err != nil {
			p.tb.Fatalf("%s %s: decode %.200s: %v", p.name, name, reply.text, err)
		}
	}
}

// errorText returns the "error" of a failed tool reply.
func (r toolReply) errorText() string {
	var e struct {
		Error string `json:"error"`
	}
	json.Unmarshal([]byte(r.text), &e)
	return e.Error
}

// createGroup creates a group through p and returns its id.
func (p *mcpProcess) createGroup(contextID string) string {
	p.tb.Helper()
	var g struct {
		GroupID string `json:"group_id"`
	}
	p.ok("create_group", map[string]any{"context_id": contextID, "name": "e2e"}, &g)
	return g.GroupID
}

// join makes contextID a member under name and returns its wakeup URI.
func (p *mcpProcess) join(groupID, contextID, name string) string {
	p.tb.Helper()
	var j struct {
		URI string `json:"wakeup_resource_uri"`
	}
	p.ok("join_group", map[string]any{"group_id": groupID, "context_id": contextID, "name": name}, &j)
	return j.URI
}

// notifications returns the resources/updated notifications received so far
// for uri.
func (p *mcpProcess) notifications(uri string) []notification {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []notification
	for _, m := range p.notes {
		var n notification
		if m.Method == "notifications/resources/updated" && json.Unmarshal(m.Params, &n) == nil && n.URI == uri {
			out = append(out, n)
		}
	}
	return out
}

// waitNotification waits until a resources/updated notification for uri
// satisfying match has arrived, and returns it.
func (p *mcpProcess) waitNotification(uri string, match func(notification) bool) notification {
	p.tb.Helper()
	deadline := time.After(e2eTimeout)
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		for _, n := range p.notifications(uri) {
			if match(n) {
				return n
			}
		}
		select {
		case <-changed:
		case <-p.done:
			p.tb.Fatalf("%s: stdout closed while waiting for a notification on %s; stderr: %s", p.name, uri, p.stderr.String())
		case <-deadline:
			p.tb.Fatalf("%s: got notifications %+v for %s; want a matching one within %v", p.name, p.notifications(uri), uri, e2eTimeout)
		}
	}
}

// close ends stdin and waits for the process to exit, killing it if it does
// not exit within e2eTimeout. It returns the exit status.
func (p *mcpProcess) close() (int, error) {
	p.closeOnce.Do(func() {
		p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(e2eTimeout):
			p.cmd.Process.Kill()
			<-p.done
			p.exitErr = fmt.Errorf("did not exit within %v of stdin closing", e2eTimeout)
		}
		werr := p.cmd.Wait()
		var ee *exec.ExitError
		if werr != nil && !errors.As(werr, &ee) && p.exitErr == nil {
			p.exitErr = fmt.Errorf("wait: %w", werr)
		}
		p.exitCode = p.cmd.ProcessState.ExitCode()
		p.mu.Lock()
		if len(p.protoErr) > 0 && p.exitErr == nil {
			p.exitErr = fmt.Errorf("stdout lines that were not valid answers: %v", p.protoErr)
		}
		p.mu.Unlock()
	})
	return p.exitCode, p.exitErr
}

// waitUntil polls cond until it holds, for state another process settles
// asynchronously.
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(e2eTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("got no %s within %v; want it", what, e2eTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wakeupSnapshot is the resources/read body of a wakeup URI.
type wakeupSnapshot struct {
	GroupID   string `json:"group_id"`
	ContextID string `json:"context_id"`
	Wakeups   []struct {
		EventID        int64   `json:"event_id"`
		MessageID      int64   `json:"message_id"`
		Relevance      string  `json:"relevance"`
		Priority       string  `json:"priority"`
		AcknowledgedAt *string `json:"acknowledged_at"`
		LastNotifiedAt *string `json:"last_notified_at"`
	} `json:"wakeups"`
}

func (p *mcpProcess) readWakeups(uri string) wakeupSnapshot {
	p.tb.Helper()
	var r struct {
		Contents []struct {
			URI  string `json:"uri"`
			Text string `json:"text"`
		} `json:"contents"`
	}
	p.result("resources/read", map[string]any{"uri": uri}, &r)
	if len(r.Contents) != 1 {
		p.tb.Fatalf("resources/read %s: got %d contents; want 1", uri, len(r.Contents))
	}
	var snap wakeupSnapshot
	if err := json.Unmarshal([]byte(r.Contents[0].Text), &snap); err != nil {
		p.tb.Fatalf("resources/read %s: decode %q: %v", uri, r.Contents[0].Text, err)
	}
	return snap
}

// messagesReply is the result of the message-reading tools.
type messagesReply struct {
	Messages []struct {
		ID        int64  `json:"id"`
		ContextID string `json:"context_id"`
		Message   string `json:"message"`
	} `json:"messages"`
}

const pollEnv = "CROSSTALK_POLL_INTERVAL_SECONDS=0.1"

// specRetryWindow is how long SPEC.md says a busy operation is retried. It
// is written out, not taken from the store, so a changed window fails.
const specRetryWindow = 3 * time.Second

// TestE2ESubscriptionSeesOtherProcess checks that a write by one server
// process wakes a subscriber in another: the group signal and the mentioned
// member's wakeup arrive, the wake event is recorded as notified (so it is
// not repeated) and is acknowledged by reading.
func TestE2ESubscriptionSeesOtherProcess(t *testing.T) {
	dir := t.TempDir()
	a := startSession(t, "A", dir, pollEnv)
	b := startSession(t, "B", dir, pollEnv)

	gid := b.createGroup("ctx-b")
	b.join(gid, "ctx-b", "bob")
	wakeURI := a.join(gid, "ctx-a", "alice")
	if want := "crosstalk://groups/" + gid + "/wakeups/ctx-a"; wakeURI != want {
		t.Fatalf("wakeup_resource_uri: got %q; want %q", wakeURI, want)
	}
	groupURI := "crosstalk://groups/" + gid + "/messages"
	a.result("resources/subscribe", map[string]any{"uri": groupURI}, nil)

	var sent struct {
		MessageID     int64    `json:"message_id"`
		RoutingReason string   `json:"routing_reason"`
		WakeupTargets []string `json:"wakeup_targets"`
	}
	b.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-b", "name": "bob",
		"message": "@ctx-a please review", "priority": "high"}, &sent)
	if sent.RoutingReason != "mentioned" || len(sent.WakeupTargets) != 1 || sent.WakeupTargets[0] != "ctx-a" {
		t.Fatalf("send_message routing: got %q %v; want mentioned [ctx-a]", sent.RoutingReason, sent.WakeupTargets)
	}

	a.waitNotification(groupURI, func(n notification) bool { return n.Relevance == "group_change" })
	wake := a.waitNotification(wakeURI, func(notification) bool { return true })
	if wake.Priority != "high" || wake.Relevance != "mentioned" {
		t.Errorf("wakeup notification: got priority %q relevance %q; want high mentioned", wake.Priority, wake.Relevance)
	}
	waitUntil(t, "last_notified_at on the wake event", func() bool {
		snap := a.readWakeups(wakeURI)
		return len(snap.Wakeups) == 1 && snap.Wakeups[0].LastNotifiedAt != nil
	})

	var unread messagesReply
	a.ok("get_unread_messages", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}, &unread)
	if len(unread.Messages) != 1 || unread.Messages[0].ID != sent.MessageID {
		t.Fatalf("get_unread_messages: got %+v; want message %d only", unread.Messages, sent.MessageID)
	}
	snap := a.readWakeups(wakeURI)
	if len(snap.Wakeups) != 1 {
		t.Fatalf("wake events after reading: got %d; want 1", len(snap.Wakeups))
	}
	ev := snap.Wakeups[0]
	if ev.AcknowledgedAt == nil || ev.MessageID != sent.MessageID || ev.Relevance != "mentioned" || ev.Priority != "high" {
		t.Errorf("wake event after reading: got %+v (acknowledged_at %v); want acknowledged, message %d, mentioned, high",
			ev, ev.AcknowledgedAt, sent.MessageID)
	}

	// Ten poll intervals: an unrecorded or unacknowledged event would be
	// notified again on the next poll.
	time.Sleep(time.Second)
	if got := a.notifications(wakeURI); len(got) != 1 {
		t.Errorf("wakeup notifications after acknowledging: got %+v; want exactly one", got)
	}
	if got := a.notifications(groupURI); len(got) != 1 {
		t.Errorf("group notifications: got %+v; want exactly one for one message", got)
	}
	if got := b.notifications(wakeupURI(gid, "ctx-b")); len(got) != 0 {
		t.Errorf("sender's wakeup notifications: got %+v; want none", got)
	}
}

// openGroupDB opens a group database file from the test process with the
// store's own DSN, for checks and for holding locks against the server.
func openGroupDB(tb testing.TB, dir, gid string) *sql.DB {
	tb.Helper()
	return openTestDB(tb, filepath.Join(dir, gid+".sqlite3"), "rw")
}

// TestE2EConcurrentSendersLoseNothing has 8 processes, each its own member,
// send 100 pipelined messages each into one group at once, then checks that
// every message, unread row and counter is there and the files are sound.
func TestE2EConcurrentSendersLoseNothing(t *testing.T) {
	const processes, perProcess = 8, 100
	dir := t.TempDir()
	procs := make([]*mcpProcess, processes)
	for i := range procs {
		procs[i] = startSession(t, fmt.Sprintf("P%d", i), dir)
	}
	gid := procs[0].createGroup("ctx-0")
	for i, p := range procs {
		p.join(gid, fmt.Sprintf("ctx-%d", i), fmt.Sprintf("member-%d", i))
	}

	start := make(chan struct{})
	type batch struct {
		chans []chan *rpcMessage
		err   error
	}
	batches := make([]chan batch, processes)
	for i, p := range procs {
		reqs := make([]rpcRequest, perProcess)
		for j := range reqs {
			reqs[j] = toolRequest("send_message", map[string]any{"group_id": gid, "context_id": fmt.Sprintf("ctx-%d", i),
				"name": fmt.Sprintf("member-%d", i), "message": fmt.Sprintf("message %d from process %d", j, i)})
		}
		batches[i] = make(chan batch, 1)
		go func(p *mcpProcess, out chan<- batch) {
			<-start
			chans, err := p.send(reqs...)
			out <- batch{chans, err}
		}(p, batches[i])
	}
	close(start)

	ids := map[int64]bool{}
	for i, p := range procs {
		b := <-batches[i]
		if b.err != nil {
			t.Fatalf("%s: write batch: %v", p.name, b.err)
		}
		succeeded, lastID := 0, int64(0)
		for j, ch := range b.chans {
			msg, err := p.await(ch, 2*e2eTimeout)
			if err != nil {
				t.Fatalf("%s send %d: %v", p.name, j, err)
			}
			reply, err := parseToolReply(msg)
			if err != nil || reply.isError {
				t.Errorf("%s send %d: got %q (%v); want success", p.name, j, reply.text, err)
				continue
			}
			var r struct {
				MessageID int64 `json:"message_id"`
			}
			if err := json.Unmarshal([]byte(reply.text), &r); err != nil || ids[r.MessageID] {
				t.Errorf("%s send %d: got message_id in %q (duplicate %v); want a new id", p.name, j, reply.text, ids[r.MessageID])
			}
			// One process's sends are stored in the order it wrote them,
			// whether or not they were committed together.
			if r.MessageID <= lastID {
				t.Errorf("%s send %d: got message_id %d after %d; want ids in request order", p.name, j, r.MessageID, lastID)
			}
			ids[r.MessageID], lastID = true, r.MessageID
			succeeded++
		}
		if succeeded != perProcess {
			t.Errorf("%s: got %d successful sends; want %d", p.name, succeeded, perProcess)
		}
	}
	for _, p := range procs {
		if code, err := p.close(); err != nil || code != 0 {
			t.Errorf("%s exit: got %d (%v); want 0; stderr: %s", p.name, code, err, p.stderr.String())
		}
	}

	db := openGroupDB(t, dir, gid)
	total := int64(processes * perProcess)
	if got := queryInt(t, db, "SELECT COUNT(*) FROM messages"); got != total {
		t.Errorf("messages: got %d; want %d", got, total)
	}
	for i := range processes {
		ctx := fmt.Sprintf("ctx-%d", i)
		othersSent := total - perProcess
		if got := queryInt(t, db, "SELECT COUNT(*) FROM messages WHERE sender_context_id = ?", ctx); got != perProcess {
			t.Errorf("%s sent: got %d; want %d", ctx, got, perProcess)
		}
		if got := queryInt(t, db, "SELECT unread_count FROM group_members WHERE context_id = ?", ctx); got != othersSent {
			t.Errorf("%s unread_count: got %d; want %d", ctx, got, othersSent)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM member_unread_messages u JOIN messages m ON m.id = u.message_id "+
			"WHERE u.context_id = ? AND m.sender_context_id != ?", ctx, ctx); got != othersSent {
			t.Errorf("%s unread rows for others' messages: got %d; want %d", ctx, got, othersSent)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM member_unread_messages WHERE context_id = ?", ctx); got != othersSent {
			t.Errorf("%s unread rows: got %d; want %d", ctx, got, othersSent)
		}
		if got, want := queryInt(t, db, "SELECT latest_message_id FROM group_members WHERE context_id = ?", ctx),
			queryInt(t, db, "SELECT MAX(id) FROM messages WHERE sender_context_id = ?", ctx); got != want {
			t.Errorf("%s latest_message_id: got %d; want %d", ctx, got, want)
		}
	}
	if got := queryInt(t, db, "SELECT message_revision FROM group_state"); got != total {
		t.Errorf("message_revision: got %d; want %d", got, total)
	}
	var check string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Errorf("PRAGMA integrity_check: got %q (%v); want ok", check, err)
	}
	if _, err := db.Exec("INSERT INTO message_search(message_search) VALUES('integrity-check')"); err != nil {
		t.Errorf("FTS integrity-check: got %v; want nil", err)
	}
}

// TestE2EDeletedGroupStaysDeleted checks that a group deleted by its creator
// in one process is not found, and not recreated, by another process that
// still holds a cached handle and subscriptions on it.
func TestE2EDeletedGroupStaysDeleted(t *testing.T) {
	dir := t.TempDir()
	a := startSession(t, "A", dir, pollEnv)
	b := startSession(t, "B", dir, pollEnv)
	gid := b.createGroup("ctx-b")
	a.join(gid, "ctx-a", "alice")
	groupURI := "crosstalk://groups/" + gid + "/messages"
	a.result("resources/subscribe", map[string]any{"uri": groupURI}, nil)
	a.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": "hello"}, nil)
	a.ok("get_users", map[string]any{"group_id": gid}, nil)
	a.waitNotification(groupURI, func(n notification) bool { return n.Relevance == "group_change" })

	b.ok("delete_group", map[string]any{"group_id": gid, "context_id": "ctx-b"}, nil)

	notFound := "Group does not exist: " + gid + ". Create it first or check the group_id."
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"get_users", map[string]any{"group_id": gid}},
		{"send_message", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice", "message": "still there?"}},
		{"join_group", map[string]any{"group_id": gid, "context_id": "ctx-a", "name": "alice"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			reply := a.tool(tc.tool, tc.args)
			if !reply.isError || reply.errorText() != notFound {
				t.Errorf("got %s (isError %v); want error %q", reply.text, reply.isError, notFound)
			}
		})
	}
	a.waitNotification(groupURI, func(n notification) bool { return n.Relevance == "deleted" })

	var list struct {
		Groups []struct {
			GroupID string `json:"group_id"`
		} `json:"groups"`
	}
	a.ok("list_groups", nil, &list)
	for _, g := range list.Groups {
		if g.GroupID == gid {
			t.Errorf("list_groups: got %s listed; want it gone", gid)
		}
	}
	// Several poll intervals, so that a poller reopening the file would
	// have done so.
	time.Sleep(time.Second)
	for _, suffix := range []string{".sqlite3", ".sqlite3-wal", ".sqlite3-shm"} {
		if _, err := os.Stat(filepath.Join(dir, gid+suffix)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat %s%s after delete: got %v; want not exist", gid, suffix, err)
		}
	}
}

// TestE2EBusyGroup holds a group's write lock from the test process while
// the server sends a message: a short hold is retried into success, one
// beyond the 3 s retry window is answered with the busy error.
func TestE2EBusyGroup(t *testing.T) {
	dir := t.TempDir()
	p := startSession(t, "P", dir)
	gid := p.createGroup("ctx-p")
	p.join(gid, "ctx-p", "pat")
	db := openGroupDB(t, dir, gid)
	db.SetMaxOpenConns(1)
	send := func(text string) (chan *rpcMessage, time.Time) {
		chans, err := p.send(toolRequest("send_message", map[string]any{"group_id": gid, "context_id": "ctx-p", "name": "pat", "message": text}))
		if err != nil {
			t.Fatalf("write send_message: %v", err)
		}
		return chans[0], time.Now()
	}
	t.Run("200ms", func(t *testing.T) {
		release := holdWriteLock(t, filepath.Join(dir, gid+".sqlite3"))
		ch, _ := send("after a short lock")
		time.Sleep(200 * time.Millisecond)
		select {
		case msg := <-ch:
			t.Fatalf("got answer %.200s while the group was locked; want none until it is released", msg.Result)
		default:
		}
		release()
		msg, err := p.await(ch, e2eTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if reply, err := parseToolReply(msg); err != nil || reply.isError {
			t.Fatalf("send_message after a 200 ms lock: got %q (%v); want success", reply.text, err)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM messages WHERE content = 'after a short lock'"); got != 1 {
			t.Errorf("stored messages: got %d; want 1", got)
		}
	})

	t.Run("beyond retry window", func(t *testing.T) {
		release := holdWriteLock(t, filepath.Join(dir, gid+".sqlite3"))
		ch, sentAt := send("after a long lock")
		// The lock is released 5 s after the retry window at the latest:
		// a server that retried much longer would then succeed.
		msg, err := p.await(ch, specRetryWindow+5*time.Second)
		elapsed := time.Since(sentAt)
		release()
		if err != nil {
			msg, err = p.await(ch, e2eTimeout)
		}
		if err != nil {
			t.Fatal(err)
		}
		reply, err := parseToolReply(msg)
		want := "Cannot complete operation because the group is busy. Please try again in a moment."
		if err != nil || !reply.isError || reply.errorText() != want {
			t.Fatalf("send_message under a held lock: got %q (%v); want error %q", reply.text, err, want)
		}
		if elapsed < specRetryWindow {
			t.Errorf("busy answer after %v; want it only after the %v retry window", elapsed, specRetryWindow)
		}
		if got := queryInt(t, db, "SELECT COUNT(*) FROM messages WHERE content = 'after a long lock'"); got != 0 {
			t.Errorf("stored messages of the failed send: got %d; want 0", got)
		}
		p.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-p", "name": "pat", "message": "after release"}, nil)
	})
}

// bigMessage returns a message of exactly n bytes of valid UTF-8 that mixes
// ASCII, JSON-escaped and multi-byte characters, so that a round trip
// exercises every escaping path.
func bigMessage(n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := 0; ; i++ {
		piece := fmt.Sprintf("line %d: \"quoted\" \\ tab\t é ☃ 🙂 <&>\n", i)
		if b.Len()+len(piece) > n {
			break
		}
		b.WriteString(piece)
	}
	b.WriteString(strings.Repeat("x", n-b.Len()))
	return b.String()
}

// TestE2ELargeMessage sends a 16 MiB message as one JSON-RPC line and reads
// it back unchanged.
func TestE2ELargeMessage(t *testing.T) {
	dir := t.TempDir()
	p := startSession(t, "P", dir)
	gid := p.createGroup("ctx-p")
	p.join(gid, "ctx-p", "pat")
	text := bigMessage(16 << 20)
	if len(text) != 16<<20 || !utf8.ValidString(text) {
		t.Fatalf("test message: got %d bytes (valid UTF-8 %v); want %d", len(text), utf8.ValidString(text), 16<<20)
	}
	var sent struct {
		MessageID int64 `json:"message_id"`
	}
	p.ok("send_message", map[string]any{"group_id": gid, "context_id": "ctx-p", "name": "pat", "message": text}, &sent)
	var all messagesReply
	p.ok("get_all_messages", map[string]any{"group_id": gid, "context_id": "ctx-p", "name": "pat"}, &all)
	if len(all.Messages) != 1 || all.Messages[0].ID != sent.MessageID {
		t.Fatalf("get_all_messages: got %d messages; want message %d only", len(all.Messages), sent.MessageID)
	}
	if got := all.Messages[0].Message; got != text {
		i := 0
		for i < len(got) && i < len(text) && got[i] == text[i] {
			i++
		}
		t.Errorf("message: got %d bytes differing at byte %d; want the %d bytes sent", len(got), i, len(text))
	}
}

// TestE2ECommandLine checks exit statuses and the stamped version.
func TestE2ECommandLine(t *testing.T) {
	bin := builtBinary(t)
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"version", []string{"--version"}, 0, e2eVersion + "\n", ""},
		{"unknown command", []string{"x"}, 2, "", "Unknown command: x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Env = append(os.Environ(), "CROSSTALK_GROUPS_DIR="+t.TempDir())
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatalf("run: %v", err)
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.wantCode {
				t.Errorf("exit status: got %d; want %d", code, tc.wantCode)
			}
			if stdout.String() != tc.wantStdout {
				t.Errorf("stdout: got %q; want %q", stdout.String(), tc.wantStdout)
			}
			if stderr.String() != tc.wantStderr {
				t.Errorf("stderr: got %q; want %q", stderr.String(), tc.wantStderr)
			}
		})
	}

	t.Run("serverInfo version", func(t *testing.T) {
		p := startProcess(t, "P", t.TempDir())
		var init struct {
			ServerInfo struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"serverInfo"`
		}
		p.result("initialize", map[string]any{"protocolVersion": "2025-06-18"}, &init)
		if init.ServerInfo.Version != e2eVersion || init.ServerInfo.Name != "crosstalk" {
			t.Errorf("serverInfo: got %+v; want crosstalk %s", init.ServerInfo, e2eVersion)
		}
	})

	for _, tc := range []struct {
		name      string
		handshake bool
	}{{"EOF at once", false}, {"EOF after a session", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProcess(t, "P", t.TempDir(), pollEnv)
			if tc.handshake {
				p.initialize()
				p.createGroup("ctx-p")
			}
			code, err := p.close()
			if err != nil || code != 0 {
				t.Errorf("exit on stdin EOF: got %d (%v); want 0; stderr: %s", code, err, p.stderr.String())
			}
		})
	}
}

// TestE2ESignalEndsInOrder shows that SIGTERM ends the server like EOF:
// exit status 0, with every audit row queued so far written to disk.
func TestE2ESignalEndsInOrder(t *testing.T) {
	dir := t.TempDir()
	p := startSession(t, "audited", dir, "CROSSTALK_OBSERVABILITY_RETENTION_DAYS=inf")
	const calls = 5
	for range calls {
		if r := p.tool("list_groups", map[string]any{}); r.isError {
			t.Fatalf("list_groups: %s", r.text)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(e2eTimeout):
		t.Fatal("the server did not exit after SIGTERM")
	}
	if code, err := p.close(); code != 0 || err != nil {
		t.Fatalf("got exit %d (%v); want 0", code, err)
	}
	db := openTestDB(t, filepath.Join(dir, "observability.sqlite3"), "ro")
	if n := queryInt(t, db, "SELECT COUNT(*) FROM tool_calls"); n != calls {
		t.Errorf("got %d audit rows after SIGTERM; want %d", n, calls)
	}
}
