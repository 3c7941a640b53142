package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"sort"
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

// auditToolFacts is what the audit log records about one tool beyond its
// arguments and outcome. Its fields are meant for the tool table (tools.go),
// next to the handler whose result they read; until then this table is
// keyed by tool name.
type auditToolFacts struct {
	// nameIsCaller is set when the tool's "name" argument is the caller's
	// own label, and so a fallback for a missing caller_name.
	nameIsCaller bool
	// details returns the allowlisted, content-free summary of a successful
	// result, in any order; nil or empty means none.
	details func(result object) object
}

// auditTools are the original's audit facts for each tool; a tool missing
// here records no details and has no caller name in "name".
var auditTools = map[string]auditToolFacts{
	"create_group":          {details: auditCreatedGroup},
	"list_groups":           {details: auditCount("groups", "group_count")},
	"update_group_metadata": {details: auditUpdatedFields},
	"get_users":             {details: auditCount("users", "member_count")},
	"delete_group":          {details: auditCompleted},
	"join_group":            {nameIsCaller: true, details: auditCompleted},
	"leave_group":           {nameIsCaller: true, details: auditCompleted},
	"get_all_messages":      {nameIsCaller: true, details: auditCount("messages", "message_count")},
	"get_latest_messages":   {nameIsCaller: true, details: auditCount("messages", "message_count")},
	"get_unread_messages":   {nameIsCaller: true, details: auditCount("messages", "message_count")},
	"get_messages_after":    {nameIsCaller: true, details: auditCount("messages", "message_count")},
	"search_messages":       {nameIsCaller: true, details: auditCount("messages", "message_count")},
	"send_message":          {nameIsCaller: true, details: auditSentDetails},
}

// auditBuildEvent turns a completed call into its row, before the lookups
// that need the group store (member-name fallback, group-name snapshot).
// Identity comes from the arguments; only a successful create_group takes
// its group from the result.
func auditBuildEvent(c toolCall, elapsed time.Duration) auditEvent {
	e := auditEvent{
		occurredAt: formatTimestamp(c.started),
		toolName:   c.name,
		outcome:    "success",
		durationMS: max(0, int64(math.RoundToEven(float64(elapsed)/float64(time.Millisecond)))),
		groupName:  c.groupName,
	}
	if id, ok := auditRequestID(c.requestID); ok {
		e.requestID = sql.NullString{String: id, Valid: true}
	}
	if s, ok := c.args.str("group_id"); ok {
		e.groupID = sql.NullString{String: s, Valid: true}
	}
	if s, ok := c.args.str("context_id"); ok {
		e.contextID = sql.NullString{String: s, Valid: true}
	}
	name, _ := c.args.str("caller_name")
	if pyStrip(name) == "" && auditTools[c.name].nameIsCaller {
		name, _ = c.args.str("name")
	}
	if name = pyStrip(name); name != "" {
		e.name = sql.NullString{String: name, Valid: true}
	}
	// Every tool result is an object; anything else has none of the keys.
	result, _ := c.result.value.(object)
	if c.result.isError {
		e.outcome = "error"
		category := c.result.category
		if category == "" {
			category = categoryInternal
		}
		e.errorCategory = sql.NullString{String: category, Valid: true}
	} else if c.name == "create_group" {
		if s, ok := auditResultString(result, "group_id"); ok {
			e.groupID = sql.NullString{String: s, Valid: true}
		}
	}
	if n, ok := auditResultLen(result, "messages"); ok {
		e.resultCount = sql.NullInt64{Int64: int64(n), Valid: true}
	}
	var details object
	if !c.result.isError {
		details = auditResultDetails(c.name, result)
	}
	if c.remote != "" {
		// One HTTP server serves many machines: say which one called.
		details = append(append(object{}, details...), field{"remote_addr", c.remote})
	}
	if text, ok := auditDetailsText(details); ok {
		e.detailsJSON = sql.NullString{String: text, Valid: true}
	}
	return e
}

// auditResultField returns a key of a tool result.
func auditResultField(result object, key string) (any, bool) {
	for _, f := range result {
		if f.key == key {
			return f.value, true
		}
	}
	return nil, false
}

// auditResultString returns a string-valued key of a tool result.
func auditResultString(result object, key string) (string, bool) {
	value, _ := auditResultField(result, key)
	s, ok := value.(string)
	return s, ok
}

// auditResultLen returns the length of a list-valued key of a tool result,
// in each list type the tools build.
func auditResultLen(result object, key string) (int, bool) {
	value, _ := auditResultField(result, key)
	switch value := value.(type) {
	case []any:
		return len(value), true
	case stringList:
		return len(value), true
	case messageList:
		return len(value), true
	}
	return 0, false
}

// auditString reports the value of a JSON string.
func auditString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// auditRequestID renders a JSON-RPC id as the original's str() does: a string
// as-is, an integer as its digits, a fraction as a Python float.
func auditRequestID(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	if s, ok := auditString(raw); ok {
		return s, true
	}
	switch string(raw) {
	case "true":
		return "True", true
	case "false":
		return "False", true
	}
	return pyNumber(string(raw)), true
}

// auditResultDetails is the tool's allowlisted summary of a successful
// result, or nil.
func auditResultDetails(tool string, result any) object {
	facts := auditTools[tool]
	if facts.details == nil {
		return nil
	}
	r, _ := result.(object)
	return facts.details(r)
}

// auditDetailsText renders details as details_json; ok is false when there
// are none or they exceed the original's cap.
func auditDetailsText(details object) (string, bool) {
	if len(details) == 0 {
		return "", false
	}
	// The original writes json.dumps(details, sort_keys=True,
	// separators=(",", ":"), ensure_ascii=False).
	sorted := append(object{}, details...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].key < sorted[j].key })
	text := pyCompact.encode(sorted)
	if len(text) > auditDetailsMaxBytes {
		return "", false
	}
	return text, true
}

// auditCreatedGroup is create_group's details: the new group's id.
func auditCreatedGroup(result object) object {
	if s, ok := auditResultString(result, "group_id"); ok {
		return object{{"created_group_id", s}}
	}
	return nil
}

// auditCount returns the details that count the list at key as name.
func auditCount(key, name string) func(object) object {
	return func(result object) object {
		if n, ok := auditResultLen(result, key); ok {
			return object{{name, n}}
		}
		return nil
	}
}

// auditUpdatedFields is update_group_metadata's details: which of the
// metadata fields the result holds, possibly none.
func auditUpdatedFields(result object) object {
	fields := []any{}
	for _, f := range []string{"description", "name"} {
		if _, ok := auditResultField(result, f); ok {
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
		if v, ok := auditResultField(result, key); ok {
			details = append(details, field{key, v})
		}
	}
	if n, ok := auditResultLen(result, "wakeup_targets"); ok {
		details = append(details, field{"wakeup_target_count", n})
	}
	return details
}

// The three functions below emulate Python (datetime.fromisoformat, int
// and float printing) for the audit log and the dashboard. They stay
// together, unchanged, to move as one into the package's single
// Python-compatibility file.

// auditParseTime reads a stored ISO 8601 timestamp as the original's
// datetime.fromisoformat does; one without a zone is UTC.
func auditParseTime(s string) (time.Time, error) {
	for _, layout := range []string{
		"2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999",
		"2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("parse audit timestamp %q", s)
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
	if f, err := strconv.ParseFloat(lit, 64); err == nil {
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
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expText, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expText)
	sign := ""
	if strings.HasPrefix(mant, "-") {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := fmt.Sprintf("%+03d", exp)
		return sign + m + "e" + es
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}
