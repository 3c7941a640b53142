package main

// This file is the JSON-RPC 2.0 wire layer: decoding, encoding, line framing
// and batches. It knows no MCP methods: the session (jsonrpc_session.go)
// answers each message; batchRefusal (jsonrpc_dispatch.go) the batches.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"slices"
	"sync"
)

// rpcError is a JSON-RPC error object. It is a value, not an error: handlers
// return it beside their result, and nothing wraps or matches it.
type rpcError struct {
	code    int
	message string
}

// The JSON-RPC errors the server answers, with the original's messages.
var (
	errParse          = &rpcError{-32700, "Parse error"}
	errInvalidRequest = &rpcError{-32600, "Invalid Request"}
	errBatchInit      = &rpcError{-32600, "initialize must not be sent in a batch"}
	errInvalidInit    = &rpcError{-32600, "Invalid initialize request"}
	errNotInitialized = &rpcError{-32002, "Server is not initialized"}
	errInternal       = &rpcError{-32603, "Internal server error"}
)

// errInvalidParams answers a request whose params cannot be used.
func errInvalidParams(msg string) *rpcError {
	return &rpcError{-32602, "Invalid params: " + msg}
}

// request is a decoded JSON-RPC message.
type request struct {
	id      json.RawMessage // nil for a notification (absent or null id)
	method  string
	params  json.RawMessage  // nil when absent
	version protocolRevision // the revision this request is answered in
}

// decodeRequest parses one JSON-RPC message. When ok is false the message
// is malformed and reply, which may be nil, is its whole answer.
func decodeRequest(raw json.RawMessage) (req request, reply any, ok bool) {
	var m map[string]json.RawMessage
	if json.Valid(raw) {
		m, _ = splitObject(raw) // values stay in raw: see splitObject
	}
	if v, _ := decodeJSONString(m["jsonrpc"]); v != "2.0" { // the original compares the value
		return req, errorResponse(nil, errInvalidRequest), false
	}
	if id, ok := m["id"]; ok && string(id) != "null" {
		if id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') {
			return req, errorResponse(nil, errInvalidRequest), false
		}
		req.id = id
	}
	if req.method, ok = decodeJSONString(m["method"]); !ok {
		return req, response(req, nil, errInvalidRequest), false // nil for a notification
	}
	req.params = m["params"]
	return req, nil, true
}

// paramsObject decodes request params as an object; absent params are an empty
// object, anything else that is not an object is an error naming method.
func (req request) paramsObject() (toolArgs, *rpcError) {
	a, ok := parseArgs(req.params)
	if !ok {
		return a, errInvalidParams(req.method + " params must be an object.")
	}
	return a, nil
}

// response is the answer to req: nil for a notification or a nil result.
func response(req request, result any, err *rpcError) any {
	if req.id == nil || (result == nil && err == nil) {
		return nil
	}
	if err != nil {
		return errorResponse(req.id, err)
	}
	return object{{"jsonrpc", "2.0"}, {"id", rawJSON(req.id)}, {"result", result}}
}

// errorResponse is the answer carrying e; id is nil when it could not be read.
func errorResponse(id json.RawMessage, e *rpcError) object {
	var idv any
	if id != nil {
		idv = rawJSON(id)
	}
	return object{{"jsonrpc", "2.0"}, {"id", idv}, {"error", object{{"code", e.code}, {"message", e.message}}}}
}

// messageWriter is how a session's messages leave it: write for its own (the
// poller's), writeFor for an in-flight request id's (answer marks its answer, nil a cancel),
// so that a transport routes them unread. It must be safe for concurrent use.
type messageWriter interface {
	write(msg any) error
	writeFor(id json.RawMessage, msg any, answer bool) error
}

// lineWriter writes one JSON-RPC message per line. Its lock keeps responses
// and poller notifications from interleaving within a line.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// write writes v as one line and flushes it, so that each answer leaves at once.
func (w *lineWriter) write(v any) error {
	line := pyJSON(v)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.w.WriteString(line)
	w.w.WriteByte('\n')
	return w.w.Flush()
}

// writeFor writes v as write does (stdio has one stream); nil is no message.
func (w *lineWriter) writeFor(_ json.RawMessage, v any, _ bool) error {
	if v == nil {
		return nil
	}
	return w.write(v)
}

// handleLine answers one line: a request, a notification or a batch. It
// returns nil when nothing is to be written.
func (s *server) handleLine(line []byte) any {
	trimmed := bytes.Trim(line, " \t\r\n") // JSON's whitespace only, as json.loads
	if !json.Valid(trimmed) {
		return errorResponse(nil, errParse)
	}
	if trimmed[0] != '[' {
		return s.handle(trimmed)
	}
	var batch []json.RawMessage
	if json.Unmarshal(trimmed, &batch); len(batch) == 0 { // valid, so an array
		return errorResponse(nil, errInvalidRequest)
	}
	if e := s.batchRefusal(batch); e != nil {
		return errorResponse(nil, e)
	}
	replies := slices.DeleteFunc(mapSlice(batch, s.handle), func(r any) bool { return r == nil }) // notifications have none
	if len(replies) == 0 {
		return nil
	}
	return replies
}
