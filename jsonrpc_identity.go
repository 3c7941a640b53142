package main

import "strings"

// contextPatterns are the context ids one identity may speak as: each is an
// exact id, or a prefix ending in '*' ("ci-*"; "*" alone admits every id).
type contextPatterns []string

// allow reports whether id matches one of the patterns.
func (p contextPatterns) allow(id string) bool {
	for _, pattern := range p {
		if prefix, wild := strings.CutSuffix(pattern, "*"); (wild && strings.HasPrefix(id, prefix)) || pattern == id {
			return true
		}
	}
	return false
}

// refuseSpeaker is the one identity check of a tools/call, on every
// transport: it returns the authorization error for a context_id this
// session may not speak as, or nil. Only context_id is identity:
// wake_context_ids name whom to wake, not who speaks. A context_id that is
// not a string is left to the tool's own validation.
func (c serverConfig) refuseSpeaker(args toolArgs) *domainError {
	id, ok := args.str("context_id")
	if !ok || c.speaksFor == nil {
		return nil
	}
	return c.speaksFor(id)
}

// pinnedSpeaker is speaksFor for a stdio server started with
// CROSSTALK_CONTEXT_ID=pinned: its client speaks as that context only.
func pinnedSpeaker(pinned string) func(string) *domainError {
	return func(id string) *domainError {
		if id == pinned {
			return nil
		}
		return authorizationErrorf("This server is pinned to CROSSTALK_CONTEXT_ID %s and may not act as context_id %s.", pinned, id)
	}
}
