package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// auditDecode decodes a JSON value into the types the tools build their
// results from, the way a tool result is handed to the audit log.
func auditDecode(t *testing.T, text string) any {
	t.Helper()
	v, err := auditToolValue(json.NewDecoder(strings.NewReader(text)))
	if err != nil {
		t.Fatalf("decode %s: %v", text, err)
	}
	return v
}

// auditToolValue reads the next JSON value from d as the tools would have
// built it: objects as object (keys in order), arrays as []any, integers as
// int64. Tools return no fractions, so a fraction is an error.
func auditToolValue(d *json.Decoder) (any, error) {
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		var o object
		var list []any
		for d.More() {
			var key string
			if tok == '{' {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				key = k.(string)
			}
			v, err := auditToolValue(d)
			if err != nil {
				return nil, err
			}
			if tok == '{' {
				o = append(o, field{key, v})
			} else {
				list = append(list, v)
			}
		}
		if _, err := d.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		if tok == '{' {
			return append(object{}, o...), nil
		}
		return append([]any{}, list...), nil
	case json.Number:
		return tok.Int64()
	}
	return tok, nil
}

// auditTestCall builds the toolCall the tools/call path hands to the audit
// hook. args "" means the arguments member was absent.
func auditTestCall(tool, args, id, payload string, isError bool, category string) toolCall {
	c := toolCall{name: tool, requestID: json.RawMessage(id), started: time.Now()}
	c.args = toolArgs{values: map[string]json.RawMessage{}}
	if args != "" {
		parsed, ok := parseArgs(json.RawMessage(args))
		if !ok {
			parsed = toolArgs{}
		}
		c.args = parsed
	}
	v, _ := auditToolValue(json.NewDecoder(strings.NewReader(payload)))
	c.result = toolResult{value: v, isError: isError, category: category}
	return c
}

func TestAuditDetails(t *testing.T) {
	tests := []struct {
		tool    string
		payload string
		want    string // "" means no details
	}{
		{"send_message", `{"message_id":7,"priority":"high","routing_reason":"mentioned","wakeup_targets":["a","b"],"message":"secret","metadata":{"k":"secret"}}`,
			`{"message_id":7,"priority":"high","routing_reason":"mentioned","wakeup_target_count":2}`},
		{"create_group", `{"group_id":"grp_1","name":"secret","description":"secret"}`, `{"created_group_id":"grp_1"}`},
		{"create_group", `{"group_id":"` + strings.Repeat("x", 3000) + `"}`, ""},
		{"list_groups", `{"groups":[{"name":"secret"},{}]}`, `{"group_count":2}`},
		{"update_group_metadata", `{"group_id":"g","name":"n","description":"d"}`, `{"updated_fields":["description","name"]}`},
		{"update_group_metadata", `{"group_id":"g"}`, `{"updated_fields":[]}`},
		{"get_users", `{"users":[{"name":"a"}]}`, `{"member_count":1}`},
		{"delete_group", `{"group_id":"g","deleted":true}`, `{"completed":true}`},
		{"join_group", `{}`, `{"completed":true}`},
		{"search_messages", `{"messages":[{"message":"secret"},{},{}]}`, `{"message_count":3}`},
		{"get_group_metadata", `{"name":"secret","description":"secret"}`, ""},
		{"get_unread_messages", `{"messages":"not a list"}`, ""},
		{"send_message", `{"message_id":1,"priority":"ünïcode \"q\" <&>","routing_reason":"line\nbreak"}`, `{"message_id":1,"priority":"ünïcode \"q\" <&>","routing_reason":"line\nbreak"}`},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			got, ok := auditDetails(tt.tool, auditDecode(t, tt.payload))
			if ok != (tt.want != "") || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, ok, tt.want)
			}
			if len(got) > auditDetailsMaxBytes {
				t.Fatalf("got %d bytes; want at most %d", len(got), auditDetailsMaxBytes)
			}
		})
	}
	t.Run("cap is on bytes", func(t *testing.T) {
		// 2,048 bytes exactly is allowed; one more is not.
		overhead := len(`{"created_group_id":""}`)
		for _, extra := range []int{0, 1} {
			id := strings.Repeat("é", (auditDetailsMaxBytes-overhead)/2) + strings.Repeat("x", (auditDetailsMaxBytes-overhead)%2+extra)
			_, ok := auditDetails("create_group", object{{"group_id", id}})
			if ok != (extra == 0) {
				t.Fatalf("extra %d: got ok %v; want %v", extra, ok, extra == 0)
			}
		}
	})
}

// TestAuditBuildEvent is a table; its length is the cases'.
func TestAuditBuildEvent(t *testing.T) {
	started := time.Date(2026, 11, 29, 13, 7, 12, 245158000, time.UTC)
	tests := []struct {
		name     string
		tool     string
		args     string
		id       string
		payload  string
		isError  bool
		category string
		want     string
	}{
		{name: "explicit caller_name wins", tool: "update_group_metadata", args: `{"group_id":"g","context_id":"c","name":"New title","caller_name":" operator "}`, id: `2`,
			payload: `{"group_id":"g","name":"New title","description":""}`, want: `2|update_group_metadata|g|c|operator|success|NULL|NULL|{"updated_fields":["description","name"]}`},
		{name: "metadata name is not a caller", tool: "update_group_metadata", args: `{"group_id":"g","context_id":"c","name":"New title","caller_name":"  "}`, id: `"a"`,
			isError: true, category: "validation", payload: `{"error":"x"}`, want: `a|update_group_metadata|g|c|NULL|error|validation|NULL|NULL`},
		{name: "member name fallback for a caller tool", tool: "send_message", args: `{"group_id":"g","context_id":"c","name":"developer","message":"secret"}`, id: `3`,
			isError: true, category: "validation", payload: `{"error":"x"}`, want: `3|send_message|g|c|developer|error|validation|NULL|NULL`},
		{name: "create_group records the new group", tool: "create_group", args: `{"context_id":"c","name":"Group title","caller_name":"lead"}`, id: `"req-1"`,
			payload: `{"group_id":"grp_new","name":"Group title"}`, want: `req-1|create_group|grp_new|c|lead|success|NULL|NULL|{"created_group_id":"grp_new"}`},
		{name: "failed create_group keeps no group", tool: "create_group", args: `{"context_id":"c","caller_name":"lead"}`, id: `4`,
			isError: true, category: "internal", payload: `{"group_id":"grp_new"}`, want: `4|create_group|NULL|c|lead|error|internal|NULL|NULL`},
		{name: "messages counted", tool: "get_unread_messages", args: `{"group_id":"g","context_id":"c","name":"dev","caller_name":"dev"}`, id: `1.0`,
			payload: `{"messages":[{},{}]}`, want: `1.0|get_unread_messages|g|c|dev|success|NULL|2|{"message_count":2}`},
		{name: "arguments not an object", tool: "list_groups", args: `["caller_name"]`, id: `-0`,
			isError: true, category: "validation", payload: `{"error":"tools/call arguments must be an object."}`, want: `0|list_groups|NULL|NULL|NULL|error|validation|NULL|NULL`},
		{name: "arguments null", tool: "list_groups", args: `null`, id: `12345678901234567890`,
			isError: true, category: "validation", payload: `{"error":"x"}`, want: `12345678901234567890|list_groups|NULL|NULL|NULL|error|validation|NULL|NULL`},
		{name: "arguments absent", tool: "list_groups", args: ``, id: `1e3`,
			isError: true, category: "", payload: `{"error":"x"}`, want: `1000.0|list_groups|NULL|NULL|NULL|error|internal|NULL|NULL`},
		{name: "non-string identity ignored", tool: "get_users", args: `{"group_id":5,"context_id":null,"caller_name":7}`, id: `5`,
			isError: true, category: "validation", payload: `{"error":"x"}`, want: `5|get_users|NULL|NULL|NULL|error|validation|NULL|NULL`},
		// encoding/json reads a lone surrogate as U+FFFD: recorded, it would be stored altered.
		{name: "invalid Unicode identity not recorded", tool: "get_users", args: `{"group_id":"g\ud800","context_id":"c\udfff","caller_name":"op\ud800"}`, id: `"r\udc00"`,
			isError: true, category: "validation", payload: `{"error":"x"}`, want: `NULL|get_users|NULL|NULL|NULL|error|validation|NULL|NULL`},
		{name: "invalid Unicode caller name gives way to the member name", tool: "send_message", args: `{"group_id":"g","context_id":"c","name":"dev","caller_name":"\udfffop","message":"m"}`, id: `6`,
			isError: true, category: "validation", payload: `{"error":"x"}`, want: `6|send_message|g|c|dev|error|validation|NULL|NULL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := auditTestCall(tt.tool, tt.args, tt.id, tt.payload, tt.isError, tt.category)
			c.started = started
			e := auditBuildEvent(c, 1500*time.Microsecond)
			ns := func(s sql.NullString) string {
				if !s.Valid {
					return "NULL"
				}
				return s.String
			}
			count := "NULL"
			if e.resultCount.Valid {
				count = fmt.Sprint(e.resultCount.Int64)
			}
			got := strings.Join([]string{ns(e.requestID), e.toolName, ns(e.groupID), ns(e.contextID), ns(e.name), e.outcome,
				ns(e.errorCategory), count, ns(e.detailsJSON)}, "|")
			if got != tt.want {
				t.Fatalf("got %s; want %s", got, tt.want)
			}
			if e.occurredAt != "2026-11-29T13:07:12.245158+00:00" {
				t.Fatalf("got occurred_at %s; want 2026-11-29T13:07:12.245158+00:00", e.occurredAt)
			}
			if e.durationMS != 2 {
				t.Fatalf("got duration %d ms; want 2 (1.5 rounds half to even)", e.durationMS)
			}
		})
	}
}

func TestAuditRequestID(t *testing.T) {
	tests := []struct{ raw, want string }{
		{`"abc"`, "abc"}, {`""`, ""}, {`7`, "7"}, {`-3`, "-3"}, {`-0`, "0"}, {`1.5`, "1.5"}, {`2.0`, "2.0"},
		{`1e16`, "1e+16"}, {`1.5e-5`, "1.5e-05"}, {`0.0001`, "0.0001"}, {`123456789012345678901234567890`, "123456789012345678901234567890"},
		{`1e400`, "inf"}, {`-1e400`, "-inf"}, {`1e-400`, "0.0"}, {`-0.0`, "-0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, ok := auditRequestID(json.RawMessage(tt.raw))
			if !ok || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
	if _, ok := auditRequestID(json.RawMessage(`null`)); ok {
		t.Fatal("got an id for null; want none")
	}
}

// auditDetails builds the allowlisted, content-free summary of a successful
// result, or reports false when the tool has none or it exceeds 2 KiB: what
// auditEvent writes to details_json for a call without a remote address.
func auditDetails(tool string, result any) (string, bool) {
	r, _ := result.(object)
	var details object
	if t := toolsByName[tool]; t != nil && t.auditDetails != nil {
		details = t.auditDetails(r)
	}
	return auditDetailsText(details)
}

// TestAuditIdentityBounded sends every identity of a call a megabyte long,
// in two-byte characters: each is recorded as its whole characters within
// the first 1 KiB, and a short one whole.
func TestAuditIdentityBounded(t *testing.T) {
	huge := "x" + strings.Repeat("é", 1<<19) // 1,024 bytes end inside a character
	args, _ := json.Marshal(map[string]string{"group_id": huge, "context_id": huge, "caller_name": huge})
	id, _ := json.Marshal(huge)
	e := auditBuildEvent(auditTestCall("get_users", string(args), string(id), `{"error":"x"}`, true, "validation"), 0)
	for name, got := range map[string]sql.NullString{"request id": e.requestID, "group_id": e.groupID, "context_id": e.contextID, "caller name": e.name} {
		if !got.Valid || len(got.String) != 1<<10-1 || !strings.HasPrefix(huge, got.String) {
			t.Errorf("%s: got %d bytes (valid %v); want the first 1,023, the whole characters of 1 KiB", name, len(got.String), got.Valid)
		}
	}
	e = auditBuildEvent(auditTestCall("get_users", `{"group_id":"grp_a","context_id":"c1","caller_name":"ops"}`, `7`, `{"users":[]}`, false, ""), 0)
	if e.groupID.String != "grp_a" || e.contextID.String != "c1" || e.name.String != "ops" || e.requestID.String != "7" {
		t.Errorf("short identities: got %+v; want them whole", e)
	}
}
