package main

import "strings"

// Only a tools/call's context_id argument is identity, checked by
// serverConfig.speaksFor in prepareCall: wake_context_ids name whom to wake,
// not who speaks, and a context_id that is not a string is left to the
// tool's own validation.

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
