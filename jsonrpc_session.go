package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// server is one MCP session over a newline-delimited JSON-RPC 2.0 stream.
// Requests are handled one at a time in arrival order; the subscription
// poller writes notifications concurrently through the same writer.
type server struct {
	store *store
	subs  *subscriptions
	out   *lineWriter

	initialized bool // initialize was answered
	ready       bool // notifications/initialized arrived after that

	// audit, when set, receives every completed tools/call.
	audit func(toolCall)

	// sendRunLimit is the most pipelined sends committed together; 1 turns
	// group commit off.
	sendRunLimit int
}

// toolCall describes one completed tools/call for the audit log.
type toolCall struct {
	requestID json.RawMessage
	name      string
	args      toolArgs // zero when arguments was not an object
	result    toolResult
	started   time.Time
	// groupName, when groupNameRead, is the group's name as read for the
	// audit log ahead of the call's record: before a delete_group ran, so
	// that it outlives the group, or once for a whole run of pipelined sends.
	groupName     string
	groupNameRead bool
}

// supportedProtocolVersions are answered as sent; any other client version
// gets the newest, which is first.
var supportedProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

func newServer(st *store, stdout io.Writer, interval time.Duration) *server {
	s := &server{store: st, out: &lineWriter{w: bufio.NewWriterSize(stdout, 64<<10)}, sendRunLimit: maxSendRun}
	s.subs = newSubscriptions(st, interval, s.notify)
	return s
}

// runServer serves MCP over stdio until stdin closes, then exits 0.
func runServer(stdin io.Reader, stdout, stderr io.Writer) int {
	log.SetOutput(stderr)
	log.SetFlags(0)
	log.SetPrefix("crosstalk-mcp: ")
	// Like the original, refuse a bad audit setting before any storage exists.
	auditCfg, err := auditConfigFromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	dir, err := groupsDirFromEnv()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	st, err := newStore(dir)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer st.close()
	s := newServer(st, stdout, pollInterval(os.Getenv("CROSSTALK_POLL_INTERVAL_SECONDS")))
	defer s.subs.close()
	audit, err := openAuditLog(dir, auditCfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer audit.close()
	audit.attach(s)
	// A client that stops the server with SIGINT or SIGTERM gets the same
	// orderly end as on EOF, so queued audit rows are still written. A read
	// from a blocking stdin cannot be interrupted, so serving runs aside.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan error, 1)
	go func() { done <- s.serve(stdin) }()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	case <-sig:
	}
	return 0
}

// pollInterval reads CROSSTALK_POLL_INTERVAL_SECONDS; a missing, invalid,
// non-positive or non-finite value means the default 0.5 s.
func pollInterval(value string) time.Duration {
	v, err := strconv.ParseFloat(pyStrip(value), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return defaultPollInterval
	}
	// Clamp where a time.Duration would overflow (about 292 years).
	return time.Duration(min(v, float64(math.MaxInt64/int64(time.Second))) * float64(time.Second))
}

func logf(format string, args ...any) { log.Printf(format, args...) }

// notify writes a server-to-client notification.
func (s *server) notify(method string, params object) error {
	return s.out.write(object{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}})
}

// serve reads messages until EOF. Lines have no length limit: a 16 MiB
// message is one line like any other. Sends the client has pipelined to one
// group are committed together (pipelinedSends); everything else is
// answered line by line.
func (s *server) serve(stdin io.Reader) error {
	r := bufio.NewReaderSize(stdin, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if run := s.pipelinedSends(line, r); run != nil {
			if werr := s.answerSends(run); werr != nil {
				return fmt.Errorf("write response: %w", werr)
			}
		} else if len(line) > 0 {
			if reply := s.handleLine(line); reply != nil {
				if werr := s.out.write(reply); werr != nil {
					return fmt.Errorf("write response: %w", werr)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read request: %w", err)
		}
	}
}

// dispatch runs one request and returns its result, an error, or (nil, nil)
// when nothing is to be answered.
func (s *server) dispatch(req request) (any, *rpcError) {
	switch req.method {
	case "initialize":
		return s.initialize(req)
	case "notifications/initialized":
		if s.initialized {
			s.ready = true
		}
		return nil, nil
	case "ping":
		return object{}, nil
	}
	if !s.ready {
		return nil, errNotInitialized
	}
	if req.id == nil {
		return nil, nil
	}
	switch req.method {
	case "tools/list":
		return toolList, nil
	case "tools/call":
		return s.toolsCall(req)
	case "resources/list":
		return s.resourcesList()
	case "resources/read":
		return s.resourcesRead(req)
	case "resources/subscribe":
		return s.resourcesSubscribe(req)
	case "resources/unsubscribe":
		return s.resourcesUnsubscribe(req)
	}
	return nil, errMethodNotFound(req.method)
}

func (s *server) initialize(req request) (any, *rpcError) {
	if req.id == nil || s.initialized {
		return nil, errInvalidInit
	}
	p, err := req.paramsObject()
	if err != nil {
		return nil, err
	}
	client, ok := p.str("protocolVersion")
	if !ok || isBlank(client) {
		return nil, errInvalidParams("initialize protocolVersion must be a non-empty string.")
	}
	answer := supportedProtocolVersions[0]
	if slices.Contains(supportedProtocolVersions, client) {
		answer = client
	}
	s.initialized = true
	return object{
		{"protocolVersion", answer},
		{"capabilities", object{{"tools", object{}}, {"resources", object{{"subscribe", true}, {"listChanged", false}}}}},
		{"serverInfo", object{{"name", "crosstalk"}, {"version", version}}},
	}, nil
}

func (s *server) toolsCall(req request) (any, *rpcError) {
	p, perr := req.paramsObject()
	if perr != nil {
		return nil, perr
	}
	call, rerr := s.startCall(req.id, p)
	if rerr == nil {
		if call.name == "delete_group" {
			call.groupName, call.groupNameRead = s.auditGroupName(call.args.groupID())
		}
		call.result = s.callTool(call.name, call.args)
	}
	return s.finishCall(call, rerr)
}

// startCall reads a tools/call's tool name and arguments from its params.
// When they cannot be called it returns the -32602 error, with call.result
// set to the tool failure the audit log records for it.
func (s *server) startCall(id json.RawMessage, p toolArgs) (toolCall, *rpcError) {
	call := toolCall{requestID: id, started: time.Now()}
	if raw, ok := p.values["name"]; ok {
		if name, ok := p.str("name"); ok {
			call.name = name
		} else {
			call.name = string(raw)
		}
	}
	rawArgs, hasArgs := p.values["arguments"]
	args, argsOK := toolArgs{values: map[string]json.RawMessage{}}, true
	if hasArgs {
		args, argsOK = parseArgs(rawArgs)
	}
	if !argsOK {
		call.result = failure(validationErrorf("tools/call arguments must be an object."))
		return call, errInvalidParams("tools/call arguments must be an object.")
	}
	call.args = args
	if caller, _ := args.str("caller_name"); isBlank(caller) {
		call.result = failure(validationErrorf("tools/call caller_name must be a non-empty string."))
		return call, errInvalidParams("tools/call caller_name must be a non-empty string.")
	}
	return call, nil
}

// auditGroupName reads a group's name for the audit log, when it is on; ok
// is false when it is off or the name cannot be read.
func (s *server) auditGroupName(id string) (name string, ok bool) {
	if s.audit == nil {
		return "", false
	}
	meta, err := s.store.groupMetadata(id)
	return meta.name, err == nil
}

// finishCall hands a completed call to the audit log and returns its answer.
func (s *server) finishCall(call toolCall, rerr *rpcError) (any, *rpcError) {
	if s.audit != nil {
		s.audit(call)
	}
	if rerr != nil {
		return nil, rerr
	}
	return call.result.wire(), nil
}
