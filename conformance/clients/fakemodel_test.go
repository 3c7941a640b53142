package clients

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// modelRequest is one request a client sent to the fake model, kept whole:
// its body is exactly what the model would have seen.
type modelRequest struct {
	at   time.Time
	path string
	body []byte
	// main is true for the agent loop's requests, the ones that offer
	// tools; a client's side requests (titles, summaries) offer none.
	main bool
}

// modelReply is what the script answers: text, or one tool call.
type modelReply struct {
	text      string
	toolName  string
	toolInput map[string]any
}

// modelScript picks the reply to the n-th main request (from 0); side
// requests always get a short text.
type modelScript func(n int, req modelRequest) modelReply

// fakeModel is the Anthropic Messages API on loopback, streaming its
// answers as server-sent events the way the real one does.
type fakeModel struct {
	url    string
	script modelScript
	dump   string // when set, each request body is written to dump.requestNN.json

	mu       sync.Mutex
	requests []modelRequest
	mains    int
	arrived  chan struct{} // closed and replaced at every request
}

// newFakeModel serves the script on 127.0.0.1 until the test ends.
func newFakeModel(t *testing.T, script modelScript) *fakeModel {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeModel{url: "http://" + ln.Addr().String(), script: script, arrived: make(chan struct{})}
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return m
}

// ServeHTTP records every request and answers /v1/messages from the script.
func (m *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var head struct {
		Stream bool              `json:"stream"`
		Model  string            `json:"model"`
		Tools  []json.RawMessage `json:"tools"`
	}
	json.Unmarshal(body, &head)
	req := modelRequest{at: time.Now(), path: r.URL.Path, body: body, main: len(head.Tools) > 0}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	if m.dump != "" {
		os.WriteFile(fmt.Sprintf("%s.request%02d.json", m.dump, len(m.requests)), body, 0o644)
	}
	n := -1
	if req.main && (r.URL.Path == "/v1/messages" || r.URL.Path == "/v1/responses") {
		n = m.mains
		m.mains++
	}
	close(m.arrived)
	m.arrived = make(chan struct{})
	m.mu.Unlock()

	switch {
	case r.URL.Path == "/v1/responses":
		reply := modelReply{text: "ok"}
		if n >= 0 {
			reply = m.script(n, req)
		}
		streamResponse(w, reply)
		return
	case r.URL.Path == "/v1/messages/count_tokens":
		writeJSON(w, map[string]any{"input_tokens": 100})
		return
	case r.URL.Path != "/v1/messages":
		w.WriteHeader(http.StatusNotFound)
		writeJSON(w, map[string]any{"type": "error", "error": map[string]any{"type": "not_found_error", "message": "fake model: no " + r.URL.Path}})
		return
	}
	reply := modelReply{text: "ok"}
	if n >= 0 {
		reply = m.script(n, req)
	}
	model := head.Model
	if model == "" {
		model = "claude-fake"
	}
	if head.Stream {
		streamReply(w, model, reply)
		return
	}
	writeJSON(w, messageObject(model, reply, reply.blocks()))
}

// blocks renders the reply as Messages API content blocks.
func (r modelReply) blocks() []map[string]any {
	if r.toolName == "" {
		return []map[string]any{{"type": "text", "text": r.text}}
	}
	var out []map[string]any
	if r.text != "" {
		out = append(out, map[string]any{"type": "text", "text": r.text})
	}
	return append(out, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_fake%d", time.Now().UnixNano()), "name": r.toolName, "input": r.toolInput})
}

func (r modelReply) stopReason() string {
	if r.toolName != "" {
		return "tool_use"
	}
	return "end_turn"
}

func messageObject(model string, r modelReply, content []map[string]any) map[string]any {
	return map[string]any{"id": fmt.Sprintf("msg_fake%d", time.Now().UnixNano()), "type": "message", "role": "assistant",
		"model": model, "content": content, "stop_reason": r.stopReason(), "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 100, "output_tokens": 10}}
}

// streamReply writes the reply as the event sequence of a streamed message:
// message_start, each block's start, delta and stop, message_delta with
// the stop reason, message_stop.
func streamReply(w http.ResponseWriter, model string, r modelReply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	event := func(name string, data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	start := messageObject(model, r, []map[string]any{})
	start["stop_reason"] = nil
	event("message_start", map[string]any{"type": "message_start", "message": start})
	for i, b := range r.blocks() {
		switch b["type"] {
		case "text":
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": b["text"]}})
		case "tool_use":
			input, _ := json.Marshal(b["input"])
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		}
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": r.stopReason(), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 10}})
	event("message_stop", map[string]any{"type": "message_stop"})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// snapshot returns the requests recorded so far.
func (m *fakeModel) snapshot() []modelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]modelRequest(nil), m.requests...)
}

// waitFor waits until some request satisfies ok, returning it, or reports
// false at the deadline.
func (m *fakeModel) waitFor(d time.Duration, ok func(modelRequest) bool) (modelRequest, bool) {
	deadline := time.After(d)
	seen := 0
	for {
		m.mu.Lock()
		reqs, arrived := m.requests[seen:], m.arrived
		seen = len(m.requests)
		m.mu.Unlock()
		for _, r := range reqs {
			if ok(r) {
				return r, true
			}
		}
		select {
		case <-arrived:
		case <-deadline:
			return modelRequest{}, false
		}
	}
}

// delivery is what the model saw of one marker.
type delivery struct {
	// count is how many times the marker stands in the conversation: the
	// most occurrences in any one main request, since each request repeats
	// the whole conversation so far.
	count int
	// first is the first main request that carries it.
	first   time.Time
	perMain []int
}

// delivered counts the marker in the main requests recorded so far.
func (m *fakeModel) delivered(marker string) delivery {
	var d delivery
	for _, r := range m.snapshot() {
		if !r.main {
			continue
		}
		n := strings.Count(string(r.body), marker)
		d.perMain = append(d.perMain, n)
		if n > 0 && d.first.IsZero() {
			d.first = r.at
		}
		d.count = max(d.count, n)
	}
	return d
}

// contexts returns, for a failure message, every stretch of the main
// requests' text around the marker, so the report shows what the model saw.
func (m *fakeModel) contexts(marker string) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range m.snapshot() {
		if !r.main {
			continue
		}
		s := string(r.body)
		for i := 0; ; {
			j := strings.Index(s[i:], marker)
			if j < 0 {
				break
			}
			at := i + j
			ctx := s[max(0, at-300):min(len(s), at+len(marker)+100)]
			if !seen[ctx] {
				seen[ctx] = true
				out = append(out, ctx)
			}
			i = at + len(marker)
		}
	}
	return out
}

// sources says where each occurrence of the marker stands in the main
// request that carries it most often: the nearest line above it naming a
// hook (Claude Code labels hook output so), or the block type holding it.
func (m *fakeModel) sources(marker string) []string {
	var best []string
	for _, r := range m.snapshot() {
		var body struct {
			Messages []any `json:"messages"`
		}
		if !r.main || json.Unmarshal(r.body, &body) != nil {
			continue
		}
		var found []string
		walkStrings(body.Messages, "", func(blockType, s string) {
			lines := strings.Split(s, "\n")
			for i, line := range lines {
				if !strings.Contains(line, marker) {
					continue
				}
				label := blockType
				for j := i; j >= 0; j-- {
					if strings.Contains(strings.ToLower(lines[j]), "hook") {
						label = blockType + ": " + lines[j][:min(len(lines[j]), 110)]
						break
					}
				}
				for range strings.Count(line, marker) {
					found = append(found, label)
				}
			}
		})
		if len(found) > len(best) {
			best = found
		}
	}
	return best
}

// walkStrings calls f with every string in v and the type of the content
// block holding it.
func walkStrings(v any, blockType string, f func(blockType, s string)) {
	switch v := v.(type) {
	case string:
		f(blockType, v)
	case []any:
		for _, e := range v {
			walkStrings(e, blockType, f)
		}
	case map[string]any:
		if t, ok := v["type"].(string); ok && blockType != "tool_result" {
			blockType = t
		}
		if role, ok := v["role"].(string); ok {
			blockType = role
		}
		for _, e := range v {
			walkStrings(e, blockType, f)
		}
	}
}

// streamResponse writes the reply as an OpenAI Responses API event stream,
// the wire a custom Codex model_provider speaks: response.created, each
// output item added and done, response.completed.
func streamResponse(w http.ResponseWriter, r modelReply) {
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	event := func(data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", data["type"], b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	id := fmt.Sprintf("resp_fake%d", time.Now().UnixNano())
	event(map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	var item map[string]any
	if r.toolName != "" {
		args, _ := json.Marshal(r.toolInput)
		item = map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": "call_" + id, "name": r.toolName, "arguments": string(args)}
		if ns, name, ok := strings.Cut(r.toolName, "/"); ok {
			item["namespace"], item["name"] = ns, name
		}
	} else {
		item = map[string]any{"type": "message", "role": "assistant", "id": "msg_" + id,
			"content": []map[string]any{{"type": "output_text", "text": r.text, "annotations": []any{}}}}
		event(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
		event(map[string]any{"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_" + id, "content_index": 0, "delta": r.text})
	}
	event(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	event(map[string]any{"type": "response.completed", "response": map[string]any{"id": id, "output": []any{item},
		"usage": map[string]any{"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 110}}})
}

// waitMains waits until n main requests have arrived.
func (m *fakeModel) waitMains(n int, limit time.Duration) bool {
	count := 0
	_, ok := m.waitFor(limit, func(r modelRequest) bool {
		if r.main {
			count++
		}
		return count >= n
	})
	return ok
}
