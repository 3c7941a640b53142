package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestUnicodeJSON(t *testing.T) {
	tests := []struct {
		raw  string
		want bool
	}{
		{`"plain"`, true},
		{`"é 🎉"`, true},
		{`"\u00e9 \ud83c\udf89"`, true},
		{`"\uD83C\uDF89"`, true},
		{`"a\\ud800"`, true}, // an escaped backslash, then text
		{`["x", {"k": "\n\"\\"}]`, true},
		{`"\ud800"`, false},
		{`"\udfff"`, false},
		{`"\ud800x"`, false},
		{`"\ud800\u0041"`, false},
		{`"\udc00\ud800"`, false},
		{"\"bad \xff byte\"", false},
		{"\"\xed\xa0\x80\"", false}, // a surrogate encoded as UTF-8
		{`["ok", "\ud800"]`, false},
	}
	for _, tt := range tests {
		if got := unicodeJSON([]byte(tt.raw)); got != tt.want {
			t.Errorf("unicodeJSON(%q): got %v; want %v", tt.raw, got, tt.want)
		}
	}
}

func TestRawJSONWritePyJSON(t *testing.T) {
	tests := []struct{ lit, want string }{
		{`"abc"`, `"abc"`},
		{`"\udc00"`, `"\udc00"`},
		{`"\uDC00\uD800"`, `"\udc00\ud800"`},
		{`"é🎉"`, `"\u00e9\ud83c\udf89"`},
		{`"a\/b\"\\\n\t"`, `"a/b\"\\\n\t"`},
		{"\"\x7f\"", `"\u007f"`},
		{"\"bad \xff\"", `"bad \udcff"`},
		{`"\u0041\u000a\u0022\u005c\u002f\u007f\u00E9\u0009"`, `"A\n\"\\/\u007f\u00e9\t"`},
	}
	for _, tt := range tests {
		var b strings.Builder
		rawJSON(tt.lit).writePyJSON(&b, pyDumps)
		if got := b.String(); got != tt.want {
			t.Errorf("rawJSON(%q).writePyJSON: got %s; want %s", tt.lit, got, tt.want)
		}
	}
}

// TestRequestIDEchoedAsSent shows that a request id is answered with the id
// the client sent, lone surrogates and all, not with U+FFFD.
func TestRequestIDEchoedAsSent(t *testing.T) {
	s, _ := newTestServer(t)
	for _, tt := range []struct{ id, want string }{
		{`"\udc00"`, `"\udc00"`},
		{`"\ud800\ud800"`, `"\ud800\ud800"`},
		{`"ü\ud83d\ude00"`, `"\u00fc\ud83d\ude00"`},
		{"\"\xff\"", `"\udcff"`},
	} {
		got := exchangeLine(t, s, `{"jsonrpc":"2.0","id":`+tt.id+`,"method":"ping"}`)
		want := `{"jsonrpc": "2.0", "id": ` + tt.want + `, "result": {}}`
		if got != want {
			t.Errorf("ping with id %s: got %s; want %s", tt.id, got, want)
		}
	}
}

// TestInvalidUnicodeArgumentsRefused shows that identity fields, group names
// and message text that are not valid Unicode are refused with a validation
// error naming the argument, and that nothing is stored for them: "\ud800"
// and "\udfff" must never become the same member.
func TestInvalidUnicodeArgumentsRefused(t *testing.T) {
	s, _ := newTestServer(t)
	initializeSession(t, s)
	g := mustCreateGroup(t, s, "creator")
	mustJoin(t, s, g, "alice", "Alice")
	const lone, other = `"\ud800"`, `"\udfff"`
	cases := []struct {
		name, tool, args, field string
	}{
		{"join context_id", "join_group", `{"group_id":"` + g + `","context_id":` + lone + `,"name":"x"}`, "context_id"},
		{"join name", "join_group", `{"group_id":"` + g + `","context_id":"bob","name":` + other + `}`, "name"},
		{"send context_id", "send_message", `{"group_id":"` + g + `","context_id":` + other + `,"name":"x","message":"hi"}`, "context_id"},
		{"send message", "send_message", `{"group_id":"` + g + `","context_id":"alice","name":"Alice","message":"hi \udc00 there"}`, "message"},
		{"send message bytes", "send_message", "{\"group_id\":\"" + g + "\",\"context_id\":\"alice\",\"name\":\"Alice\",\"message\":\"bad \xc3\"}", "message"},
		{"send wake ids", "send_message", `{"group_id":"` + g + `","context_id":"alice","name":"Alice","message":"hi","wake_context_ids":["\ud800"]}`, "wake_context_ids"},
		{"create name", "create_group", `{"context_id":"c","name":` + lone + `}`, "name"},
		{"update description", "update_group_metadata", `{"group_id":"` + g + `","context_id":"creator","description":` + lone + `}`, "description"},
		{"search query", "search_messages", `{"group_id":"` + g + `","context_id":"alice","name":"Alice","query":` + lone + `}`, "query"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			line := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+10) + `,"method":"tools/call","params":{"name":"` + tc.tool + `","arguments":` +
				strings.TrimSuffix(tc.args, "}") + `,"caller_name":"t"}}}`
			out := toolText(t, exchangeLine(t, s, line))
			msg, _ := out["error"].(string)
			if !strings.HasPrefix(msg, tc.field+" must be valid Unicode") {
				t.Errorf("got %q; want a validation error naming %s", msg, tc.field)
			}
		})
	}
	users := mustCall(t, s, "get_users", map[string]any{"group_id": g})
	if n := len(users["users"].([]any)); n != 1 {
		t.Errorf("get_users: got %d members; want only alice", n)
	}
	all := mustCall(t, s, "get_all_messages", map[string]any{"group_id": g, "context_id": "alice", "name": "Alice"})
	if n := len(all["messages"].([]any)); n != 0 {
		t.Errorf("get_all_messages: got %d messages; want none stored", n)
	}
}

// TestSplitObjectMatchesUnmarshal shows that splitObject and decodeJSONString
// read objects and strings exactly as encoding/json does.
func TestSplitObjectMatchesUnmarshal(t *testing.T) {
	objects := []string{
		`{}`, ` { } `, `{"a":1}`, `{"a" : [1, {"b": "}"}] , "c":"x\"y", "d": null, "e": -1.5e3}`,
		`{"a":1,"a":2}`, `{"\u0063ontext_id":"x"}`, `{"k":"\\"}`, `{"k":{"n":{"m":[[],{}]}},"z":true}`,
		`{"é":"\ud83c\udf89 é \n\t\/"}`, `[1]`, `"s"`, `3`,
		`{"lone":"\ud800x","low first":"\udc00\ud800"}`, // not Unicode: encoding/json's U+FFFD
	}
	for _, raw := range objects {
		var want map[string]json.RawMessage
		werr := json.Unmarshal([]byte(raw), &want)
		got, ok := splitObject([]byte(raw))
		if ok != (werr == nil && want != nil) {
			t.Errorf("splitObject(%s): ok %v; want %v", raw, ok, werr == nil)
			continue
		}
		if len(got) != len(want) {
			t.Errorf("splitObject(%s): got %d members; want %d", raw, len(got), len(want))
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Errorf("splitObject(%s)[%q]: got %s; want %s", raw, k, got[k], v)
			}
			var ws string
			if v[0] == '"' && json.Unmarshal(v, &ws) == nil {
				if gs, ok := decodeJSONString(v); !ok || gs != ws {
					t.Errorf("decodeJSONString(%s): got %q; want %q", v, gs, ws)
				}
			}
		}
	}
}
