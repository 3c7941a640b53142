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

// dispatchRequest runs a request that needs no lifecycle, in any revision,
// rendered for req.version. Subscriptions are a session's, so 2026-07-28
// has none (subscriptions/listen instead).
func (s *server) dispatchRequest(req request) (any, *rpcError) {
	switch req.method {
	case "tools/list":
		if typed(req.version) {
			return typedToolList, nil
		}
		return toolList, nil
	case "tools/call":
		return s.toolsCall(req)
	case "resources/list":
		return s.resourcesList(req.version)
	case "resources/templates/list":
		if typed(req.version) {
			return resourceTemplates, nil
		}
	case "resources/read":
		return s.resourcesRead(req)
	case "resources/subscribe":
		if req.version < revModern {
			return s.resourcesSubscribe(req)
		}
	case "resources/unsubscribe":
		if req.version < revModern {
			return s.resourcesUnsubscribe(req)
		}
	}
	return nil, errMethodNotFound(req.method)
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

// cacheHint is 2026-07-28's ttlMs and cacheScope on a cacheable result.
type cacheHint struct {
	ttlMs int64
	scope string
}

var (
	// staticCache covers what only a new binary changes: the tool list, the
	// templates and server/discover.
	staticCache = &cacheHint{3_600_000, "public"}
	// liveCache covers group data, which another process may change at any
	// moment: clients (the Go SDK and TS v2 cache by ttlMs) must re-read.
	liveCache = &cacheHint{0, "private"}
)

// modernResult completes a 2026-07-28 result: resultType, the cache hint of
// a cacheable result, and serverInfo in _meta.
func (s *server) modernResult(result object, cache *cacheHint) object {
	out := append(object{}, result...)
	out = append(out, field{"resultType", "complete"})
	if cache != nil {
		out = append(out, field{"ttlMs", cache.ttlMs}, field{"cacheScope", cache.scope})
	}
	return append(out, field{"_meta", object{{metaServerInfo, s.serverInfo(revModern)}}})
}

// serverCapabilities is what the server offers in rev.
func serverCapabilities(rev protocolRevision) object {
	if rev >= revModern {
		return object{{"tools", object{}}, {"resources", object{{"subscribe", true}}}}
	}
	return object{{"tools", object{}}, {"resources", object{{"subscribe", true}, {"listChanged", false}}}}
}

// handleModern answers a request that carries 2026-07-28's per-request
// _meta, statelessly: nothing of an initialize is needed or consulted. It
// returns the whole answer, or nil when nothing is to be written now.
func (s *server) handleModern(req request, meta requestMeta) any {
	if req.id == nil {
		return nil // notifications are handled by dispatchNotification
	}
	if meta.protocolVersion != revModern {
		return unsupportedVersion(req.id, meta.protocolVersion)
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
var modernCache = map[string]*cacheHint{"tools/list": staticCache, "resources/templates/list": staticCache,
	"resources/list": liveCache, "resources/read": liveCache}

// dispatchNotification handles client notifications common to every era;
// it reports whether method was one of them.
func (s *server) dispatchNotification(req request) bool {
	if req.method != "notifications/cancelled" || req.id != nil {
		return false
	}
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if req.params != nil && json.Unmarshal(req.params, &p) == nil && len(p.RequestID) > 0 {
		s.inflight.cancel(p.RequestID)
	}
	return true
}
