package main

import (
	"encoding/json"
	"slices"
)

// tool is one MCP tool: its wire definition, the function that runs it and
// what the audit log records of it. toolList adds the audit-only caller_name.
type tool struct {
	name        string
	description string
	properties  object // property name → JSON schema, in schema order
	required    []string
	call        func(s *server, a toolArgs) (any, error)

	// auditDetails returns the allowlisted, content-free summary of a
	// successful result that the audit log records; nil means none.
	auditDetails func(result object) object

	// wait, instead of call, runs a tool that may block for long on the
	// session's in-flight table (tools_wait.go), so the session answers
	// other requests meanwhile.
	wait func(s *server, a toolArgs, r *inflightRequest) (any, error)
}

// toolResult is a completed tool call: the JSON value of its text content,
// whether it failed, and the failure's category.
type toolResult struct {
	value    any
	isError  bool
	category string
}

// wire renders r as an MCP CallToolResult for rev. From 2025-06-18 on it
// also carries the object as structuredContent, and join_group's wakeup URI
// as a resource_link.
func (r toolResult) wire(rev protocolRevision) object {
	content := []any{object{{"type", "text"}, {"text", pyJSON(r.value)}}}
	if rev < revTyped {
		return object{{"content", content}, {"isError", r.isError}}
	}
	if o, ok := r.value.(object); ok && !r.isError {
		if uri, ok := o.get("wakeup_resource_uri").(string); ok {
			content = append(content, object{{"type", "resource_link"}, {"uri", uri}, {"name", "wakeups"},
				{"title", "Wakeups for this context"}, {"description", wakeupDescription}, {"mimeType", "application/json"}})
		}
	}
	return object{{"content", content}, {"structuredContent", r.value}, {"isError", r.isError}}
}

// The property schemas several tools share.
var (
	groupIDProp   = object{{"type", "string"}, {"description", "The target Crosstalk group ID."}}
	contextIDProp = object{{"type", "string"}, {"description", "Stable, unique identifier for the calling AI context/session. Use your actual resumable context ID verbatim; for example, Codex exposes this in CODEX_THREAD_ID. Never invent an ID."}}
	callerLabel   = object{{"type", "string"}, {"description", "Human-readable caller label or role, used for logging (for example, 'architect')."}}
	groupNameProp = object{{"type", "string"}, {"description", "Human-readable group name."}}
	groupDescProp = object{{"type", "string"}, {"description", "Optional description of the group's purpose."}}
	identityProps = object{
		{"group_id", groupIDProp},
		{"context_id", contextIDProp},
		{"name", callerLabel},
	}
	identityReq = []string{"group_id", "context_id", "name"}
)

// withProps returns base followed by more, leaving base as it was.
func withProps(base object, more ...field) object {
	return append(append(object{}, base...), more...)
}

// tools lists the original's 14 tools in its order, with its names,
// descriptions and schemas, one schema property per line, and then this
// port's wait_for_messages (a deliberate deviation: testdata/golden/README.md).
var tools = []tool{
	{
		name:        "create_group",
		description: "Create a new Crosstalk group and return its ID. The creating context is the only context allowed to update its metadata or delete it. A name and description can be supplied as metadata.",
		properties: object{
			{"context_id", contextIDProp},
			{"name", groupNameProp},
			{"description", groupDescProp},
		},
		required:     []string{"context_id"},
		call:         toolCreateGroup,
		auditDetails: auditCreatedGroup,
	},
	{
		name:         "list_groups",
		description:  "List all groups and their metadata stored in the shared cache directory.",
		properties:   object{},
		call:         toolListGroups,
		auditDetails: auditCount("groups", "group_count"),
	},
	{
		name:        "get_group_metadata",
		description: "Return a group's name, description, and timestamps.",
		properties: object{
			{"group_id", groupIDProp},
		},
		required: []string{"group_id"},
		call:     toolGetGroupMetadata,
	},
	{
		name:        "update_group_metadata",
		description: "Update a group's name and/or description. Only the creating context may update metadata.",
		properties: object{
			{"group_id", groupIDProp},
			{"name", groupNameProp},
			{"description", groupDescProp},
			{"context_id", contextIDProp},
		},
		required:     []string{"group_id", "context_id"},
		call:         toolUpdateGroupMetadata,
		auditDetails: auditUpdatedFields,
	},
	{
		name:        "get_users",
		description: "List current group members.",
		properties: object{
			{"group_id", groupIDProp},
		},
		required:     []string{"group_id"},
		call:         toolGetUsers,
		auditDetails: auditCount("users", "member_count"),
	},
	{
		name:        "delete_group",
		description: "Permanently delete a group's SQLite database and all of its message history. Only the creating context may delete it.",
		properties: object{
			{"group_id", object{{"type", "string"}, {"description", "The group ID to permanently delete."}}},
			{"context_id", contextIDProp},
		},
		required:     []string{"group_id", "context_id"},
		call:         toolDeleteGroup,
		auditDetails: auditCompleted,
	},
	{
		name:         "join_group",
		description:  "Join a group. A context must join before it can send, retrieve messages, or subscribe to wakeups.",
		properties:   identityProps,
		required:     identityReq,
		call:         toolJoinGroup,
		auditDetails: auditCompleted,
	},
	{
		name:         "leave_group",
		description:  "Leave a group and remove this context's wakeup subscription and pending wake events.",
		properties:   identityProps,
		required:     identityReq,
		call:         toolLeaveGroup,
		auditDetails: auditCompleted,
	},
	{
		name:         "get_all_messages",
		description:  "Return the complete history of the supplied group.",
		properties:   identityProps,
		required:     identityReq,
		call:         toolGetAllMessages,
		auditDetails: auditCount("messages", "message_count"),
	},
	{
		name:         "get_latest_messages",
		description:  "Return messages after the supplied context_id's latest sent message. Before it has sent a message, returns the full history.",
		properties:   identityProps,
		required:     identityReq,
		call:         toolGetLatestMessages,
		auditDetails: auditCount("messages", "message_count"),
	},
	{
		name:         "get_unread_messages",
		description:  "Return messages this context_id has not previously retrieved. All returned messages are marked as read by that context.",
		properties:   identityProps,
		required:     identityReq,
		call:         toolGetUnreadMessages,
		auditDetails: auditCount("messages", "message_count"),
	},
	{
		name:        "get_messages_after",
		description: "Return messages with an ID after after_message_id and mark them read for this context.",
		properties: withProps(identityProps,
			field{"after_message_id", object{{"type", "integer"}, {"minimum", 0}, {"description", "Return messages with IDs greater than this value."}}},
		),
		required:     append(identityReq[:3:3], "after_message_id"),
		call:         toolGetMessagesAfter,
		auditDetails: auditCount("messages", "message_count"),
	},
	{
		name:        "search_messages",
		description: "Case-insensitively search message text in a group and mark matching messages read for this context. The query uses SQL LIKE wildcards: % matches any sequence and _ matches one character.",
		properties: withProps(identityProps,
			field{"query", object{{"type", "string"}, {"description", "Search pattern. SQL LIKE wildcards are supported: % matches any sequence and _ matches one character."}}},
		),
		required:     append(identityReq[:3:3], "query"),
		call:         toolSearchMessages,
		auditDetails: auditCount("messages", "message_count"),
	},
	{
		name:        "send_message",
		description: "Send a message to the supplied group as the supplied AI context. Use @context_id, @name, @all, or wake_context_ids for routing; otherwise every other joined context is targeted. Unknown wake_context_ids are ignored; if none are valid, normal routing is used.",
		properties: withProps(identityProps,
			field{"message", object{{"type", "string"}, {"description", "Message body to send."}}},
			field{"priority", object{{"type", "string"}, {"enum", []any{"low", "normal", "high", "urgent"}}, {"default", "normal"}, {"description", "Message priority."}}},
			field{"wake_context_ids", object{{"type", "array"}, {"items", object{{"type", "string"}}}, {"description", "Optional explicit context IDs to wake. Unknown IDs are ignored."}}},
		),
		required:     append(identityReq[:3:3], "message"),
		call:         toolSendMessage,
		auditDetails: auditSentDetails,
	},
	{
		name:        "wait_for_messages",
		description: waitForMessagesDescription,
		properties: withProps(identityProps,
			field{"timeout_seconds", object{{"type", "number"}, {"minimum", 0}, {"maximum", maxWaitSeconds}, {"default", defaultWaitSeconds},
				{"description", "How long to wait for a message, in seconds (at most 50; default 25)."}}},
		),
		required:     identityReq,
		wait:         toolWaitForMessages,
		auditDetails: auditCount("messages", "message_count"),
	},
}

var toolsByName = func() map[string]*tool {
	m := map[string]*tool{}
	for i := range tools {
		m[tools[i].name] = &tools[i]
	}
	return m
}()

// toolArgs are a tools/call's arguments, keyed exactly as sent: JSON keys are
// case-sensitive, so "Context_ID" never stands in for context_id.
type toolArgs struct {
	raw    json.RawMessage // the object as sent
	values map[string]json.RawMessage
	// stateless is set for a 2026-07-28 request, which belongs to no
	// session: a handler keeps no subscription or authorization for it.
	stateless bool
	// maxMessageBytes and tokenName are serverConfig's, for parseSend.
	maxMessageBytes int
	tokenName       string
}

// parseArgs decodes a valid JSON object; absent (nil) raw is an empty one.
// ok is false when raw is anything else.
func parseArgs(raw json.RawMessage) (a toolArgs, ok bool) {
	if a.values, ok = splitObject(raw); !ok { // values stay in raw: see splitObject
		return toolArgs{values: map[string]json.RawMessage{}}, raw == nil
	}
	a.raw = raw
	return a, true
}

// firstSent returns the first argument, in the order sent, for which bad
// holds. Only error messages need that order, so the map is checked first
// and the order read again from raw only when some argument is bad.
func (a toolArgs) firstSent(bad func(key string) bool) (string, bool) {
	for k := range a.values {
		if bad(k) {
			var keys []string
			eachMember(a.raw, func(key string, _ json.RawMessage) { keys = append(keys, key) })
			return keys[slices.IndexFunc(keys, bad)], true
		}
	}
	return "", false
}

func (a toolArgs) has(key string) bool { _, ok := a.values[key]; return ok }

// str returns the argument as a string; ok is false when it is absent or
// not a JSON string.
func (a toolArgs) str(key string) (v string, ok bool) {
	return decodeJSONString(a.values[key])
}

// isNull reports whether the argument is absent or JSON null, which the
// original treats alike for optional arguments.
func (a toolArgs) isNull(key string) bool {
	return a.values[key] == nil || string(a.values[key]) == "null"
}

// nonEmpty returns a string argument that must contain more than
// whitespace, failing with the original's "<key> must be a non-empty string."
func (a toolArgs) nonEmpty(key string) (string, error) {
	v, ok := a.str(key)
	if !ok || isBlank(v) {
		return "", validationErrorf("%s must be a non-empty string.", key)
	}
	return v, nil
}

// identity checks context_id and name in the original's order.
func (a toolArgs) identity() (contextID, name string, err error) {
	if contextID, err = a.nonEmpty("context_id"); err != nil {
		return "", "", err
	}
	name, err = a.nonEmpty("name")
	return contextID, name, err
}

// groupID returns group_id; a non-string becomes "", which the store rejects
// as "Invalid group_id." at the point the original does.
func (a toolArgs) groupID() string {
	v, _ := a.str("group_id")
	return v
}

// checkArgs rejects unknown arguments and missing required ones before a
// tool runs; the original leaks Python's TypeError text here instead.
func (t *tool) checkArgs(a toolArgs) *domainError {
	if k, ok := a.firstSent(func(k string) bool { return k != "caller_name" && t.properties.get(k) == nil }); ok {
		return validationErrorf("Unknown argument: %s", k)
	}
	for _, k := range t.required {
		if !a.has(k) {
			return validationErrorf("Missing required input: %s", k)
		}
	}
	if k, ok := a.firstSent(func(k string) bool { return !unicodeJSON(a.values[k]) }); ok {
		return validationErrorf("%s must be valid Unicode text: it contains a lone surrogate or invalid UTF-8.", k)
	}
	return nil
}

// run runs t on arguments prepareCall accepted, retrying the whole call
// while SQLite is busy (busyRetryWindow says why) and its request lasts.
func (t *tool) run(s *server, a toolArgs) toolResult {
	var value any
	err := retryBusyContext(s.request, func() (err error) {
		value, err = t.call(s, a)
		return err
	})
	return t.result(value, err)
}

// result is the outcome of a call of t: every error a handler returns is a
// tool error (an isError result), never a JSON-RPC one.
func (t *tool) result(value any, err error) toolResult {
	if err != nil {
		return failure(classify(t.name, err))
	}
	return toolResult{value: value}
}

// failure is the isError result that reports de to the agent.
func failure(de *domainError) toolResult {
	return toolResult{value: object{{"error", de.msg}}, isError: true, category: de.category}
}
