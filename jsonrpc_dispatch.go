package main

import (
	"encoding/json"
	"slices"
)

// dispatch runs one request of a session and returns its result, an error,
// or (nil, nil) when nothing is to be answered.
func (s *server) dispatch(req request) (any, *rpcError) {
	switch req.method {
	case "initialize":
		return s.initialize(req)
	case "notifications/initialized":
		s.life.Lock()
		s.ready = s.initialized
		s.life.Unlock()
		return nil, nil
	case "ping":
		return object{}, nil
	}
	if _, ready := s.lifecycle(); !ready {
		return nil, errNotInitialized
	}
	if req.id == nil {
		return nil, nil
	}
	return s.dispatchRequest(req)
}

// dispatchRequest runs a request that needs no lifecycle, rendered for
// req.version; 2026-07-28 subscribes by subscriptions/listen instead.
func (s *server) dispatchRequest(req request) (any, *rpcError) {
	switch req.method {
	case "tools/list":
		if req.version >= revTyped {
			return typedToolList, nil
		}
		return toolList, nil
	case "tools/call":
		return s.toolsCall(req)
	case "resources/list":
		return s.resourcesList(req.version)
	case "resources/templates/list":
		if req.version >= revTyped {
			return resourceTemplates, nil
		}
	case "resources/read":
		return withResourceURI(req, s.resourcesRead)
	case "resources/subscribe":
		if req.version < revModern {
			return withResourceURI(req, s.resourcesSubscribe)
		}
	case "resources/unsubscribe":
		if req.version < revModern {
			return withResourceURI(req, s.resourcesUnsubscribe)
		}
	}
	return nil, &rpcError{-32601, "Method not found: " + req.method}
}

// initialize negotiates the protocol version and states the capabilities.
func (s *server) initialize(req request) (any, *rpcError) {
	s.life.Lock()
	defer s.life.Unlock()
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
	caps := serverCapabilities(answer)
	result := object{{"protocolVersion", answer}, {"capabilities", caps}, {"serverInfo", s.serverInfo(answer)}}
	if s.cfg.channels {
		result[1].value = append(caps, channelCapability)
		result = append(result, field{"instructions", channelInstructions})
	}
	return result, nil
}

// staticCache and liveCache are 2026-07-28's cache hints: staticCache covers
// what only a new binary changes (tools, templates, server/discover);
// liveCache covers group data, which another process may change at any
// moment (the Go SDK and TS v2 cache by ttlMs).
var (
	staticCache = object{{"ttlMs", 3_600_000}, {"cacheScope", "public"}}
	liveCache   = object{{"ttlMs", 0}, {"cacheScope", "private"}}
)

// modernResult completes a 2026-07-28 result: resultType, the cache hint of
// a cacheable result (nil for none), and serverInfo in _meta.
func (s *server) modernResult(result, cache object) object {
	out := withProps(result, field{"resultType", "complete"})
	out = append(out, cache...)
	return append(out, field{"_meta", object{{metaServerInfo, s.serverInfo(revModern)}}})
}

// serverCapabilities is what the server offers in rev.
func serverCapabilities(rev protocolRevision) object {
	resources := object{{"subscribe", true}}
	if rev < revModern {
		resources = append(resources, field{"listChanged", false})
	}
	return object{{"tools", object{}}, {"resources", resources}}
}

// handleModern answers a request that carries 2026-07-28's per-request _meta,
// consulting nothing of an initialize; nil when nothing is to be written now.
func (s *server) handleModern(req request, meta requestMeta) any {
	if req.id == nil {
		return nil // notifications are handled by dispatchNotification
	}
	if meta.protocolVersion != revModern { // UnsupportedProtocolVersionError
		return object{{"jsonrpc", "2.0"}, {"id", rawJSON(req.id)}, {"error", object{{"code", -32022}, {"message", "Unsupported protocol version"},
			{"data", object{{"supported", allProtocolVersions}, {"requested", meta.protocolVersion}}}}}}
	}
	if !meta.hasCapabilities {
		return errorResponse(req.id, errInvalidParams("_meta "+metaClientCapabilities+" is required."))
	}
	req.version = revModern
	switch req.method {
	case "server/discover":
		return response(req, s.modernResult(object{{"supportedVersions", allProtocolVersions}, {"capabilities", serverCapabilities(revModern)},
			{"instructions", "Create or join a group, then send and read messages; listen on your wakeup URI to be woken."}}, staticCache), nil)
	case "subscriptions/listen":
		return response(req, nil, s.listen(req, meta)) // nil once it runs
	}
	r, rerr := s.dispatchRequest(req)
	if rerr != nil || r == nil { // r is nil for a waiting tool: it answers from the in-flight table
		return response(req, nil, rerr)
	}
	return response(req, s.modernResult(r.(object), modernCache[req.method]), nil)
}

// modernCache is each cacheable method's hint; tools/call has none.
var modernCache = map[string]object{"tools/list": staticCache, "resources/templates/list": staticCache,
	"resources/list": liveCache, "resources/read": liveCache}

// dispatchNotification handles notifications/cancelled and reports whether req was one.
func (s *server) dispatchNotification(req request) bool {
	if req.method != "notifications/cancelled" || req.id != nil {
		return false
	}
	if p, _ := splitObject(req.params); len(p["requestId"]) > 0 {
		s.inflight.cancel(p["requestId"])
	}
	return true
}

// protocolRevision is a revision string; being dates, revisions compare as strings.
type protocolRevision = string

// The revisions whose behaviour differs; see docs/protocol.md "Protocol revisions".
const (
	revTyped  protocolRevision = "2025-06-18" // titles, outputSchema, structuredContent; no batches
	revSEP    protocolRevision = "2025-11-25" // input validation failures as tool results; serverInfo description
	revModern protocolRevision = "2026-07-28" // stateless: per-request _meta, server/discover, subscriptions/listen
)

// Keys of the per-request and per-result _meta fields of 2026-07-28.
const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaServerInfo         = "io.modelcontextprotocol/serverInfo"
	metaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
)

// supportedProtocolVersions are the revisions initialize negotiates, newest
// first; a client's other version gets the newest.
var supportedProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// allProtocolVersions are every revision this server speaks, newest first.
var allProtocolVersions = append(stringList{revModern}, supportedProtocolVersions...)

const (
	serverTitle       = "Crosstalk"
	serverDescription = "Shared message groups through which AI agents talk to each other and wake each other up."
	serverWebsite     = "https://github.com/crosstalk/crosstalk-mcp"
	wakeupDescription = "Wakeup events for one joined context: subscribe to be told when a message targets it."
)

// serverInfo is the Implementation object for rev: name and release, a
// title from 2025-06-18, a description and website from 2025-11-25.
func (s *server) serverInfo(rev protocolRevision) object {
	info := object{{"name", "crosstalk"}}
	if rev >= revTyped {
		info = append(info, field{"title", serverTitle})
	}
	info = append(info, field{"version", s.cfg.release})
	if rev >= revSEP {
		info = append(info, field{"description", serverDescription}, field{"websiteUrl", serverWebsite})
	}
	return info
}

// requestMeta is what a request carries in params._meta.
type requestMeta struct {
	protocolVersion string
	hasVersion      bool // the protocolVersion key is present: a 2026-07-28-era request
	hasCapabilities bool
	progressToken   json.RawMessage
}

// readRequestMeta reads params._meta of valid JSON params; what is absent is zero.
func readRequestMeta(params json.RawMessage) requestMeta {
	var m requestMeta
	p, _ := splitObject(params)
	meta, _ := splitObject(p["_meta"])
	if raw, ok := meta[metaProtocolVersion]; ok {
		m.hasVersion = true
		m.protocolVersion, _ = decodeJSONString(raw)
	}
	caps := meta[metaClientCapabilities]
	m.hasCapabilities = len(caps) > 0 && caps[0] == '{'
	if raw := meta["progressToken"]; len(raw) > 0 && (raw[0] == '"' || raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		m.progressToken = raw
	}
	return m
}

// errResourceNotFound is 2025-06-18's and 2025-11-25's resource-not-found
// code (other revisions use -32602). It is errNotInitialized's number too:
// the message tells them apart.
const errResourceNotFound = -32002

// batchRefusal is the error a whole batch gets, or nil when the session
// accepts it: MCP never allows initialize in a batch, and 2025-06-18 and
// later (negotiated, or carried by an item's _meta) have no batches.
func (s *server) batchRefusal(batch []json.RawMessage) *rpcError {
	if version, _ := s.lifecycle(); version >= revTyped {
		return errInvalidRequest
	}
	for _, item := range batch {
		switch msg := readHTTPMessage(item); {
		case msg.Method == "initialize":
			return errBatchInit
		case msg.Method == "tools/call" && toolsByName[msg.Name] != nil && toolsByName[msg.Name].wait != nil:
			// A waiting tool is answered later, and a batch's answer is one array.
			return &rpcError{-32600, msg.Name + " must not be sent in a batch; send it alone"}
		case msg.Meta.hasVersion:
			return errInvalidRequest
		}
	}
	return nil
}

// resourceTemplates are the group, wakeup and receipts URI templates.
var resourceTemplates = object{{"resourceTemplates", []any{
	object{{"uriTemplate", uriPrefix + "{group_id}" + uriSuffix}, {"name", "group-messages"}, {"title", "Group change signal"},
		{"description", "Changes whenever a message is sent to the group; read get_unread_messages to see whether it concerns you."},
		{"mimeType", "application/json"}},
	object{{"uriTemplate", uriPrefix + "{group_id}" + wakeupSegment + "{context_id}"}, {"name", "context-wakeups"}, {"title", "Wakeups for a context"},
		{"description", wakeupDescription + " Only a joined context may read or subscribe."}, {"mimeType", "application/json"}},
	object{{"uriTemplate", uriPrefix + "{group_id}" + receiptsSegment + "{context_id}"}, {"name", "context-receipts"}, {"title", "Receipts for a context"},
		{"description", "How far the context's newest messages got with each recipient: unread, notified, delivered (by hook, wait, tool or channel) or read. Only a joined context may read it."},
		{"mimeType", "application/json"}},
}}}
