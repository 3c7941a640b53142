package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// server is one MCP session: one client's lifecycle, dispatch and tool calls.
// A transport hands it one line at a time, in arrival order; it writes to out.
type server struct {
	store *store
	subs  *subscriptions
	out   messageWriter
	cfg   serverConfig

	// life guards initialized, ready and version, which initialize and
	// notifications/initialized write while other requests read them.
	life        sync.Mutex
	initialized bool             // initialize was answered
	ready       bool             // notifications/initialized arrived after that
	version     protocolRevision // negotiated by initialize; 2026-07-28 requests carry theirs in _meta

	inflight *inflight      // long-running requests such as subscriptions/listen
	changes  *changeWatcher // nil when file events are off
	audit    func(toolCall) // when set, receives every completed tools/call

	// request is the context of the HTTP request being handled (set by
	// httpSession.handle under handleMu): a send must not outlive it
	// uncommitted, and its deadline ends the busy window. Background on stdio.
	request context.Context
	remote  string // the HTTP request's address, set as request is: audited with its calls

	// serving is held by serve while it handles a line and taken by stop, so
	// that a signal waits for the request in hand to be answered and audited.
	serving  sync.Mutex
	stopping bool
}

// toolCall describes one completed tools/call for the audit log.
type toolCall struct {
	requestID json.RawMessage
	version   protocolRevision // the revision the call's answer is rendered for
	name      string
	args      toolArgs // zero when arguments was not an object
	result    toolResult
	started   time.Time
	// groupName, when groupNameRead, is the group's name read ahead of the
	// record: before a delete_group removes it, or once for a run of sends.
	groupName     string
	groupNameRead bool
	remote        string // the HTTP client's address; "" over stdio
	token         string // the per-agent token's NAME; "" for the shared token and stdio
}

// serverConfig is what every session of a process is built with besides its
// store and output; main fills it, so the wire layer names nothing above it.
type serverConfig struct {
	release         string        // the version serverInfo reports
	interval        time.Duration // the subscription poller's period
	waitKeepalive   time.Duration // how often a waiting tool call reports progress
	maxMessageBytes int           // CROSSTALK_MAX_MESSAGE_BYTES in bytes of UTF-8; 0 means none
	// speaksFor refuses a context_id this session may not act as:
	// prepareCall's one identity check, on every transport.
	speaksFor func(contextID string) *domainError
	tokenName string // the per-agent token's NAME, recorded with sends and audited calls; "" for none
	// channels is CROSSTALK_CHANNELS: declare Claude Code's channel
	// capability and push wake events through it (routing_channels.go).
	channels bool
}

// newServerConfig is the configuration of release polling every interval.
func newServerConfig(release string, interval time.Duration) serverConfig {
	return serverConfig{release: release, interval: interval, waitKeepalive: defaultWaitKeepalive, speaksFor: speaksForAnyone}
}

// newServer returns a session writing one line per message to stdout; see newServerWriting.
func newServer(st *store, stdout io.Writer, cfg serverConfig) *server {
	return newServerWriting(context.Background(), st, &lineWriter{w: bufio.NewWriterSize(stdout, 64<<10)}, cfg)
}

// newServerWriting returns a session whose messages leave through out and
// whose in-flight requests end with ctx, and starts its subscription poller,
// which runs until s.subs.close.
func newServerWriting(ctx context.Context, st *store, out messageWriter, cfg serverConfig) *server {
	s := &server{store: st, out: out, cfg: cfg, request: context.Background()}
	s.subs = newSubscriptions(st, cfg.interval, s.notify)
	s.subs.channels, s.subs.speaksFor = cfg.channels, cfg.speaksFor
	s.inflight = newInflight(ctx, s.out)
	return s
}

// stop waits for the request in hand to be answered and audited, and keeps serve from starting another.
func (s *server) stop() {
	s.serving.Lock()
	s.stopping = true
	s.serving.Unlock()
}

// exitClientGone is the exit status when the client closed stdout: the
// session ends as on EOF, but answers were lost, so the exit is not clean.
const exitClientGone = 3

// errOutputClosed marks a failed write of an answer: the session ends as on EOF.
var errOutputClosed = errors.New("cannot write to stdout")

// serve is the stdio transport: it answers lines, of any length, until EOF.
func (s *server) serve(stdin io.Reader) error {
	r := bufio.NewReaderSize(stdin, 64<<10)
	defer s.inflight.close()
	for {
		line, err := r.ReadBytes('\n')
		if werr := s.serveLine(line, r); werr != nil {
			return fmt.Errorf("%w: write response: %w", errOutputClosed, werr)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read request: %w", err)
		}
	}
}

// serveLine answers line, and the sends pipelined behind it, under s.serving;
// after stop it answers nothing. It returns the error of a failed write.
func (s *server) serveLine(line []byte, r *bufio.Reader) error {
	s.serving.Lock()
	defer s.serving.Unlock()
	if s.stopping {
		return nil
	}
	if run := s.pipelinedSends(line, r); run != nil {
		return s.answerSends(run)
	}
	if len(line) > 0 {
		if reply := s.handleLine(line); reply != nil {
			return s.out.write(reply)
		}
	}
	return nil
}

// notify writes a server-to-client notification.
func (s *server) notify(method string, params object) error {
	return s.out.write(object{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}})
}

// handle answers one JSON-RPC message of a line, or returns nil.
func (s *server) handle(raw json.RawMessage) any {
	req, reply, ok := decodeRequest(raw)
	if !ok {
		return reply
	}
	if s.dispatchNotification(req) {
		return nil
	}
	if meta := readRequestMeta(req.params); meta.hasVersion {
		return s.handleModern(req, meta)
	}
	req.version, _ = s.lifecycle()
	result, err := s.dispatch(req)
	return response(req, result, err)
}

// lifecycle returns the revision initialize negotiated ("" before it) and
// whether notifications/initialized has made the session ready.
func (s *server) lifecycle() (version protocolRevision, ready bool) {
	s.life.Lock()
	defer s.life.Unlock()
	return s.version, s.ready
}

// toolsCall answers a lone tools/call: prepare, run, record.
func (s *server) toolsCall(req request) (any, *rpcError) {
	pc := s.prepareCall(req)
	if pc.tool != nil && pc.tool.wait != nil {
		// Answered later, from the in-flight table: (nil, nil) here.
		return nil, s.startWaitingCall(req, pc)
	}
	if pc.tool != nil {
		if pc.tool.name == "delete_group" {
			pc.call.groupName, pc.call.groupNameRead = s.auditGroupName(pc.call.args.groupID())
		}
		pc.call.result = pc.tool.run(s, pc.call.args)
	}
	return s.finishCall(pc)
}

// preparedCall is a tools/call that prepareCall has read and checked.
type preparedCall struct {
	call      toolCall  // the audit record; call.result is set once decided
	tool      *tool     // the tool to run, or nil when the outcome is decided
	rerr      *rpcError // the JSON-RPC error answered instead of a result
	unaudited bool      // params was not an object: no tool is named, so nothing is audited
}

// prepareCall reads and checks a tools/call (params, name, arguments,
// caller_name, schema): a request not readable as a call is a JSON-RPC error,
// pc.rerr; anything wrong with the call is an isError result, as in go-sdk.
func (s *server) prepareCall(req request) (pc preparedCall) {
	p, rerr := req.paramsObject()
	if rerr != nil {
		return preparedCall{rerr: rerr, unaudited: true}
	}
	name, ok := p.str("name")
	if !ok {
		name = string(p.values["name"]) // recorded as written
	}
	pc.call = toolCall{requestID: req.id, version: req.version, name: name, started: time.Now(), remote: s.remote, token: s.cfg.tokenName}
	args, ok := parseArgs(p.values["arguments"])
	if !ok {
		return pc.refuse(errInvalidParams("tools/call arguments must be an object."))
	}
	args.stateless = req.version >= revModern
	args.maxMessageBytes, args.tokenName = s.cfg.maxMessageBytes, s.cfg.tokenName
	pc.call.args = args
	t := toolsByName[name]
	if t == nil && req.version >= revTyped {
		// From 2025-06-18 on an unknown tool is a protocol error
		// (server/tools.mdx "Error Handling"); before, a tool result.
		return pc.refuse(&rpcError{-32602, "Unknown tool: " + name})
	}
	if caller, _ := args.str("caller_name"); isBlank(caller) && req.version >= revSEP {
		// From 2025-11-25 on, input validation failures are tool results.
		pc.call.result = failure(validationErrorf("tools/call caller_name must be a non-empty string."))
		return pc
	} else if isBlank(caller) {
		return pc.refuse(errInvalidParams("tools/call caller_name must be a non-empty string."))
	}
	if t == nil {
		pc.call.result = failure(validationErrorf("Unknown tool: %s", name))
		return pc
	}
	te := t.checkArgs(args)
	if id, ok := args.str("context_id"); ok && te == nil {
		te = s.cfg.speaksFor(id)
	}
	if te != nil {
		pc.call.result = failure(te)
		return pc
	}
	pc.tool = t
	return pc
}

// refuse decides pc as the JSON-RPC error e, which the audit log records as
// the validation failure of e's message without its "Invalid params: ".
func (pc preparedCall) refuse(e *rpcError) preparedCall {
	pc.call.result = failure(validationErrorf("%s", strings.TrimPrefix(e.message, "Invalid params: ")))
	pc.rerr = e
	return pc
}

// auditGroupName reads a group's name for the audit log; ok is false when it is off or fails.
func (s *server) auditGroupName(id string) (name string, ok bool) {
	if s.audit == nil {
		return "", false
	}
	meta, err := s.store.groupMetadata(id)
	return meta.name, err == nil
}

// finishCall hands a completed call to the audit log and returns its answer.
func (s *server) finishCall(pc preparedCall) (any, *rpcError) {
	if s.audit != nil && !pc.unaudited {
		s.audit(pc.call)
	}
	if pc.rerr != nil {
		return nil, pc.rerr
	}
	return pc.call.result.wire(pc.call.version), nil
}
