package main

import (
	"cmp"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// auditEvent is one tool_calls row plus the group-name snapshot stored beside it.
type auditEvent struct {
	occurredAt    string
	requestID     sql.NullString
	toolName      string
	groupID       sql.NullString
	contextID     sql.NullString
	name          sql.NullString
	outcome       string
	durationMS    int64
	resultCount   sql.NullInt64
	errorCategory sql.NullString
	detailsJSON   sql.NullString
	groupName     string
}

// auditDetailsMaxBytes is the original's cap on details_json, in bytes.
const auditDetailsMaxBytes = 2048

// auditBuildEvent turns a completed call into its row, but for the lookups
// in the group store that observe adds. Identity comes from the arguments;
// only a successful create_group takes its group from the result.
func auditBuildEvent(c toolCall, elapsed time.Duration) auditEvent {
	e := auditEvent{
		occurredAt: formatTimestamp(c.started),
		toolName:   truncateUTF8(c.name, auditValueMaxBytes), // an unknown tool's name is as unbounded as an id
		outcome:    "success",
		durationMS: max(0, int64(math.RoundToEven(float64(elapsed)/float64(time.Millisecond)))),
		groupName:  truncateUTF8(c.groupName, auditValueMaxBytes), // a name is as unbounded as an id
		requestID:  auditIdentity(auditRequestID(c.requestID)),
		groupID:    auditIdentity(auditArg(c.args, "group_id")),
		contextID:  auditIdentity(auditArg(c.args, "context_id")),
	}
	t := toolsByName[c.name]
	name, _ := auditArg(c.args, "caller_name")
	// A tool that requires "name" takes the caller's own label there.
	if pyStrip(name) == "" && t != nil && slices.Contains(t.required, "name") {
		name, _ = auditArg(c.args, "name")
	}
	name = pyStrip(name)
	e.name = auditIdentity(name, name != "")
	// Every tool result is an object; anything else has none of the keys.
	result, _ := c.result.value.(object)
	if c.result.isError {
		e.outcome = "error"
		e.errorCategory = auditNull(cmp.Or(c.result.category, categoryInternal), true)
	} else if c.name == "create_group" {
		if s, ok := result.get("group_id").(string); ok {
			e.groupID = auditNull(s, true)
		}
	}
	if n, ok := auditLen(result.get("messages")); ok {
		e.resultCount = sql.NullInt64{Int64: int64(n), Valid: true}
	}
	var details object
	if !c.result.isError && t != nil && t.auditDetails != nil {
		details = t.auditDetails(result)
	}
	// One HTTP server serves many machines and agents: say which one called
	// and whose token spoke (the token itself is never recorded).
	for _, f := range []field{{"remote_addr", c.remote}, {"token_name", c.token}} {
		if f.value != "" {
			details = append(append(object{}, details...), f)
		}
	}
	e.detailsJSON = auditNull(auditDetailsText(details))
	return e
}

// auditArg returns a string argument for an audit row; ok is false when it is
// absent or not valid Unicode, which is recorded as NULL, never altered.
func auditArg(args toolArgs, key string) (string, bool) {
	if s, ok := args.str(key); ok && unicodeJSON(args.values[key]) {
		return s, true
	}
	return "", false
}

// auditNull is s as a column value: NULL unless ok.
func auditNull(s string, ok bool) sql.NullString {
	return sql.NullString{String: s, Valid: ok}
}

// auditValueMaxBytes bounds an identity value, group name or tool name in the
// audit log: a megabyte one would otherwise fill its row, every rollup and
// index, and the queue.
const auditValueMaxBytes = 1 << 10

// auditIdentity is an identity value (request id, group_id, context_id,
// caller name) as recorded, cut at auditValueMaxBytes.
func auditIdentity(s string, ok bool) sql.NullString {
	return auditNull(truncateUTF8(s, auditValueMaxBytes), ok)
}

// auditLen returns the length of a list in each list type the tools build.
func auditLen(value any) (int, bool) {
	switch value := value.(type) {
	case []any:
		return len(value), true
	case stringList:
		return len(value), true
	}
	return 0, false
}

// auditRequestID renders a JSON-RPC id as the original's str() does: a string
// as-is, an integer as its digits, a fraction as a Python float. decodeRequest
// admits no other id, and passes it without the space around it.
func auditRequestID(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	if s, ok := decodeJSONString(raw); ok {
		return s, unicodeJSON(raw) // else NULL, not the id altered
	}
	return pyNumber(string(raw)), true
}

// auditDetailsText renders details as details_json; ok is false when there
// are none or they exceed the original's cap.
func auditDetailsText(details object) (string, bool) {
	if len(details) == 0 {
		return "", false
	}
	// The original writes json.dumps(details, sort_keys=True,
	// separators=(",", ":"), ensure_ascii=False).
	sorted := object(slices.SortedStableFunc(slices.Values(details), func(a, b field) int { return cmp.Compare(a.key, b.key) }))
	text := pyCompact.encode(sorted)
	if len(text) > auditDetailsMaxBytes {
		return "", false
	}
	return text, true
}

// auditCreatedGroup is create_group's details: the new group's id.
func auditCreatedGroup(result object) object {
	if s, ok := result.get("group_id").(string); ok {
		return object{{"created_group_id", s}}
	}
	return nil
}

// auditCount returns the details that count the list at key as name.
func auditCount(key, name string) func(object) object {
	return func(result object) object {
		if n, ok := auditLen(result.get(key)); ok {
			return object{{name, n}}
		}
		return nil
	}
}

// auditUpdatedFields is update_group_metadata's details: which of the
// metadata fields the result holds, possibly none (get's nil means absent:
// the values the detail functions look for are never nil).
func auditUpdatedFields(result object) object {
	fields := []any{}
	for _, f := range []string{"description", "name"} {
		if result.get(f) != nil {
			fields = append(fields, f)
		}
	}
	return object{{"updated_fields", fields}}
}

// auditCompleted is the details of a tool whose success is all there is to say.
func auditCompleted(object) object {
	return object{{"completed", true}}
}

// auditSentDetails is send_message's details: the message's id, priority
// and routing, and how many contexts it woke; never its text.
func auditSentDetails(result object) object {
	var details object
	for _, key := range []string{"message_id", "priority", "routing_reason"} {
		if v := result.get(key); v != nil {
			details = append(details, field{key, v})
		}
	}
	return append(details, auditCount("wakeup_targets", "wakeup_target_count")(result)...)
}

// pyNumber renders a JSON number literal as Python prints the value it
// decodes to: integers exactly ("-0" is "0"), other numbers as floats.
func pyNumber(lit string) string {
	if digits := strings.TrimPrefix(lit, "-"); digits != "" && strings.Trim(digits, "0123456789") == "" {
		if strings.TrimLeft(digits, "0") == "" {
			return "0"
		}
		return lit
	}
	// Beyond float64's range Python decodes an infinity; ParseFloat gives
	// one too, with ErrRange.
	if f, err := strconv.ParseFloat(lit, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		return pyFloatRepr(f)
	}
	return lit
}

// pyFloatRepr formats f like Python's repr(float): shortest digits, fixed
// notation with at least one decimal for exponents in [-4, 16).
func pyFloatRepr(f float64) string {
	if math.IsInf(f, 0) {
		return map[bool]string{true: "inf", false: "-inf"}[f > 0]
	}
	// Go's shortest 'e' form is Python's (two exponent digits at least);
	// only the exponents at which Python switches to it differ.
	s := strconv.FormatFloat(f, 'e', -1, 64)
	if exp, _ := strconv.Atoi(s[strings.IndexByte(s, 'e')+1:]); exp < -4 || exp >= 16 {
		return s
	}
	if s = strconv.FormatFloat(f, 'f', -1, 64); !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
