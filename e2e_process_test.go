package main

// This file is the end-to-end tests' harness: it builds the shipped binary
// once and drives running processes over stdio (mcpProcess). The tests
// themselves are in e2e_test.go, e2e_cli_test.go and e2e_crash_test.go.

import (
	"bufio"
	"bytes"
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
	"testing"
	"time"
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
	return startProcessOf(tb, builtBinary(tb), name, dir, env...)
}

// startProcessOf is startProcess with another build of the server, bin.
func startProcessOf(tb testing.TB, bin, name, dir string, env ...string) *mcpProcess {
	tb.Helper()
	cmd := exec.Command(bin)
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
