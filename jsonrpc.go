package main

import (
	"bufio"
	"bytes"
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
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf16"
	"unicode/utf8"
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
	// version is the revision initialize negotiated for this stdio
	// process; 2026-07-28 requests carry theirs in _meta instead.
	version protocolRevision

	// inflight runs long-running requests such as subscriptions/listen.
	inflight *inflight

	// audit, when set, receives every completed tools/call.
	audit func(toolCall)

	// sendRunLimit is the most pipelined sends committed together; 1 turns
	// group commit off.
	sendRunLimit int
}

// toolCall describes one completed tools/call for the audit log.
type toolCall struct {
	requestID json.RawMessage
	version   protocolRevision // the revision the call's answer is rendered for
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

// rpcError is a JSON-RPC error object.
type rpcError struct {
	code    int
	message string
}

func (e *rpcError) Error() string { return e.message }

// The JSON-RPC errors the server answers, with the original's messages.
var (
	errParse          = &rpcError{-32700, "Parse error"}
	errInvalidRequest = &rpcError{-32600, "Invalid Request"}
	errBatchInit      = &rpcError{-32600, "initialize must not be sent in a batch"}
	errInvalidInit    = &rpcError{-32600, "Invalid initialize request"}
	errNotInitialized = &rpcError{-32002, "Server is not initialized"}
	errInternal       = &rpcError{-32603, "Internal server error"}
)

func errMethodNotFound(method string) *rpcError {
	return &rpcError{-32601, "Method not found: " + method}
}

func errInvalidParams(msg string) *rpcError {
	return &rpcError{-32602, "Invalid params: " + msg}
}

// supportedProtocolVersions are answered as sent; any other client version
// gets the newest, which is first.
var supportedProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// lineWriter writes one JSON-RPC message per line. Its lock keeps responses
// and poller notifications from interleaving within a line.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (w *lineWriter) write(v any) error {
	line := pyJSON(v)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.w.WriteString(line)
	w.w.WriteByte('\n')
	return w.w.Flush()
}

func logf(format string, args ...any) { log.Printf(format, args...) }

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

func newServer(st *store, stdout io.Writer, interval time.Duration) *server {
	s := &server{store: st, out: &lineWriter{w: bufio.NewWriterSize(stdout, 64<<10)}, sendRunLimit: maxSendRun}
	s.subs = newSubscriptions(st, interval, s.notify)
	s.inflight = newInflight(s.out.write)
	return s
}

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
	defer s.inflight.close()
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

// maxSendRun bounds how many pipelined sends share one transaction, so that
// the first of them is still answered within a few milliseconds and another
// process waiting for the group's write lock gets it as soon.
const maxSendRun = 64

// pendingSend is a send_message call read ahead of its answer.
type pendingSend struct {
	req     request
	call    toolCall
	groupID string
	msg     outgoing
}

// pipelinedSends returns line, when it is a send_message call, together
// with the send_message calls to the same group that the client has already
// pipelined behind it and that are fully buffered in r. It never waits for
// input, so a lone request is not delayed. It returns nil when line is
// anything else; a run stops at the first line that is not such a call.
func (s *server) pipelinedSends(line []byte, r *bufio.Reader) []pendingSend {
	first, ok := s.sendCall(line)
	if !ok {
		return nil
	}
	run := []pendingSend{first}
	for len(run) < s.sendRunLimit {
		buffered, _ := r.Peek(r.Buffered())
		end := bytes.IndexByte(buffered, '\n')
		if end < 0 {
			break
		}
		next, ok := s.sendCall(buffered[:end+1])
		if !ok || next.groupID != first.groupID {
			break
		}
		r.Discard(end + 1)
		run = append(run, next)
	}
	return run
}

// sendCall decodes line as a single send_message request whose arguments
// pass every check, on a session that may call tools. Decoding copies, so
// the result does not refer to line. Anything else is left to handleLine,
// which gives it its answer or error.
func (s *server) sendCall(line []byte) (pendingSend, bool) {
	line = bytes.TrimSpace(line)
	if !s.ready || len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(`"send_message"`)) || bytes.Contains(line, []byte(metaProtocolVersion)) {
		return pendingSend{}, false
	}
	req, _, ok := decodeRequest(line)
	if !ok || req.id == nil || req.method != "tools/call" {
		return pendingSend{}, false
	}
	p, perr := req.paramsObject()
	if perr != nil {
		return pendingSend{}, false
	}
	call, rerr := s.startCall(req.id, p)
	call.version = s.version
	if rerr != nil || call.name != "send_message" || toolsByName[call.name].checkArgs(call.args) != nil {
		return pendingSend{}, false
	}
	msg, err := parseSend(call.args)
	groupID := call.args.groupID()
	if err != nil || validateGroupID(groupID) != nil {
		return pendingSend{}, false
	}
	return pendingSend{req: req, call: call, groupID: groupID, msg: msg}, true
}

// answerSends runs a run of pipelined sends and writes their answers in
// order. A run of several is committed as one transaction, and every answer
// is written after that commit. A run that stays busy for the whole retry
// window is answered busy at once rather than retried send by send, which
// would hold the client up to 3 s per send. When the shared transaction
// fails otherwise (a deleted group, a failing statement, a full disk),
// nothing of it is kept and each send runs alone, so that it gets exactly
// the answer it would have got had it not been pipelined.
func (s *server) answerSends(run []pendingSend) error {
	var results []toolResult
	var groupName string
	var groupNameRead bool
	if len(run) > 1 {
		results = s.commitSends(run)
		// The sends share one commit, so one read of the group's name
		// serves the audit records of all of them.
		groupName, groupNameRead = s.auditGroupName(run[0].groupID)
	}
	for i, p := range run {
		if results != nil {
			p.call.result = results[i]
		} else {
			p.call.result = toolOutcome(p.call.name, func() (any, error) { return s.send(p.groupID, p.msg) })
		}
		p.call.groupName, p.call.groupNameRead = groupName, groupNameRead
		result, _ := s.finishCall(p.call, nil)
		if err := s.out.write(response(p.req, result, nil)); err != nil {
			return err
		}
	}
	return nil
}

// commitSends stores a run of sends in one transaction and returns their
// results, or nil when the transaction failed as a whole other than busy.
func (s *server) commitSends(run []pendingSend) []toolResult {
	msgs := make([]outgoing, len(run))
	for i, p := range run {
		msgs[i] = p.msg
	}
	var outs []sent
	var errs []error
	err := retryBusy(func() (err error) {
		outs, errs, err = s.store.sendMessages(run[0].groupID, msgs)
		return err
	})
	if err != nil && !isBusy(err) {
		return nil
	}
	results := make([]toolResult, len(run))
	for i := range run {
		switch {
		case err != nil:
			results[i] = failure(errGroupBusy)
		case errs[i] != nil:
			results[i] = failure(classify("send_message", errs[i]))
		default:
			results[i] = toolResult{value: sentObject(outs[i])}
		}
	}
	return results
}

// handleLine answers one line: a request, a notification or a batch. It
// returns nil when nothing is to be written.
func (s *server) handleLine(line []byte) any {
	trimmed := bytes.TrimSpace(line)
	if !json.Valid(trimmed) {
		return errorResponse(nil, errParse)
	}
	if trimmed[0] != '[' {
		return s.handle(trimmed)
	}
	if typed(s.version) {
		return errorResponse(nil, errInvalidRequest) // batches were removed in 2025-06-18
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(trimmed, &batch); err != nil {
		return errorResponse(nil, errParse)
	}
	if len(batch) == 0 {
		return errorResponse(nil, errInvalidRequest)
	}
	for _, item := range batch {
		var m map[string]json.RawMessage
		var method string
		if json.Unmarshal(item, &m) == nil && json.Unmarshal(m["method"], &method) == nil && method == "initialize" {
			return errorResponse(nil, errBatchInit)
		}
	}
	var replies []any
	for _, item := range batch {
		if r := s.handle(item); r != nil {
			replies = append(replies, r)
		}
	}
	if len(replies) == 0 {
		return nil
	}
	return replies
}

// request is a decoded JSON-RPC message.
type request struct {
	id      json.RawMessage // nil for a notification (absent or null id)
	method  string
	params  json.RawMessage  // nil when absent
	version protocolRevision // the revision this request is answered in
}

// handle answers one JSON-RPC message, or returns nil for notifications.
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
	req.version = s.version
	result, err := s.dispatch(req)
	return response(req, result, err)
}

// decodeRequest parses one JSON-RPC message. When ok is false the message
// is malformed and reply, which may be nil, is its whole answer.
func decodeRequest(raw json.RawMessage) (req request, reply any, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil || string(m["jsonrpc"]) != `"2.0"` {
		return req, errorResponse(nil, errInvalidRequest), false
	}
	if id, ok := m["id"]; ok && string(id) != "null" {
		if id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') {
			return req, errorResponse(nil, errInvalidRequest), false
		}
		req.id = id
	}
	if json.Unmarshal(m["method"], &req.method) != nil || len(m["method"]) == 0 || m["method"][0] != '"' {
		if req.id == nil {
			return req, nil, false
		}
		return req, errorResponse(req.id, errInvalidRequest), false
	}
	if p, ok := m["params"]; ok {
		req.params = p
	}
	return req, nil, true
}

// response is the answer to req: nil for a notification or a nil result.
func response(req request, result any, err *rpcError) any {
	if req.id == nil {
		return nil
	}
	if err != nil {
		return errorResponse(req.id, err)
	}
	if result == nil {
		return nil
	}
	return object{{"jsonrpc", "2.0"}, {"id", rawJSON(req.id)}, {"result", result}}
}

func errorResponse(id json.RawMessage, e *rpcError) object {
	var idv any
	if id != nil {
		idv = rawJSON(id)
	}
	return object{{"jsonrpc", "2.0"}, {"id", idv}, {"error", object{{"code", e.code}, {"message", e.message}}}}
}

// params decodes request params as an object; absent params are an empty
// object, anything else that is not an object is an error naming method.
func (req request) paramsObject() (toolArgs, *rpcError) {
	if req.params == nil {
		return toolArgs{values: map[string]json.RawMessage{}}, nil
	}
	a, ok := parseArgs(req.params)
	if !ok {
		return a, errInvalidParams(req.method + " params must be an object.")
	}
	return a, nil
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
		if typed(req.version) {
			return typedToolList, nil
		}
		return toolList, nil
	case "tools/call":
		return s.toolsCall(req)
	case "resources/list":
		if typed(req.version) {
			r, err := s.resourcesList()
			if err != nil {
				return nil, err
			}
			return typedResources(r.(object)), nil
		}
		return s.resourcesList()
	case "resources/templates/list":
		if typed(req.version) {
			return resourceTemplates, nil
		}
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
	s.version = answer
	return object{
		{"protocolVersion", answer},
		{"capabilities", serverCapabilities(answer)},
		{"serverInfo", serverInfo(answer)},
	}, nil
}

func (s *server) toolsCall(req request) (any, *rpcError) {
	p, perr := req.paramsObject()
	if perr != nil {
		return nil, perr
	}
	call, rerr := s.startCall(req.id, p)
	call.version = req.version
	if rerr != nil && call.args.values != nil && req.version >= revSEP {
		// From 2025-11-25 on, input validation failures are tool results.
		rerr = nil
	} else if rerr == nil {
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
	if typed(call.version) {
		return call.result.typedWire(), nil
	}
	return call.result.wire(), nil
}

func (s *server) resourcesList() (any, *rpcError) {
	var groups []groupMeta
	if err := retryBusy(func() (err error) { groups, err = s.store.listGroups(); return err }); err != nil {
		logf("resources/list: %v", err)
		return nil, errInternal
	}
	list := make([]any, len(groups))
	for i, g := range groups {
		list[i] = object{
			{"uri", groupURI(g.groupID)}, {"name", "Crosstalk " + g.groupID},
			{"description", "Group-change signal. A change may not be relevant to this AI; call get_unread_messages to check."},
			{"mimeType", "application/json"},
		}
	}
	return object{{"resources", list}}, nil
}

// resourceURI returns the uri param of a resources/* request.
func (req request) resourceURI() (string, *rpcError) {
	p, err := req.paramsObject()
	if err != nil {
		return "", err
	}
	if !p.has("uri") {
		return "", nil
	}
	uri, ok := p.str("uri")
	if !ok {
		return "", errInvalidParams("Invalid Crosstalk subscription URI.")
	}
	return uri, nil
}

// resourceError maps a domain or storage error of a resources/* request.
func resourceError(err error) *rpcError {
	var te *toolError
	if errors.As(err, &te) {
		return errInvalidParams(te.msg)
	}
	logf("resource request: %v", err)
	return errInternal
}

func (s *server) resourcesRead(req request) (any, *rpcError) {
	uri, rerr := req.resourceURI()
	if rerr != nil {
		return nil, rerr
	}
	var snapshot object
	err := retryBusy(func() error {
		if isWakeupURI(uri) {
			g, c, err := s.subs.authorizedWakeup(uri)
			if err != nil {
				return err
			}
			events, err := s.store.wakeups(g, c)
			if err != nil {
				return err
			}
			list := make([]any, len(events))
			for i, w := range events {
				list[i] = object{{"event_id", w.id}, {"message_id", w.messageID}, {"relevance", w.relevance}, {"priority", w.priority},
					{"created_at", w.createdAt}, {"acknowledged_at", w.acknowledgedAt}, {"last_notified_at", w.lastNotifiedAt}}
			}
			snapshot = object{{"group_id", g}, {"context_id", c}, {"wakeups", list}}
			return nil
		}
		g, err := parseGroupURI(uri)
		if err != nil {
			return err
		}
		count, latest, err := s.store.groupSnapshot(g)
		snapshot = object{{"group_id", g}, {"message_count", count}, {"latest_message_id", latest}}
		return err
	})
	if err != nil {
		return nil, resourceErrorFor(req.version, err)
	}
	return object{{"contents", []any{object{{"uri", uri}, {"mimeType", "application/json"}, {"text", pyJSON(snapshot)}}}}}, nil
}

func (s *server) resourcesSubscribe(req request) (any, *rpcError) {
	uri, rerr := req.resourceURI()
	if rerr != nil {
		return nil, rerr
	}
	if err := retryBusy(func() error { return s.subs.subscribe(uri) }); err != nil {
		return nil, resourceErrorFor(req.version, err)
	}
	return object{}, nil
}

// resourcesUnsubscribe stops a subscription. Unsubscribing a joined
// context's wakeup resource also leaves the group, as in the original.
func (s *server) resourcesUnsubscribe(req request) (any, *rpcError) {
	uri, rerr := req.resourceURI()
	if rerr != nil {
		return nil, rerr
	}
	if !isWakeupURI(uri) {
		s.subs.unsubscribe(uri)
		return object{}, nil
	}
	g, c, err := s.subs.authorizedWakeup(uri)
	if err == nil {
		err = retryBusy(func() error { return s.store.leaveGroup(g, c, "", false) })
	}
	if err != nil {
		return nil, resourceError(err)
	}
	s.subs.revoke(uri)
	return object{}, nil
}

// object is a JSON object that keeps its keys in insertion order, so results
// render like the original's json.dumps of a dict.
type object []field

// field is one key of an object.
type field struct {
	key   string
	value any
}

func (o object) get(key string) any {
	for _, f := range o {
		if f.key == key {
			return f.value
		}
	}
	return nil
}

// pyJSONWriter is a value that renders itself in a jsonStyle, for large
// results where building an object per item would dominate.
type pyJSONWriter interface {
	writePyJSON(b *strings.Builder, st jsonStyle)
}

// stringList is a JSON array of strings; nil renders as [].
type stringList []string

// rawJSON is JSON text written as it came, such as a request id.
type rawJSON json.RawMessage

// jsonStyle is one of the json.dumps configurations the original writes
// with. Keys keep their order; callers that need sort_keys sort first.
type jsonStyle struct {
	itemSep, keySep string
	ensureASCII     bool
}

var (
	// pyDumps is json.dumps(v): tool result text, resource text, every
	// line on stdout and the stored mentions and wakeup_targets lists.
	pyDumps = jsonStyle{itemSep: ", ", keySep: ": ", ensureASCII: true}
	// pyCompact is json.dumps(v, separators=(",", ":"), ensure_ascii=False),
	// the audit log's details_json.
	pyCompact = jsonStyle{itemSep: ",", keySep: ":"}
)

// pyJSON encodes v as the original's json.dumps(v) does. Agents, golden
// transcripts and other writers see this text byte for byte.
func pyJSON(v any) string { return pyDumps.encode(v) }

func (st jsonStyle) encode(v any) string {
	var b strings.Builder
	st.write(&b, v)
	return b.String()
}

func (st jsonStyle) write(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int:
		b.WriteString(strconv.Itoa(v))
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case *int64:
		if v == nil {
			b.WriteString("null")
		} else {
			b.WriteString(strconv.FormatInt(*v, 10))
		}
	case string:
		st.writeString(b, v)
	case *string:
		if v == nil {
			b.WriteString("null")
		} else {
			st.writeString(b, *v)
		}
	case rawJSON:
		var s string
		if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
			st.writeString(b, s) // re-escaped, as Python writes every string
		} else {
			b.Write(v)
		}
	case stringList:
		b.WriteByte('[')
		for i, s := range v {
			if i > 0 {
				b.WriteString(st.itemSep)
			}
			st.writeString(b, s)
		}
		b.WriteByte(']')
	case []any:
		b.WriteByte('[')
		for i, item := range v {
			if i > 0 {
				b.WriteString(st.itemSep)
			}
			st.write(b, item)
		}
		b.WriteByte(']')
	case object:
		b.WriteByte('{')
		for i, f := range v {
			if i > 0 {
				b.WriteString(st.itemSep)
			}
			st.writeString(b, f.key)
			b.WriteString(st.keySep)
			st.write(b, f.value)
		}
		b.WriteByte('}')
	case pyJSONWriter:
		v.writePyJSON(b, st)
	default:
		panic(fmt.Sprintf("pyJSON: unsupported type %T", v))
	}
}

const hexDigits = "0123456789abcdef"

// writeString writes s as a JSON string escaped as Python does: quotes,
// backslashes and control characters always, as \uXXXX in lowercase hex
// where there is no short form; with ensureASCII also DEL and every
// non-ASCII character, as surrogate pairs above the BMP.
func (st jsonStyle) writeString(b *strings.Builder, s string) {
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf && plainASCII[c] {
			i++
			continue
		}
		r, size := rune(c), 1
		if c >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		if !st.ensureASCII && (c == 0x7f || r >= utf8.RuneSelf && size > 1) {
			i += size
			continue
		}
		b.WriteString(s[start:i])
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case !st.ensureASCII:
				b.WriteRune(r) // an invalid byte, written as U+FFFD
			case r > 0xffff:
				r1, r2 := utf16.EncodeRune(r)
				writeU(b, r1)
				writeU(b, r2)
			default:
				writeU(b, r)
			}
		}
		i += size
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// plainASCII marks the bytes that json.dumps writes as they are.
var plainASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexDigits[r>>12&0xf])
	b.WriteByte(hexDigits[r>>8&0xf])
	b.WriteByte(hexDigits[r>>4&0xf])
	b.WriteByte(hexDigits[r&0xf])
}
