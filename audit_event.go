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

// auditCallerNameTools are the tools whose "name" argument is the caller's
// own label, and so a fallback for a missing caller_name.
var auditCallerNameTools = map[string]bool{
	"join_group": true, "leave_group": true, "get_all_messages": true, "get_latest_messages": true,
	"get_unread_messages": true, "get_messages_after": true, "search_messages": true, "send_message": true,
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
	if pyStrip(name) == "" && auditCallerNameTools[c.name] {
		name, _ = c.args.str("name")
	}
	if name = pyStrip(name); name != "" {
		e.name = sql.NullString{String: name, Valid: true}
	}
	result := c.result.value
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
	if !c.result.isError {
		if details, ok := auditDetails(c.name, result); ok {
			e.detailsJSON = sql.NullString{String: details, Valid: true}
		}
	}
	return e
}

// auditResultField returns a key of a tool result value: an object built by
// the tools, or a map decoded from JSON.
func auditResultField(v any, key string) (any, bool) {
	switch v := v.(type) {
	case object:
		for _, f := range v {
			if f.key == key {
				return f.value, true
			}
		}
	case map[string]any:
		value, ok := v[key]
		return value, ok
	}
	return nil, false
}

// auditResultString returns a string-valued key of a tool result.
func auditResultString(v any, key string) (string, bool) {
	value, _ := auditResultField(v, key)
	switch value := value.(type) {
	case string:
		return value, true
	case *string:
		if value != nil {
			return *value, true
		}
	}
	return "", false
}

// auditResultLen returns the length of a list-valued key of a tool result.
func auditResultLen(v any, key string) (int, bool) {
	value, _ := auditResultField(v, key)
	switch value := value.(type) {
	case []any:
		return len(value), true
	case stringList:
		return len(value), true
	case []string:
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

// auditDetails builds the allowlisted, content-free summary of a successful
// result, or reports false when the tool has none or it exceeds 2 KiB.
func auditDetails(tool string, result any) (string, bool) {
	details := map[string]any{}
	switch tool {
	case "create_group":
		if s, ok := auditResultString(result, "group_id"); ok {
			details["created_group_id"] = s
		}
	case "list_groups":
		if n, ok := auditResultLen(result, "groups"); ok {
			details["group_count"] = n
		}
	case "update_group_metadata":
		fields := []any{}
		for _, f := range []string{"description", "name"} {
			if _, ok := auditResultField(result, f); ok {
				fields = append(fields, f)
			}
		}
		details["updated_fields"] = fields
	case "get_users":
		if n, ok := auditResultLen(result, "users"); ok {
			details["member_count"] = n
		}
	case "delete_group", "join_group", "leave_group":
		details["completed"] = true
	case "get_all_messages", "get_latest_messages", "get_unread_messages", "get_messages_after", "search_messages":
		if n, ok := auditResultLen(result, "messages"); ok {
			details["message_count"] = n
		}
	case "send_message":
		for _, key := range []string{"message_id", "priority", "routing_reason"} {
			if v, ok := auditResultField(result, key); ok {
				if n, isNumber := v.(json.Number); isNumber {
					v = rawJSON(pyNumber(string(n)))
				}
				details[key] = v
			}
		}
		if n, ok := auditResultLen(result, "wakeup_targets"); ok {
			details["wakeup_target_count"] = n
		}
	}
	if len(details) == 0 {
		return "", false
	}
	// The original writes json.dumps(details, sort_keys=True,
	// separators=(",", ":"), ensure_ascii=False).
	keys := make([]string, 0, len(details))
	for k := range details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sorted := make(object, len(keys))
	for i, k := range keys {
		sorted[i] = field{k, details[k]}
	}
	text := pyCompact.encode(sorted)
	if len(text) > auditDetailsMaxBytes {
		return "", false
	}
	return text, true
}

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
