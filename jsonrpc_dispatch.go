package main

import "slices"

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
