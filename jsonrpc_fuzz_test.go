package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzServeLine feeds arbitrary input to the stdio loop of one long-lived,
// initialized session and checks that every line written is one well-formed
// JSON-RPC message (or batch of them) in valid UTF-8, and that the session
// still answers afterwards. The seed corpus is every request line of the
// golden transcripts. Run it with
//
//	go test -run '^$' -fuzz FuzzServeLine -parallel 1 .
func FuzzServeLine(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.jsonl"))
	for _, file := range seeds {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			var step struct {
				Send *string `json:"send"`
			}
			if json.Unmarshal([]byte(line), &step) == nil && step.Send != nil {
				f.Add([]byte(*step.Send))
			}
		}
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":"\udc00","method":"ping"}`))
	f.Add([]byte("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"ping\"}"))
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`))

	st, err := newStore(f.TempDir(), time.Now)
	if err != nil {
		f.Fatal(err)
	}
	var out bytes.Buffer
	s := newServer(st, &out, newServerConfig(version, time.Hour))
	f.Cleanup(func() { s.subs.close(); st.close() })
	if err := s.serve(strings.NewReader(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")); err != nil {
		f.Fatal(err)
	}
	out.Reset()

	f.Fuzz(func(t *testing.T, input []byte) {
		out.Reset()
		if err := s.serve(bytes.NewReader(input)); err != nil {
			t.Fatalf("serve: %v", err)
		}
		checkWireOutput(t, out.Bytes())
		// The session is still usable and initialized.
		out.Reset()
		s.serve(strings.NewReader(`{"jsonrpc":"2.0","id":"after","method":"tools/list"}` + "\n"))
		if !bytes.HasPrefix(out.Bytes(), []byte(`{"jsonrpc": "2.0", "id": "after", "result": {"tools": [`)) {
			t.Fatalf("tools/list after the input: got %.200q", out.String())
		}
	})
}

// checkWireOutput fails unless out is a sequence of lines, each one JSON-RPC
// response or notification, or a non-empty array of responses.
func checkWireOutput(t *testing.T, out []byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		line := sc.Bytes()
		if !utf8.Valid(line) || !json.Valid(line) {
			t.Fatalf("output line is not valid UTF-8 JSON: %.300q", line)
		}
		if line[0] == '[' {
			var batch []json.RawMessage
			if json.Unmarshal(line, &batch) != nil || len(batch) == 0 {
				t.Fatalf("batch answer is not a non-empty array: %.300q", line)
			}
			for _, m := range batch {
				checkWireMessage(t, m)
			}
			continue
		}
		checkWireMessage(t, line)
	}
}

// checkWireMessage fails unless raw is a JSON-RPC 2.0 response with exactly
// one of result and error (and nothing else), or a notification.
func checkWireMessage(t *testing.T, raw []byte) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("message is not an object: %.300q", raw)
	}
	if string(m["jsonrpc"]) != `"2.0"` {
		t.Fatalf("message without jsonrpc 2.0: %.300q", raw)
	}
	if _, ok := m["method"]; ok {
		return
	}
	_, hasResult := m["result"]
	e, hasError := m["error"]
	id, hasID := m["id"]
	if !hasID || hasResult == hasError || len(m) != 3 {
		t.Fatalf("response must have id and exactly one of result and error: %.300q", raw)
	}
	if len(id) == 0 || (id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') && string(id) != "null") {
		t.Fatalf("response id is not a string, number or null: %.300q", raw)
	}
	if hasError {
		var obj struct {
			Code    *int    `json:"code"`
			Message *string `json:"message"`
		}
		if json.Unmarshal(e, &obj) != nil || obj.Code == nil || obj.Message == nil {
			t.Fatalf("error without code and message: %.300q", raw)
		}
	}
}

// FuzzSplitObject checks splitObject and decodeJSONString against
// encoding/json on every valid JSON input.
func FuzzSplitObject(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"b":"}"}],"c":"x\"y\u00e9","d":null}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		var want map[string]json.RawMessage
		werr := json.Unmarshal(raw, &want)
		got, ok := splitObject(raw)
		if ok != (werr == nil && want != nil) || len(got) != len(want) {
			t.Fatalf("splitObject(%q): got %d members (ok %v); want %d (err %v)", raw, len(got), ok, len(want), werr)
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Fatalf("splitObject(%q)[%q]: got %q; want %q", raw, k, got[k], v)
			}
			var ws string
			if v[0] == '"' && json.Unmarshal(v, &ws) == nil {
				if gs, ok := decodeJSONString(v); !ok || gs != ws {
					t.Fatalf("decodeJSONString(%q): got %q; want %q", v, gs, ws)
				}
			}
		}
	})
}
